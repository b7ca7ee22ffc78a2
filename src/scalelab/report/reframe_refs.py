"""What the ReFrame checks (reframe/scalelab_checks.py) read of scalelab, with no ReFrame import (unit-tested
without it): a test's output folder checked as the report reads it, its figures computed by the report's own code
(report/cli.build: the frames benchmark.py prints), and their references taken from a scalelab reference file
(report/reference.py loads and matches it) as ReFrame's {variable: (value, lower, upper, unit)}.

One reference file for both tools and one computation of each figure: a perflog line and the report's line for the
same results carry the same number, judged against the same bounds (value + |value| * threshold in both).
"""

import re

import pandas as pd

from scalelab import results
from scalelab.numeric import finite
from scalelab.report import reference
from scalelab.report.cli import build

# The verdicts of `benchmark.py --reference` that ReFrame's own bounds reach: a measured value below or above them.
# Any other FAIL (a check that matched no run, another unit, another baseline, an efficiency beyond what scaling
# gives, not the same job as the baseline) is no number ReFrame can judge: the report check's sanity fails on it.
BOUNDS_FAIL = re.compile(r"^FAIL \S+: \S+(?: \S+)? (?:below|above) \S+ \(reference ")


def var_name(label: str) -> str:
    """A ReFrame performance variable's name for a report label ("<check>.<quantity>"): ReFrame keys a reference
    `system:partition:variable` and its perflog keeps what follows a name's last ':' (a check's name may hold ':')."""
    return label.replace(":", "_")


def result_problems(folder, kind=None, world_size=None, num_nodes=None) -> list:
    """Why `folder` is not what a test's sanity wants: every result.json in it valid (results.load, the schema the
    report reads) and, given a kind, exactly one completed result of that kind (of that size, given one)."""
    found, skipped = results.scan(str(folder))
    problems = [f"{path}: {why}" for path, why in skipped]
    if kind is None:
        return problems + ([] if found else [f"no result.json in {folder}"])
    mine = [r for r in found if r.get("kind") == kind]
    if len(mine) != 1:
        return problems + [f"{len(mine)} {kind} result(s) in {folder}, expected 1"]
    run, = mine
    if run.get("status") != "completed":
        problems.append(f"{run['run_id']}: {run.get('status')}: {run.get('error')}")
    launch = run.get("launch") or {}
    shape = (launch.get("world_size"), launch.get("num_nodes"))
    if world_size is not None and shape != (world_size, num_nodes):
        problems.append(f"{run['run_id']}: ran on {shape[0]} device(s) on {shape[1]} node(s), the test asked "
                        f"{world_size} on {num_nodes}")
    return problems


def frames_of(folder) -> tuple:
    """(scaling, bench): the frames benchmark.py builds of a folder (report/cli.build)."""
    built = build(str(folder))
    return built.scaling, built.bench


def _largest(scaling: pd.DataFrame) -> pd.DataFrame:
    """The scaling frame's row of the most devices (a self-check's N-device run beside its 1-device baseline)."""
    if scaling.empty:
        return scaling
    return scaling.sort_values(["world_size", "num_nodes"]).tail(1)


def figures(folder, checks=()) -> tuple:
    """({variable: (value, unit)}, {variable: reference tuple}) of one test's folder, as benchmark.py computes them:
    of its training configuration with the most devices, throughput_per_device (the run's own unit), efficiency
    where the folder holds its baseline too (a self-check's 1-device run), MFU in % where the GPU's peak is known; of
    an all-reduce benchmark, busbw (the median of its repeats, as --reference judges it). The references are those
    of every check in `checks` that names that configuration (reference.matches), for the figures the folder has."""
    scaling, bench = frames_of(folder)
    row = _largest(scaling)
    found = {}
    if not row.empty:
        r = row.iloc[0]
        if finite(r["throughput_per_device"]):
            found["throughput_per_device"] = (float(r["throughput_per_device"]), r["unit"])
        if r["world_size"] != r["baseline_world_size"] and finite(r["efficiency"]):
            found["efficiency"] = (float(r["efficiency"]), "")
        if finite(r.get("mfu")):
            found["mfu"] = (float(r["mfu"]) * 100, "%")
    if not bench.empty and finite(bench["busbw_GBps"].median()):
        found["busbw"] = (float(bench["busbw_GBps"].median()), "GB/s")
    refs = {}
    for entry in checks:
        if reference.matches(entry, row, bench):
            for quantity, tup in entry["reference"].items():
                if quantity in found:
                    refs.setdefault(quantity, tuple(tup))
    return found, refs


def unit_problems(found: dict, refs: dict) -> list:
    """A reference in another unit than the figure (tokens/s against samples/s): --reference fails such a value
    whatever its number, ReFrame only warns; the checks fail it as scalelab does."""
    return [f"{name}: measured in {found[name][1] or 'no unit'}, the reference is in {tup[3] or 'no unit'}"
            for name, tup in refs.items() if tup[3] != found[name][1]]


def report_figures(lines: list, checks: list) -> tuple:
    """({variable: (value, unit)}, {variable: reference tuple}) of `benchmark.py --reference`'s output: each PERF
    line a variable named after its label, with the tuple of the check and quantity it names."""
    tuples = {f"{entry['name']}.{q}": tuple(tup) for entry in checks for q, tup in entry["reference"].items()}
    found, refs = {}, {}
    for label, (value, unit) in reference.perf_values(lines).items():
        found[var_name(label)] = (value, unit)
        if label in tuples:
            refs[var_name(label)] = tuples[label]
    return found, refs


def report_problems(lines: list) -> list:
    """What in `benchmark.py --reference`'s output ReFrame cannot judge by bounds: a FAIL of another kind, or no
    closing `reference:` line (the report stopped before its verdicts)."""
    problems = [line for line in lines if line.startswith("FAIL ") and not BOUNDS_FAIL.match(line)]
    if not any(line.startswith("reference: ") for line in lines):
        problems.append("no `reference:` line: benchmark.py --reference did not reach its verdicts")
    return problems

