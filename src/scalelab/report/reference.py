"""Reference checks: a YAML file of expected values in, one PASS/FAIL verdict per check out.

For cluster admins who rerun the same sweep after maintenance and want a regressed link to fail a job, the
way ReFrame's performance checks do. Each check names one configuration (a training workload on some hardware
at some devices/nodes/link, or the all-reduce benchmark at some size) and, per quantity, ReFrame's reference
tuple `[value, lower, upper, unit]`: lower/upper are fractions of the value (-0.1 = 10 % below), null means
unbounded, and the accepted range is value + |value| * fraction. A check that matches no run fails: a check
that silently checks nothing is worse than none.
"""

import json
import math
import re
import sys
from types import SimpleNamespace

import pandas as pd

from scalelab import files, results, upgrades
from scalelab.config import LEVERS, WORKLOAD_FIELDS
from scalelab.errors import ResultError, UsageError
from scalelab.numeric import finite, finite_real, known
from scalelab.report import plausible

# quantity -> (frame column, unit the value is in; None: the run's own throughput unit)
# forecast_error: |forecast - measured| efficiency of the configuration, in points, predicted from the folder's other
# runs (the track record): [5, null, 0, points] fails when the model's error on this cluster grows past 5 points
TRAINING = {"efficiency": ("efficiency", ""), "throughput_per_device": ("throughput_per_device", None),
            "forecast_error": ("forecast_error", "points")}
FORECAST_TOLERANCE = 5.0  # points, at least, in a drafted forecast_error check
ALLREDUCE = {"busbw": ("busbw_GBps", "GB/s")}
NAME = re.compile(r"^[A-Za-z0-9_.:+/-]+$")  # no spaces nor '=': PERF lines stay machine-parsable
HEADER = """\
# scalelab reference checks (python src/benchmark.py --output_dir DIR --reference THIS_FILE).
# Each quantity is ReFrame's reference tuple [value, lower, upper, unit]: lower/upper are fractions of value
# (-0.1 = 10 % below), null = unbounded; a run passes when value*(1+lower) <= measured <= value*(1+upper).
# A check that matches no run in DIR fails. Efficiency is against the group's smallest device count in DIR:
# keep that baseline run in every folder you check (baseline_world_size says which).
"""


def load(path: str) -> list:
    """The checks of a reference file, validated: any problem is a UsageError naming the file and entry."""
    import yaml

    try:  # UTF-8 whatever the locale: the file travels; a regular file of a reference file's size
        text = files.read_bytes(path, "reference").decode("utf-8")
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's: 10x faster
    except ResultError as exc:
        raise UsageError(f"--reference {path}: {exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:  # not UTF-8 (a Latin-1 editor): no line, the byte
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"--reference {path}: not valid YAML{where} ({getattr(exc, 'problem', None) or exc})") \
            from None
    checks = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(checks, list) or not checks:
        raise UsageError(f"--reference {path}: expected a mapping with a non-empty `checks:` list "
                         "(write one with --write_reference)")
    checks, old = upgrades.reference_checks(checks)
    if old:  # a file from before one name per quantity: still checked, and said once
        print(f"benchmark.py: warning: --reference {path}: read {', '.join(f'`{a}` as `{b}`' for a, b in old)}, "
              "as scalelab now names them; rename them in the file (--write_reference writes the new names)",
              file=sys.stderr)
    seen = set()
    for i, entry in enumerate(checks, 1):
        _validate(entry, f"--reference {path}: check {i}")
        if entry["name"] in seen:
            raise UsageError(f"--reference {path}: check {i}: name {entry['name']!r} is used twice")
        seen.add(entry["name"])
    return checks


def _validate(entry, where: str):
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: expected a mapping, got {type(entry).__name__}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise UsageError(f"{where}: `name` must be letters, digits and _.:+/- (no spaces), got {name!r}")
    where = f"{where} ({name})"
    kind = entry.get("kind", "training")
    if kind not in ("training", "allreduce"):
        raise UsageError(f"{where}: kind must be training or allreduce, got {kind!r}")
    if kind == "training" and not isinstance(entry.get("workload"), dict):
        raise UsageError(f"{where}: a training check needs a `workload:` mapping (its fields select the runs)")
    for key in ("world_size", "num_nodes") + (("baseline_world_size",) if "baseline_world_size" in entry else ()):
        v = entry.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(f"{where}: `{key}` must be a positive integer, got {v!r}")
    if not isinstance(entry.get("hardware"), dict) or not entry["hardware"].get("accelerator"):
        raise UsageError(f"{where}: `hardware:` must be a mapping with `accelerator` (and `device` for a GPU)")
    if not isinstance(entry.get("link", ""), str):
        raise UsageError(f"{where}: `link` must be text (\"\" for a real network), got {entry['link']!r}")
    known = TRAINING if kind == "training" else ALLREDUCE
    ref = entry.get("reference")
    if not isinstance(ref, dict) or not ref:
        raise UsageError(f"{where}: `reference:` must map quantities ({', '.join(known)}) to "
                         "[value, lower, upper, unit]")
    for quantity, tup in ref.items():
        if quantity not in known:
            raise UsageError(f"{where}: unknown quantity {quantity!r} for a {kind} check (known: {', '.join(known)})")
        _validate_tuple(tup, f"{where}: {quantity}")


def _validate_tuple(tup, where: str):
    """ReFrame's tuple: a number, lower in [-1, 0] or null, upper >= 0 or null, a unit string."""
    if not isinstance(tup, (list, tuple)) or len(tup) != 4:
        raise UsageError(f"{where}: expected [value, lower, upper, unit] (e.g. [0.9, -0.1, null, '']), got {tup!r}")
    value, lower, upper, unit = tup
    if not finite_real(value):
        raise UsageError(f"{where}: the reference value must be a number, got {value!r}")
    if lower is not None and not (finite_real(lower) and -1 <= lower <= 0):
        raise UsageError(f"{where}: the lower threshold must be a fraction in [-1, 0] or null, got {lower!r}")
    if upper is not None and not (finite_real(upper) and upper >= 0):
        raise UsageError(f"{where}: the upper threshold must be a fraction >= 0 or null, got {upper!r}")
    if not isinstance(unit, str):
        raise UsageError(f"{where}: the unit must be text ('' for none), got {unit!r}")


def bounds(value: float, lower, upper) -> tuple:
    """ReFrame's bounds: value + |value| * threshold; an unbounded side is -inf / +inf."""
    lo = -math.inf if lower is None else value + abs(value) * lower
    hi = math.inf if upper is None else value + abs(value) * upper
    return lo, hi


def _with_unset(workload: dict) -> dict:
    """A drafted check's workload fields: the group's, and null for each common field it left unset (a result leaves
    a null out: a run that sets it is another configuration, which the check must not match); a lever at its default
    stays out, as the group key leaves it."""
    return {**{k: None for k in WORKLOAD_FIELDS if k not in LEVERS}, **workload}


# --- matching ------------------------------------------------------------------------------------

def _training_rows(scaling: pd.DataFrame, entry: dict) -> pd.DataFrame:
    """Rows of the scaling frame an entry names: its workload fields (all of them, or a subset), hardware,
    devices, nodes and link."""
    if scaling.empty:
        return scaling
    rows = scaling[(scaling["world_size"] == entry["world_size"]) & (scaling["num_nodes"] == entry["num_nodes"])
                   & (scaling["link"].fillna("") == entry.get("link", ""))]
    want, hw = entry["workload"], entry["hardware"]
    keep = []
    for group in rows["group"].unique():
        key = json.loads(group)
        if (all(key["workload"].get(k) == v for k, v in want.items())
                and all(key["hardware"].get(k) == v for k, v in hw.items())):
            keep.append(group)
    return rows[rows["group"].isin(keep)]


def _bench_runs(bench: pd.DataFrame, entry: dict) -> pd.DataFrame:
    """All-reduce benchmark runs an entry names (CPU runs match whatever the device name)."""
    if bench.empty:
        return bench
    hw = entry["hardware"]
    match = bench[(bench["world_size"] == entry["world_size"]) & (bench["num_nodes"] == entry["num_nodes"])
                  & (bench["accelerator"] == hw["accelerator"]) & (bench["link"] == entry.get("link", ""))
                  & (bench["dtype"].fillna("float32") == entry.get("dtype", "float32"))]
    if hw["accelerator"] == "gpu" and hw.get("device"):
        match = match[match["device"] == hw["device"]]
    return match


def matches(entry: dict, scaling: pd.DataFrame, bench: pd.DataFrame) -> bool:
    """Whether a check names a configuration these frames hold (the one `check` would judge it on): how the ReFrame
    checks (reframe/scalelab_checks.py) find the references of the one configuration a test ran."""
    if entry.get("kind", "training") == "training":
        return not _training_rows(scaling, entry).empty
    return not _bench_runs(bench, entry).empty


def _where(entry: dict) -> str:
    link = f", link {entry['link']}" if entry.get("link") else ""
    what = "all-reduce benchmark" if entry.get("kind") == "allreduce" else "training run"
    hw = entry["hardware"].get("device") or entry["hardware"]["accelerator"]
    return f"{what} on {entry['world_size']} device(s), {entry['num_nodes']} node(s), {hw}{link}"


# --- verdicts ------------------------------------------------------------------------------------

def count(checks: list) -> str:
    """'3 check(s) of 5 value(s)': what --write_reference wrote and what --reference checks say it alike (a check is
    one configuration, a value one quantity of it; each value passes or fails)."""
    return f"{len(checks)} check(s) of {sum(len(entry['reference']) for entry in checks)} value(s)"


def check(checks: list, scaling: pd.DataFrame, bench: pd.DataFrame, folder: str) -> tuple:
    """(output lines, number of failed values): PASS/FAIL per value, PERF per measured value, one FAIL per check
    that matches nothing (all its values fail), and a closing summary."""
    lines, failed, passed = [], 0, 0
    for entry in checks:
        name, kind = entry["name"], entry.get("kind", "training")
        if kind == "training":
            rows = _training_rows(scaling, entry)
            if not rows.empty and rows["group"].nunique() > 1:
                failed += len(entry["reference"])
                lines.append(f"FAIL {name}: {rows['group'].nunique()} workloads in {folder} match its workload "
                             "fields: add fields to tell them apart")
                continue
            row = None if rows.empty else rows.iloc[0]
        else:
            runs = _bench_runs(bench, entry)
            row = None if runs.empty else {"busbw_GBps": runs["busbw_GBps"].median()}  # repeats: their median
        if row is None:
            failed += len(entry["reference"])
            lines.append(f"FAIL {name}: no {_where(entry)} in {folder} (nothing was checked)")
            continue
        for quantity, tup in entry["reference"].items():
            verdict, perf = _verdict(name, quantity, tup, row, entry)
            failed += verdict.startswith("FAIL")
            passed += verdict.startswith("PASS")
            lines.append(verdict)
            if perf:
                lines.append(perf)
    lines.append(f"reference: {count(checks)}: {passed} passed, {failed} failed")
    return lines, failed


# A PERF line as _verdict prints it: "PERF <check>.<quantity>=<value>[ <unit>]", the figure a verdict judged.
PERF_LINE = re.compile(r"^PERF (\S+)=(\S+)(?: (\S+))?$")


def perf_values(lines) -> dict:
    """{"<check>.<quantity>": (value, unit or "")} of the PERF lines among `lines` (what ReFrame's report check
    logs)."""
    return {m.group(1): (float(m.group(2)), m.group(3) or "") for m in map(PERF_LINE.match, lines) if m}


def _verdict(name: str, quantity: str, tup, row, entry: dict) -> tuple:
    """(PASS/FAIL line, PERF line or None) for one quantity of one matched configuration."""
    value, lower, upper, unit = tup
    column, fixed_unit = (TRAINING if entry.get("kind", "training") == "training" else ALLREDUCE)[quantity]
    got_unit = fixed_unit if fixed_unit is not None else row["unit"]
    measured = row[column]
    label = f"{name}.{quantity}"
    if quantity == "efficiency" and row.get("job_differs"):
        return f"FAIL {label}: not the same job as its baseline ({row['job_differs']}): no efficiency against it", None
    if not known(measured):
        return f"FAIL {label}: not measured in the matching runs", None
    measured = float(measured)
    perf = f"PERF {label}={measured:.6g}" + (f" {got_unit}" if got_unit else "")
    if unit != got_unit:
        return f"FAIL {label}: measured in {got_unit or 'no unit'}, the reference is in {unit or 'no unit'}", perf
    if quantity == "efficiency" and entry.get("baseline_world_size",
                                              row["baseline_world_size"]) != row["baseline_world_size"]:
        return (f"FAIL {label}: efficiency here is against {int(row['baseline_world_size'])} device(s), the "
                f"reference's against {entry['baseline_world_size']}: run the baseline too"), perf
    if quantity == "efficiency" and plausible.flagged(SimpleNamespace(**row)):
        band = plausible.noise(SimpleNamespace(**row))
        return (f"FAIL {label}: {measured:.4g} is beyond what scaling gives (1 + {band:.2g} noise): the report says "
                "what was checked"), perf
    lo, hi = bounds(value, lower, upper)
    shown = f"{measured:.4g}{' ' + unit if unit else ''}"
    span = f"reference {value:.4g}, accepted {_bound_text(lo)}..{_bound_text(hi)}"
    if measured < lo:
        return f"FAIL {label}: {shown} below {lo:.4g} ({span})", perf
    if measured > hi:
        return f"FAIL {label}: {shown} above {hi:.4g} ({span})", perf
    return f"PASS {label}: {shown} ({span})", perf


def _bound_text(x: float) -> str:
    return "inf" if x == math.inf else "-inf" if x == -math.inf else f"{x:.4g}"


# --- writing -------------------------------------------------------------------------------------

def draft(scaling: pd.DataFrame, bench: pd.DataFrame, lower: float = -0.1) -> list:
    """Checks for every configuration of a good folder: its current values, `lower` below, no upper bound."""
    checks, names = [], set()
    for r in ([] if scaling.empty else scaling.itertuples()):
        key = json.loads(r.group)
        ref = {}
        if r.world_size != r.baseline_world_size and finite(r.efficiency):
            ref["efficiency"] = [_round(r.efficiency), lower, None, ""]
        if finite(r.throughput_per_device):
            ref["throughput_per_device"] = [_round(r.throughput_per_device), lower, None, r.unit]
        if finite(getattr(r, "forecast_error", None)):  # today's error and 2 points, at least the tolerance
            ref["forecast_error"] = [max(FORECAST_TOLERANCE, math.ceil(r.forecast_error) + 2.0), None, 0, "points"]
        if not ref:
            continue
        hw = key["hardware"] if r.accelerator == "gpu" else {"accelerator": key["hardware"]["accelerator"]}
        hw_name = r.device if r.accelerator == "gpu" else r.accelerator
        base = _slug(f"{r.describe}-{hw_name}-{r.world_size}x{r.num_nodes}" + (f"-{r.link}" if r.link else ""))
        checks.append({"name": _unique(base, names), "kind": "training", "workload": _with_unset(key["workload"]),
                       "hardware": hw, "world_size": int(r.world_size), "num_nodes": int(r.num_nodes),
                       "link": r.link or "", "baseline_world_size": int(r.baseline_world_size), "reference": ref})
    if not bench.empty:
        bench = bench.assign(dtype=bench["dtype"].fillna("float32"))  # link: link_label's text, never NaN
        for (world, nodes, acc, device, link, dtype), runs in bench.groupby(
                ["world_size", "num_nodes", "accelerator", "device", "link", "dtype"], sort=True):
            busbw = runs["busbw_GBps"].median()
            if not finite(busbw):
                continue
            hw = {"accelerator": acc, "device": device} if acc == "gpu" else {"accelerator": acc}
            base = _slug(f"allreduce-{device if acc == 'gpu' else acc}-{world}x{nodes}" + (f"-{link}" if link else ""))
            checks.append({"name": _unique(base, names), "kind": "allreduce", "hardware": hw, "world_size": int(world),
                           "num_nodes": int(nodes), "link": link, "dtype": dtype,
                           "reference": {"busbw": [_round(busbw), lower, None, "GB/s"]}})
    return checks


def write(path: str, checks: list) -> str:
    """The checks as a reference file, written atomically (a nightly job never reads half a file)."""
    import yaml

    if not checks:
        raise UsageError("--write_reference: no completed training run or all-reduce benchmark in the folder: "
                         "nothing to reference")
    text = yaml.safe_dump({"checks": checks}, sort_keys=False, default_flow_style=None, width=120)
    return results.atomic_write_text(path, HEADER + text)


def _round(x) -> float:
    return float(f"{float(x):.6g}")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:+/-]+", "-", text).strip("-")


def _unique(base: str, names: set) -> str:
    name, n = base, 2
    while name in names:
        name, n = f"{base}-{n}", n + 1
    names.add(name)
    return name
