"""result.json's one declaration (scalelab/record.py): its published JSON Schema and appendix C are generated from it,
every kept result fits both it and that schema (checked by an independent validator, jsonschema), the two never
disagree on a field changed at random, and the report's columns cannot name a field it does not declare."""

import copy
import glob
import json
import os
import subprocess
import sys

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import ROOT, SRC
from scalelab import record, results, workloads
from scalelab.errors import ResultError
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


@pytest.mark.parametrize("path", KEPT, ids=lambda p: os.path.relpath(p, os.path.join(REPO, "tests", "data")))
def test_every_kept_result_fits_the_published_schema(path):
    """Every version kept in tests/data, upgraded by load, is a result the published schema accepts."""
    data = results.load(path)
    errors = sorted(VALIDATOR.iter_errors(data), key=str)
    assert not errors, f"{'.'.join(map(str, errors[0].absolute_path))}: {errors[0].message[:200]}"


# what a workload block may hold beyond the declaration: its workload's identity options (its own module declares)
OPTIONS = {f"workload.{name}" for spec in workloads.REGISTRY.values() for name in spec.identity}
DOCS = sorted(glob.glob(os.path.join(REPO, "docs", "results", "**", "result.json"), recursive=True))


def test_every_field_a_kept_result_holds_is_declared():
    """A reader learns every field from the declaration: no kept result (every version in tests/data, the chapters'
    folders), upgraded, holds a field it does not name but its workload's own options, which appendix C lists."""
    assert DOCS, "the chapters' result folders moved"
    for path in KEPT + DOCS:
        data = results.load(path)
        assert set(record.undeclared(data)) <= OPTIONS, (path, sorted(set(record.undeclared(data)) - OPTIONS))
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


# --- the declaration and the published schema agree on every field ---------------------------------------------

_BASES = [results.load(p) for p in KEPT if json.load(open(p)).get("schema_version") == record.SCHEMA_VERSION]
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
