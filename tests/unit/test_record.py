"""result.json's one declaration (scalelab/record.py): its published JSON Schema and appendix C are generated from it,
every kept result fits both it and that schema (checked by an independent validator, jsonschema), the two never
disagree on a field changed at random, and the report's columns cannot name a field it does not declare."""

import copy
import glob
import importlib
import json
import os
import subprocess
import sys
import tempfile
import typing

import jsonschema
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import ROOT, SRC
from scalelab import record, results, workloads
from scalelab.errors import ResultError
from scalelab.record import kinds
from scalelab.report import columns

REPO = str(ROOT)
KEPT = sorted(glob.glob(os.path.join(REPO, "tests", "data", "**", "result.json"), recursive=True))
VALIDATOR = jsonschema.Draft202012Validator(record.json_schema())


def test_the_shipped_schema_and_appendix_are_the_declarations():
    """docs/result.schema.json and docs/appendix-c-result-fields.md are what `python -m scalelab.record` prints:
    a field added, renamed or rebounded in record.py without regenerating them fails here."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    for args, shipped in (([], "result.schema.json"), (["--markdown"], "appendix-c-result-fields.md")):
        printed = subprocess.run([sys.executable, "-m", "scalelab.record", *args], capture_output=True, text=True,
                                 env=env, check=True).stdout
        with open(os.path.join(REPO, "docs", shipped), encoding="utf-8") as f:
            assert f.read() == printed, f"docs/{shipped} is stale: python -m scalelab.record {' '.join(args)}"
    jsonschema.Draft202012Validator.check_schema(record.json_schema())


def test_the_published_texts_are_made_in_process_from_the_declaration_at_test_time(capsys):
    """The same comparison through publish.cli in this process (what __main__ runs), computed now, not at import:
    a mutation run (make mutation) starts no process, and its edits are live only while a test runs."""
    for args, shipped in (([], "result.schema.json"), (["--markdown"], "appendix-c-result-fields.md")):
        assert record.publish.cli(args) == 0
        with open(os.path.join(REPO, "docs", shipped), encoding="utf-8") as f:
            assert capsys.readouterr().out == f.read(), f"docs/{shipped} is stale"
    assert record.publish.cli(["--json"]) == 2 and capsys.readouterr().err.startswith("usage: python -m scalelab")


@pytest.mark.parametrize("path", KEPT, ids=lambda p: os.path.relpath(p, os.path.join(REPO, "tests", "data")))
def test_every_kept_result_fits_the_published_schema(path):
    """Every version kept in tests/data, upgraded by load, is a result the published schema accepts."""
    data = results.load(path)
    errors = sorted(VALIDATOR.iter_errors(data), key=str)
    assert not errors, f"{'.'.join(map(str, errors[0].absolute_path))}: {errors[0].message[:200]}"


# what a workload block's options hold: its workload's identity options (its own module declares them)
OPTIONS = {f"workload.options.{name}" for spec in workloads.BUILTIN.values() for name in spec.identity}
DOCS = sorted(glob.glob(os.path.join(REPO, "docs", "results", "**", "result.json"), recursive=True))


def test_every_field_a_kept_result_holds_is_declared():
    """A reader learns every field from the declaration: no kept result (every version in tests/data, the chapters'
    folders), upgraded, holds a field it does not name (its workload's own options are under workload.options, each
    in appendix C)."""
    assert DOCS, "the chapters' result folders moved"
    for path in KEPT + DOCS:
        data = results.load(path)
        assert record.undeclared(data) == [], (path, record.undeclared(data))
        assert {f"workload.options.{k}" for k in data.get("workload", {}).get("options", {})} <= OPTIONS, path
    appendix = open(os.path.join(REPO, "docs", "appendix-c-result-fields.md"), encoding="utf-8").read()
    assert all(f"`{name}`" in appendix for name in OPTIONS)


def test_a_field_no_block_declares_is_found_wherever_it_is():
    """undeclared finds a made-up field at every depth, in a list of blocks and through a mapping of blocks, and
    nothing where every field is declared."""
    data = results.load(KEPT[0] if json.load(open(KEPT[0]))["kind"] == "training" else KEPT[1])
    base = set(record.undeclared(data))
    planted = copy.deepcopy(data)
    planted["made_up"] = 1
    planted["timing"]["made_up_s"] = 1.0
    planted["timing"].setdefault("comm", {})["made_up"] = 2
    planted["ranks"][-1]["made_up"] = [1]
    planted["launch"]["link"] = {"gbit": 1.0, "made_up": None}
    found = set(record.undeclared(planted)) - base
    assert found == {"made_up", "timing.made_up_s", "timing.comm.made_up", "ranks[].made_up", "launch.link.made_up"}
    planted["config"] = {"anything": 1}  # the run's flags: their parser declares them
    assert set(record.undeclared(planted)) - base == found


def test_every_kind_is_kept():
    assert {json.load(open(p))["kind"] for p in KEPT} == set(record.KINDS)


def test_a_column_naming_no_declared_field_fails_at_once():
    """A misspelt path was an empty column; now it cannot be written."""
    assert columns.at("timing.comm.waited_s")({"timing": {"comm": {"waited_s": 0.5}}}) == 0.5
    with pytest.raises(LookupError, match="timing.comm.waited is not a field of result.json"):
        columns.at("timing.comm.waited")
    assert record.declared("timing.step_s.anything") and record.declared("metrics.val_acc")
    assert not record.declared("timing.step") and not record.declared("launch.link.gbit.x")
    # each kind answered from its own declaration (each read once)
    assert record.declared("rows", "allreduce") and not record.declared("rows")
    assert record.declared("ranks") and not record.declared("ranks", "allreduce")


# --- the declaration and the published schema agree on every field ---------------------------------------------

_BASES = [results.load(p) for p in KEPT]  # each upgraded to the current version: what the report reads
_LEAVES = {kind: [p for p, _ in record.leaves(kind) if p not in ("schema", "schema_version")] for kind in record.KINDS}
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) |
                    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=6)
NEAR_BOUNDS = st.sampled_from([-1, 0, 0.5, 1, 2, 1e6, 1e6 + 1, 2**63, 1e31, "", "x" * 10_001, [], {}, True, None])


def _put(data: dict, path: str, value) -> bool:
    """Set the field at a declared path (the first item of a list of blocks); False where a section is absent."""
    *sections, last = path.split(".")
    for key in sections:
        name, listed = key.removesuffix("[]"), key.endswith("[]")
        data = data.get(name) if isinstance(data, dict) else None
        if listed:
            data = data[0] if isinstance(data, list) and data else None
        if not isinstance(data, dict):
            return False
    data[last] = value
    return True


@settings(max_examples=int(os.environ.get("SCALELAB_FUZZ_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(_BASES), pick=st.integers(0, 10**6), value=JSON | NEAR_BOUNDS)
def test_the_declaration_and_its_published_schema_agree_on_any_value_anywhere(base, pick, value):
    """Any JSON value at any declared field of a real result: record.check accepts it exactly where the published
    schema does (but for the checks across fields, which JSON Schema cannot state), and a refusal names that field
    (or the list or block it is in, or a field inside the value) in one line."""
    leaves = _LEAVES[base["kind"]]
    path = leaves[pick % len(leaves)]
    data = copy.deepcopy({k: v for k, v in base.items() if k != "_path"})
    if not _put(data, path, value):
        return
    schema_ok = VALIDATOR.is_valid(data)
    try:
        record.check(data)
        ok, said = True, ""
    except ResultError as exc:
        ok, said = False, str(exc)
    if not ok and not said.startswith("field "):
        return  # record.consistent: ranks against the world, lists against each other
    if schema_ok and not ok and _fits(_whole(data)):
        return  # the one difference JSON Schema cannot state: its "integer" takes 3.0, scalelab's counts do not
    assert ok == schema_ok, f"{path}={value!r}: record says {said or 'fine'}, schema {'fine' if schema_ok else 'no'}"
    if not ok:
        named, where = said.split(":")[0].removeprefix("field ").removesuffix(" missing"), path.replace("[]", "[0]")
        assert "\n" not in said and "[...]" not in said, said  # one line, the field's own name (not msgspec's [...])
        assert named.startswith(where) or where.startswith(named.split("[")[0]), said


def _whole(value):
    """Integral floats as ints, anywhere in a value."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return value


def _fits(data) -> bool:
    """Every field fits its declaration (the checks across fields aside)."""
    try:
        record.check(data)
        return True
    except ResultError as exc:
        return not str(exc).startswith("field ")


def test_a_refusal_says_the_declared_bounds():
    """The line names the field, its declared bounds and the value (the hand validators' words, kept)."""
    data = copy.deepcopy(next(b for b in _BASES if b["kind"] == "training"))
    data["timing"]["comm"]["comm_share"] = 1.016
    with pytest.raises(ResultError, match=r"^field timing\.comm\.comm_share: expected a number from 0 to 1 or null, "
                                          r"got 1\.016$"):
        record.check(data)
    data = copy.deepcopy(next(b for b in _BASES if b["kind"] == "allreduce"))
    del data["rows"][0]["time_s"]
    with pytest.raises(ResultError, match=r"^field rows\[0\]\.time_s missing$"):
        record.check(data)


def test_a_field_a_block_does_not_declare_is_held_to_its_rest_and_named():
    """timing.comm's other fields are times, counts or rates; a rank's, values or lists of values."""
    data = copy.deepcopy(next(b for b in _BASES if b["kind"] == "training"))
    data["timing"]["comm"]["made_up_s"] = -1
    with pytest.raises(ResultError, match=r"^field timing\.comm\.made_up_s: expected a number from 0 to 1e\+30 or "
                                          r"null, got -1$"):
        record.check(data)
    del data["timing"]["comm"]["made_up_s"]
    data["ranks"][0]["made_up"] = [1, {"a": 1}]
    with pytest.raises(ResultError, match=r"^field ranks\[0\]\.made_up\[1\]: expected a string, a number, true or "
                                          r"false or null, got \{'a': 1\}$"):
        record.check(data)


def test_a_writers_value_json_cannot_hold_is_refused_in_one_line_too():
    """results.write checks the payload before it is JSON: an undeclared field holding what JSON has no word for
    (an object) is a refusal naming the field, not an encoder's TypeError."""
    data = copy.deepcopy(next(b for b in _BASES if b["kind"] == "training"))
    data["ranks"][0]["cores_seen"] = object()
    with pytest.raises(ResultError, match=r"^field ranks\[0\]\.cores_seen: expected "):
        record.check(data)


def test_a_field_named_with_a_newline_or_an_escape_is_named_on_one_line_and_inert():
    """The hypothesis fuzz found it: an undeclared key "\\n" made a two-line refusal; "\\x1b[2J" would clear a
    terminal. A key reaches the line as \\xNN."""
    data = copy.deepcopy(next(b for b in _BASES if b["kind"] == "training"))
    data["timing"]["\n\x1b[2J"] = False
    with pytest.raises(ResultError) as refused:
        record.check(data)
    assert str(refused.value).startswith("field timing.\\x0a\\x1b[2J: expected a number or null, got False")


@pytest.mark.parametrize("where, value, said", [
    (("timing", "step_s"), {"median": 0.1, "p90": -1.0},
     "field timing.step_s.p90: expected a number from 0 to 1e+30 or null, got -1.0"),
    (("timing", "step_s"), {"median": 0.1, "p90": -1.0, "max": -2.0},
     "field timing.step_s.p90: expected a number from 0 to 1e+30 or null, got -1.0"),
    (("fingerprint", "wire"), {"all_reduce": {"calls": 3, "bytes": 8}, "all_gather": {"calls": -1}},
     "field fingerprint.wire.all_gather.calls: expected an integer from 0 to 9.22337e+18 or null, got -1"),
    (("fingerprint", "wire"), {"all_reduce": None, "reduce_scatter": {"dtype": 3}},
     "field fingerprint.wire.reduce_scatter.dtype: expected a string or null, got 3"),
    (("fingerprint", "wire"), {"all_reduce": [1]}, "field fingerprint.wire.all_reduce: expected an object or null, "
                                                   "got [1]"),
    (("metrics",), {"train_loss": 1.0, "val_loss": "x"}, "field metrics.val_loss: expected a number or null, got 'x'"),
])
def test_a_mapping_names_the_key_whose_value_does_not_fit(where, value, said):
    """msgspec says `[...]` for some key of a mapping: the line names the key, the first whose value does not fit
    (the values before it do), and below it the block's field."""
    data = copy.deepcopy(next(b for b in _BASES if b["kind"] == "training" and b.get("fingerprint")))
    *above, last = where
    target = data
    for key in above:
        target = target[key]
    target[last] = value
    with pytest.raises(ResultError) as refused:
        record.check(data)
    assert str(refused.value) == said


def _meta(kind):
    """(the type a field builder annotates, its msgspec Meta)."""
    base, meta = typing.get_args(kind)
    return base, meta


def test_each_kind_of_field_carries_its_bounds_doc_and_unit():
    """The builders the declaration is written with (record/kinds.py), called here: the blocks call them once, at
    import, where a mutation run cannot see an edit (each bound and doc of the blocks is held by the published
    schema's comparison above)."""
    from scalelab.record import kinds

    base, meta = _meta(kinds.real("a time", "s", 0, 5))
    assert base is float and (meta.ge, meta.gt, meta.le) == (0, None, 5)
    assert meta.description == "a time" and meta.extra_json_schema == {"unit": "s"}
    _, meta = _meta(kinds.real("a clock read", "s", above=True))
    assert (meta.ge, meta.gt, meta.le) == (None, 0, kinds.BIG)
    _, meta = _meta(kinds.real("a signed number", lo=None, hi=7))
    assert (meta.ge, meta.gt, meta.le, meta.extra_json_schema) == (-7, None, 7, None)
    base, meta = _meta(kinds.integer("ranks", "ranks", 1, 9))
    assert base is int and (meta.ge, meta.le, meta.description, meta.extra_json_schema) == (1, 9, "ranks",
                                                                                            {"unit": "ranks"})
    assert _meta(kinds.integer("a count"))[1].le == kinds.BIG_INT and _meta(kinds.integer("a count"))[1].ge == 0
    base, meta = _meta(kinds.text("a name", 12, 1))
    assert base is str and (meta.max_length, meta.min_length, meta.description) == (12, 1, "a name")
    assert _meta(kinds.text("any"))[1].min_length is None and _meta(kinds.text("any"))[1].max_length == kinds.MAX_TEXT
    base, meta = _meta(kinds.switch("on or off"))
    assert base is bool and meta.description == "on or off"
    base, meta = _meta(kinds.described(typing.Literal["a", "b"], "one of two", "x"))
    assert base == typing.Literal["a", "b"] and (meta.description, meta.extra_json_schema) == ("one of two",
                                                                                              {"unit": "x"})
    base, meta = _meta(kinds.listed(int, "numbers", "s", limit=4))
    assert base == list[int] and (meta.max_length, meta.min_length, meta.description) == (4, None, "numbers")
    assert meta.extra_json_schema == {"unit": "s"}
    _, meta = _meta(kinds.listed(int, "a pair", length=2))
    assert (meta.min_length, meta.max_length) == (2, 2)
    base, meta = _meta(kinds.steps(float, "per step", "s"))
    assert base == list[float] and meta.max_length == kinds.MAX_STEPS and meta.extra_json_schema == {"unit": "s"}
    assert meta.description == "per step"


def test_the_blocks_below_a_field_are_found_through_optional_lists_and_annotations_but_not_mappings(monkeypatch):
    """What record.check and undeclared walk into: a block held directly, in a list, under Optional or Annotated;
    a mapping of blocks (fingerprint.wire) is not walked (no block below it has a rest). Made again, not read from
    the cache the first check filled."""
    from scalelab.record import blocks

    check = importlib.import_module("scalelab.record.check")  # the module: record.check is its function
    assert check._block_in(blocks.Link) is blocks.Link and check._block_in(int) is None
    assert check._block_in(typing.Optional[list[blocks.Rank]]) is blocks.Rank
    assert check._block_in(typing.Annotated[typing.Optional[blocks.Launch], "doc"]) is blocks.Launch
    assert check._block_in(dict[str, typing.Optional[blocks.Wire]]) is None
    assert check._block_in(typing.Optional[dict[str, blocks.Wire]]) is None
    monkeypatch.setattr(check, "_LAYOUTS", {})
    names, below, decoder = check._layout(blocks.Training)
    assert {"run_id", "launch", "ranks", "timing"} <= names and decoder is None
    assert below["ranks"] is blocks.Rank and below["launch"] is blocks.Launch and below["timing"] is blocks.Timing
    assert "metrics" not in below and "run_id" not in below
    assert check._layout(blocks.Timing)[1]["comm"] is blocks.Comm and check._layout(blocks.Rank)[2] is not None


def test_a_block_is_found_in_a_union_whichever_member_comes_first():
    """msgspec keeps a union's order: Union[None, Link] puts null first, and the block is still the field's."""
    from scalelab.record import blocks, publish

    info = publish.msgspec.inspect.type_info(typing.Union[None, blocks.Link])
    assert publish._struct_in(info)[0].cls is blocks.Link and publish._struct_in(info)[1] == ""
    listed = publish.msgspec.inspect.type_info(typing.Optional[list[blocks.Rank]])
    assert publish._struct_in(listed)[0].cls is blocks.Rank and publish._struct_in(listed)[1] == "[]"
    assert publish._struct_in(publish.msgspec.inspect.type_info(int)) == (None, "")


def test_the_leaves_of_a_result_are_a_training_results_unless_told():
    assert record.leaves() == record.leaves("training") and record.leaves("allreduce") != record.leaves()


def test_a_bar_in_a_doc_never_splits_the_appendix_table(monkeypatch):
    """A field's doc or a workload option's help holding '|' reads '/' in appendix C (a bar would end the cell)."""
    from scalelab.record import publish

    said = publish.msgspec.inspect.type_info(typing.Annotated[int, publish.msgspec.Meta(description="a|b")])
    monkeypatch.setattr(publish, "leaves", lambda kind="training": [("x", said)])
    spec = next(iter(workloads.REGISTRY.values()))
    option = next(o for o in spec.options if o.name in spec.identity)
    monkeypatch.setitem(option.argparse, "help", "c|d")
    text = publish.markdown()
    assert "| `x` | an integer |  | yes | a/b |" in text
    assert f"| `workload.options.{option.name}` | {spec.name} | {option.default!r} | c/d |" in text


def test_every_declared_field_says_what_it_is():
    """Every declared field's row in appendix C says what it is: its own doc, or its block's first line."""
    from scalelab.record import publish

    for kind in record.KINDS:
        for path, info in record.leaves(kind):
            meta = publish._meta_of(info)
            assert (meta is not None and (meta.extra_json_schema or {}).get("description")) or \
                publish._doc_of(kind, path), (kind, path)


def test_the_appendix_falls_back_to_nothing_where_there_is_no_doc_and_cli_reads_sys_argv(monkeypatch, capsys):
    """A field that holds no block has no block doc (""), a block without a docstring neither; a union of several
    kinds has no one doc; an option without help an empty cell; cli() without arguments reads sys.argv, as __main__
    calls it."""
    from scalelab.record import blocks, publish

    assert publish._doc_of("training", "run_id") == "" and publish._doc_of("training", "launch").startswith("launch:")
    monkeypatch.setattr(blocks.Link, "__doc__", None)
    assert publish._doc_of("training", "launch.link") == ""
    several = publish.msgspec.inspect.type_info(
        typing.Union[typing.Annotated[int, publish.msgspec.Meta(description="a")], str])
    assert publish._meta_of(several) is None
    one = publish.msgspec.inspect.type_info(
        typing.Optional[typing.Annotated[int, publish.msgspec.Meta(description="d")]])
    assert publish._meta_of(one).extra_json_schema == {"description": "d"}
    spec = next(iter(workloads.REGISTRY.values()))
    option = next(o for o in spec.options if o.name in spec.identity)
    monkeypatch.delitem(option.argparse, "help")
    assert f"| `workload.options.{option.name}` | {spec.name} | {option.default!r} |  |" in publish.markdown()
    monkeypatch.setattr(sys, "argv", ["scalelab.record", "--markdown"])
    assert publish.cli() == 0 and capsys.readouterr().out.startswith("# Appendix C")
    monkeypatch.setattr(sys, "argv", ["scalelab.record"])
    assert publish.cli() == 0 and json.loads(capsys.readouterr().out) == record.json_schema()


def test_no_blocks_rest_holds_a_block():
    """A rest's published schema refers to no other block (json_schema makes its components without $defs of
    their own): a rest is values, lists of values, times or counts."""
    from scalelab.record import publish

    for name, block in publish._blocks().items():
        if block.rest is not None:
            assert "$ref" not in json.dumps(publish.msgspec.json.schema(block.rest)), name


def _mappings(value, path=""):
    """(path, mapping) of every object in a result, itself first: the check's way of naming it (a.b[0].c)."""
    if isinstance(value, dict):
        yield path, value
        for k, v in value.items():
            yield from _mappings(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _mappings(v, f"{path}[{i}]")


@settings(max_examples=int(os.environ.get("SCALELAB_FUZZ_EXAMPLES", "300")) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(_BASES), pick=st.integers(0, 10**6),
       key=st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.tuples(st.integers()),
       value=JSON)
def test_a_key_that_is_not_a_string_is_refused_naming_its_object_wherever_it_is(base, pick, key, value):
    """Only a writer's dict can hold one (JSON's keys are strings; json.dumps would turn 3 into "3" unasked): in any
    object of a real result, declared or not (config, versions, a rank's wire), results.write refuses it in one line
    naming that object (msgspec's line named none: "field : expected an object, got {...the whole record}"), and
    writes nothing."""
    data = copy.deepcopy({k: v for k, v in base.items() if k != "_path"})
    found = list(_mappings(data))
    path, mapping = found[pick % len(found)]
    mapping[key] = value
    with tempfile.TemporaryDirectory() as out:
        with pytest.raises(ResultError) as refused:
            results.write(out, data)
        assert os.listdir(out) == []
    said = f"{'field ' + path if path else 'the record'}: a key that is not a string, {key!r}"
    assert str(refused.value) == (said if len(repr(key)) <= 40 else said[:said.rindex(", ") + 2 + 37] + "...")


class _Leaf(kinds.Block):
    n: typing.Optional[kinds.integer("a count", "x")] = None


class _Holder(kinds.Block):
    by_name: typing.Optional[kinds.described(dict[str, typing.Optional[_Leaf]], "name -> a leaf")] = None


class _Top(kinds.Block):
    items: typing.Optional[kinds.listed(_Holder, "holders")] = None
    tally: typing.Optional[kinds.described(dict[str, int], "name -> a count")] = None
    nested: typing.Optional[kinds.described(dict[str, dict[str, int]], "name -> name -> a count")] = None


@pytest.mark.parametrize("data, said", [
    ({"items": [{"by_name": {"a": {"n": 1}}}, {"by_name": {"a": {"n": 2}, "b": {"n": -1}}}]},
     "field items[1].by_name.b.n: expected an integer from 0 to 9.22337e+18 or null, got -1"),
    ({"items": [{"by_name": {"a": None, "b": [3]}}]},
     "field items[0].by_name.b: expected an object or null, got [3]"),
    ({"tally": {"a": 1, "b": "x", "c": "y"}}, "field tally.b: expected an integer, got 'x'"),
    ({"nested": {"a": {"b": 1}, "c": {"d": 2, "e": "x"}}}, "field nested.c.e: expected an integer, got 'x'"),
])
def test_a_mapping_below_a_list_of_blocks_names_its_key_in_any_declaration(data, said):
    """No declared mapping lies below a list today (ranks[]' fingerprint is undeclared): the path through a list's
    item, its block's field, a mapping's key and the block below is the check's rule all the same, held on a
    declaration made here."""
    check = importlib.import_module("scalelab.record.check")
    with pytest.raises(msgspec.ValidationError) as err:
        msgspec.convert(data, _Top)
    assert check._say(str(err.value), data, typ=_Top) == said


def test_a_path_the_data_does_not_hold_is_named_as_far_as_it_goes():
    """_keyed given a msgspec path the data does not follow (a key gone, no value that fails) keeps msgspec's own
    words past the point it could resolve, never a KeyError."""
    check = importlib.import_module("scalelab.record.check")
    assert check._keyed(".items[3].by_name[...].n", {"items": []}, _Top) == ".items[3]"
    assert check._keyed(".items[0].by_name[...].n", {"items": [{"by_name": {"a": {"n": 1}}}]}, _Top) \
        == ".items[0].by_name[...].n"
    assert check._keyed(".tally[...]", {"tally": [1]}, _Top) == ".tally[...]"
    assert check._keyed(".nested[...][...]", {"nested": {"a": {"b": 1}}}, _Top) == ".nested[...][...]"
    assert check._keyed("[...]", {"a": 1}, int) == "[...]"  # no mapping declared there: no key to name


def test_a_unions_member_is_the_one_shaped_like_the_value_in_any_order():
    """_member picks of a union the member a value can be (a mapping or block for an object, a list for a list),
    whichever comes first, through Annotated, a union inside one included; else the annotation as it was."""
    check = importlib.import_module("scalelab.record.check")
    U = typing.Union
    assert check._member(U[dict[str, int], list[int]], [1]) == list[int]
    assert check._member(U[list[int], dict[str, int]], {"a": 1}) == dict[str, int]
    assert check._member(U[int, dict[str, int]], {"a": 1}) == dict[str, int]
    assert check._member(U[int, list[int]], [1]) == list[int]
    assert check._member(U[int, _Leaf], {"n": 1}) is _Leaf
    assert check._member(U[None, typing.Annotated[U[int, list[int]], "doc"]], [1]) == list[int]
    assert check._member(U[int, str], [1]) == U[int, str]
    assert check._member(typing.Annotated[dict[str, int], "doc"], 3) == dict[str, int]
