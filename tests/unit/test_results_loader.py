"""The report survives its folder: arbitrary JSON never crashes the loader, broken files cost one warning each."""

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import make_result, run_script
from scalelab import results

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=30,
)
# Also near-misses: a real result with one field replaced by an arbitrary value.
near_misses = st.builds(
    lambda section, key, value: _replace(section, key, value),
    st.sampled_from([None, "workload", "launch", "timing"]),
    st.sampled_from(["schema_version", "kind", "run_id", "status", "world_size", "num_nodes", "samples_per_s",
                     "model", "train_time_s"]),
    json_values,
)


def _replace(section, key, value):
    data = make_result()
    (data if section is None else data[section])[key] = value
    return data


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, near_misses))
def test_validate_accepts_or_explains_any_json(value):
    try:
        out = results.validate(json.loads(json.dumps(value)))
    except results.ResultError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert out["schema"] == results.SCHEMA and out["launch"]["world_size"] >= 1


def test_report_with_100_broken_and_foreign_files(tmp_path):
    out = tmp_path / "outputs"
    for r in (make_result("good1", 1, samples_per_s=100), make_result("good2", 2, samples_per_s=150)):
        results.write(str(out), r)
    rng = random.Random(1)
    good = json.dumps(make_result("x"))
    makers = [
        lambda: "",  # empty
        lambda: good[: rng.randrange(1, len(good) - 1)],  # truncated mid-write
        lambda: json.dumps({"name": "another tool", "value": rng.random()}),  # foreign
        lambda: json.dumps([1, 2, 3]),
        lambda: json.dumps({**make_result("y"), "schema_version": 7}),  # newer schema
        lambda: bytes(rng.randrange(256) for _ in range(64)).decode("latin-1"),  # binary junk
    ]
    for i in range(100):
        folder = out / f"broken-{i:03d}"
        folder.mkdir()
        (folder / "result.json").write_text(makers[i % len(makers)](), encoding="latin-1")
    proc = run_script("benchmark.py", "--output_dir", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("benchmark.py: warning: skipped")]
    assert len(warnings) == 100 and len(proc.stderr.splitlines()) == 100
    assert "1.50×" in proc.stdout and "75 %" in proc.stdout  # the two good runs still make their table
