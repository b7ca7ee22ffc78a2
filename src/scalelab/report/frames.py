"""From result.json files to speedup and parallel-efficiency frames.

Runs of the identical workload on the same hardware form a group; the smallest device count
in a group is its baseline. Speedup = throughput / baseline throughput (for a fixed amount
of work, epochs over the same data or strong scaling, that equals T_baseline / T);
efficiency = speedup / (devices / baseline devices). Repeats of one configuration are
combined as report/columns.py declares per column (throughput: median, with min-max shown). Column names are
the result schema's field names.
"""

import pandas as pd

from scalelab import results
from scalelab.keys import CONFIGURATION, SCALE
from scalelab.report import plausible
from scalelab.report.columns import NAMES, NUMERIC, RUNS, aggregations

# the throughput a unit is read from: tables, plots and exports pick the column by the frame's `unit`
THROUGHPUT_COLUMN = {"tokens/s": "tokens_per_s", "samples/s": "samples_per_s"}


def runs_frame(found: list) -> pd.DataFrame:
    """One row per training result, flat columns, readable in pandas or a CSV."""
    return read_runs(found)[0]


def read_runs(found: list) -> tuple:
    """(runs frame, identity notes): the results counted as runs (a requeued job's newest attempt, one row), and
    what the report says of those it did not count as runs of their own."""
    kept, superseded = results.latest_attempts(found)
    rows = [r["_row"] if "_row" in r else run_row(r) for r in kept if r["kind"] == "training"]  # _row: index.py's
    frame = pd.DataFrame(rows, columns=NAMES)
    for col in NUMERIC:
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    frame["job_differs"] = plausible.job_differences(frame)
    return frame, identity_notes(kept, superseded)


def identity_notes(kept: list, superseded: list) -> list:
    """What the report says about results it did not count as runs of their own: each one a later attempt of
    its SLURM job superseded, and each job id that stands for more than one job here (all of them kept)."""
    def job(r):
        slurm = r.get("slurm") or {}
        task = f"_{slurm['array_task_id']}" if slurm.get("array_task_id") is not None else ""
        where = f" on cluster {slurm['cluster']}" if slurm.get("cluster") else ""
        return f"job {slurm.get('array_job_id') or slurm.get('job_id')}{task}{where}"

    notes = []
    training = [(old, new) for old, new in superseded if old["kind"] == "training"]
    if training:
        notes.append(f"{len(training)} result(s) superseded by a later attempt of the same SLURM job (one row each): "
                     + "; ".join(f"{job(old)} attempt {results.restarts(old)} ({old['run_id']}) by attempt "
                                 f"{results.restarts(new)} ({new['run_id']})" for old, new in training))
    seen = {}
    for r in kept:
        if r["kind"] == "training" and results.attempt_key(r) is not None:
            seen.setdefault(results.attempt_key(r), []).append(r)
    for same in seen.values():
        if len(same) > 1:
            same.sort(key=lambda r: r.get("created") or "")
            notes.append(f"{job(same[0])} stands for {len(same)} different runs here (the id repeated: a controller "
                         "restarted without its state, or folders of two clusters merged); each is kept: "
                         + ", ".join(r["run_id"] for r in same))
    return notes


def run_row(r: dict) -> tuple:
    """One training result as a row of the runs frame, its values in NAMES's order (report/columns.py says where
    each column comes from; one computed from the whole frame, None)."""
    return tuple(None if c.read is None else c.read(r) for c in RUNS)


def scaling_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (group, devices, nodes, link): repeats combined, speedup and efficiency vs the group's baseline
    (its fewest devices; among those, a real network before an emulated link)."""
    ok = runs[runs["status"] == "completed"].copy()
    if ok.empty:
        return pd.DataFrame()
    ok["throughput"] = float("nan")
    for unit, column in THROUGHPUT_COLUMN.items():  # each run's throughput in its own unit
        ok.loc[ok["unit"] == unit, "throughput"] = ok[column]
    agg = ok.groupby(CONFIGURATION, sort=True).agg(**aggregations(ok)).reset_index()
    agg["letter"] = agg["group"].map(group_letters(ok["group"]))
    agg["hardware"] = [d if a == "gpu" else "CPU (gloo)" for a, d in zip(agg["accelerator"], agg["device"])]
    base = agg.sort_values(SCALE).groupby("group").head(1).set_index("group")
    agg["baseline_world_size"] = agg["group"].map(base["world_size"])
    agg["speedup"] = agg["throughput"] / agg["group"].map(base["throughput"])
    agg["efficiency"] = agg["speedup"] / (agg["world_size"] / agg["baseline_world_size"])
    agg["throughput_per_device"] = agg["throughput"] / agg["world_size"]
    agg["baseline_step_s"] = agg["group"].map(base["step_s"])
    agg["baseline_compute_s"] = agg["group"].map(base["compute_s"])
    for col in ("throughput", "throughput_min", "throughput_max", "had_cpu", "exclusive", "batch_per_device"):
        agg[f"baseline_{col}"] = agg["group"].map(base[col])  # what plausible.py checks an efficiency against
    agg["fingerprinted"] = agg["fingerprinted"] & agg["group"].map(base["fingerprinted"])
    # a configuration that ran another job than its baseline (plausible.job_differences) has no speedup against it
    agg[["speedup", "efficiency"]] = agg[["speedup", "efficiency"]].where(agg["job_differs"] == "")
    return agg


def group_letters(groups) -> dict:
    """Group key -> "A", "B", … in the order the groups first appear: one naming for tables, plots and files."""
    return {g: chr(ord("A") + i) if i < 26 else str(i + 1) for i, g in enumerate(dict.fromkeys(groups))}
