"""The report's columns come from one table (report/columns.py): the frames and the exported files hold to it."""

import math
import struct

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ROWS, _bench, _with_comm, make_result
from scalelab.keys import CONFIGURATION
from scalelab.report import columns, explain, export
from scalelab.report.frames import runs_frame, scaling_frame


def _found():
    found = [_with_comm(make_result(f"r{w}{k}", w, samples_per_s=100 * w - k), 0.008, 0.002, 0.001, 0.01)
             for w in (1, 2) for k in range(2)]
    return found + [make_result("boom", 2, status="failed"), _bench(2, ROWS)]


def test_every_column_of_the_runs_frame_comes_from_the_table_and_the_numeric_ones_are_numbers():
    runs = runs_frame(_found())
    assert list(runs.columns) == list(columns.NAMES) == [c.name for c in columns.RUNS]
    assert len(set(columns.NAMES)) == len(columns.NAMES)  # one declaration per name
    for name in columns.NUMERIC:
        assert pd.api.types.is_numeric_dtype(runs[name]), name


def test_every_combined_column_of_the_table_is_in_the_scaling_frame_and_nothing_else_is_aggregated():
    """A column declared with a `combine` but left out of the aggregation fails here, as does an aggregation
    that no declaration asked for."""
    declared = {out for c in columns.RUNS for out in c.combined()} | set(columns.THROUGHPUT)
    assert {"runs", "fingerprinted", "throughput_max", "step_s", "starved"} <= declared
    ok = runs_frame(_found()).query("status == 'completed'").assign(throughput=1.0)
    assert set(columns.aggregations(ok)) == declared
    scaling = scaling_frame(runs_frame(_found()))
    keys = [c.name for c in columns.RUNS if c.combine == "key"]
    assert keys == CONFIGURATION  # the table's keys are those the scaling frame groups by
    combined = list(scaling.columns[:len(keys) + len(declared)])
    assert combined[:len(keys)] == keys and set(combined[len(keys):]) == declared
    assert set(columns.SCALING_ORDER) <= declared  # the order pins no name the table lost


def test_the_scaling_frame_combines_repeats_as_the_table_says():
    scaling = scaling_frame(runs_frame(_found())).set_index("world_size")
    assert (scaling.loc[2, "runs"], scaling.loc[2, "throughput"], scaling.loc[2, "throughput_min"]) == (2, 199.5, 199)
    by_name = {c.name: c for c in columns.RUNS}
    assert [by_name[n].combined() for n in ("world_size", "devices", "run_id", "step_s")] == [
        {}, {}, {"runs": "size"}, {"step_s": "median"}]  # a key, a runs-only column, a renamed one, a plain one


def test_every_exported_column_is_a_column_of_the_annotated_scaling_frame_and_goes_to_a_known_file():
    found = _found()
    scaling = explain.annotate(scaling_frame(runs_frame(found)), explain.bench_frame(found))
    assert set(columns.exported()) <= set(scaling.columns)
    assert {f for files in columns.EXPORTED.values() for f in files.split()} == {"scaling", "step"}
    assert export.SCALING_COLUMNS[:3] == ["letter", "describe", "hardware"] and "mfu" in export.STEP_COLUMNS


def test_a_path_reads_a_missing_or_null_section_as_empty_and_a_missing_or_null_field_as_its_default():
    read = columns.at("timing.comm.waited_s", default=0)
    assert read({"timing": {"comm": {"waited_s": 0.5}}}) == 0.5 and read({"timing": {"comm": {"waited_s": 0}}}) == 0
    assert read({"timing": {"comm": None}}) == 0 and read({}) == 0
    assert read({"timing": {"comm": {"waited_s": None}}}) == 0  # null: not recorded, as a field a writer left out
    assert columns.at("timing.comm.waited_s")({"timing": {"comm": {"waited_s": None}}}) is None


def test_a_list_of_bucket_sizes_reads_as_a_tuple_and_an_empty_or_missing_one_as_none():
    """The all-reduce prediction and the lever view take a run's bucket sizes only as a tuple (a list is passed
    over): the sizes in order; none recorded (an empty list, a null, no comm section) is None, never ()."""
    read = columns.sizes("timing.comm.bucket_bytes")
    assert read({"timing": {"comm": {"bucket_bytes": [25_000_000, 1_000]}}}) == (25_000_000, 1_000)
    for empty in ({"timing": {"comm": {"bucket_bytes": []}}}, {"timing": {"comm": {"bucket_bytes": None}}},
                  {"timing": {"comm": None}}, {}):
        assert read(empty) is None, empty


def test_each_file_exports_its_own_columns():
    """columns.exported(file): scaling.csv's columns are not step_breakdown.csv's; None lists every one once."""
    from scalelab.report import columns

    scaling, step = columns.exported("scaling"), columns.exported("step")
    assert "efficiency" in scaling and "compute_s" not in scaling and "compute_s" in step and "efficiency" not in step
    assert columns.exported() == list(columns.EXPORTED) and "letter" in scaling and "letter" in step


def test_a_configuration_is_its_group_sizes_as_integers_and_its_link_or_nothing():
    """keys.configuration: what makes two runs repeats (the forecast) and joins the track record to the table (the
    report); a frame's float sizes and a missing link name the same configuration as a record's."""
    from types import SimpleNamespace

    from scalelab.keys import configuration

    record = SimpleNamespace(group="g", world_size=2, num_nodes=2, link="emulated 2 Gbit/s")
    assert configuration(record) == ("g", 2, 2, "emulated 2 Gbit/s")
    row = SimpleNamespace(group="g", world_size=2.0, num_nodes=1.0, link=None)
    assert configuration(row) == ("g", 2, 1, "") and isinstance(configuration(row)[1], int)
    assert configuration(SimpleNamespace(group="h", world_size=4, num_nodes=2, link="")) == ("h", 4, 2, "")


def test_the_scaling_frames_combined_columns_keep_the_order_older_files_had():
    """--save_csv writes the scaling frame whole: its combined columns in SCALING_ORDER (the older files' order),
    not the declaration's nor the alphabet's."""
    scaling = scaling_frame(runs_frame([make_result("a", 1), make_result("b", 2)]))
    combined = [c for c in scaling.columns if c in columns.SCALING_ORDER]
    assert combined == [c for c in columns.SCALING_ORDER if c in scaling.columns] and len(combined) > 40
    assert combined[:4] == ["runs", "throughput", "throughput_min", "throughput_max"]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=40))
def test_a_loss_curve_is_its_values_bit_for_bit_and_written_as_their_tuple(values):
    """columns.Curve keeps a run's curve packed (a quarter of a tuple's memory): it iterates and is written as the
    tuple of its values, every bit of each (NaN, -0.0) kept, and stays one cell of a frame; none: no curve."""
    curve = columns.Curve.of(values)
    if not values:
        assert curve is None
        return
    assert len(curve) == len(values) and list(map(_bits, curve)) == list(map(_bits, values))
    assert repr(curve) == repr(tuple(values)) and str(curve) == str(tuple(values))
    if not any(math.isnan(v) for v in values):  # NaN equals nothing, in a tuple as in a curve
        assert curve == tuple(values) and tuple(values) == curve and hash(curve) == hash(tuple(values))
    assert curve != list(values) and curve != columns.Curve.of(values + [1.0])
    again = columns.Curve.of(values)  # the same curve read again: equal, one hash, NaN and all
    first = hash(curve)
    held = [float(i) + 0.5 for i in range(len(values) + 256)]  # new floats of its values next: a NaN's id differs
    assert curve == again and hash(again) == first and held
    loads = []
    lazy = columns.Curve(load=lambda: loads.append(1) or curve.packed)  # its bytes read when first used, once
    assert not loads and lazy == curve and repr(lazy) == repr(curve) and len(lazy) == len(curve) and loads == [1]
    frame = pd.DataFrame([(curve, 1), (None, 2)], columns=["c", "n"])  # as the runs frame is built: rows
    assert frame.shape == (2, 2) and frame["c"].iloc[0] is curve
    assert frame.to_csv(index=False) == pd.DataFrame([(tuple(values), 1), (None, 2)],
                                                     columns=["c", "n"]).to_csv(index=False)


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)
