"""From result.json files to speedup and parallel-efficiency frames.

Runs of the identical workload on the same hardware form a group; the smallest device count
in a group is its baseline. Speedup = throughput / baseline throughput (for a fixed amount
of work, epochs over the same data or strong scaling, that equals T_baseline / T);
efficiency = speedup / (devices / baseline devices). Repeats of one configuration are
combined: median, with min-max shown. Column names are the result schema's field names.
"""

import json
import statistics

import pandas as pd

from scalelab import results
from scalelab.config import LEVER_DEFAULTS
from scalelab.measure import cpushare
from scalelab.perfmodel.network import human_rate
from scalelab.report import plausible
from scalelab.report.keys import CONFIGURATION, SCALE
from scalelab.workloads import throughput_unit

# timing.comm fields carried into the frames under their own names (bucket_bytes apart: a tuple, not a number)
COMM_FIELDS = ("compute_s", "synced_s", "allreduce_s", "allreduce_alone_s", "waited_s", "comm_share",
               "hidden_fraction", "grad_bytes", "buckets", "ddp_busbw_GBps")
RUN_COLUMNS = ["run_id", "group", "model", "describe", "params", "scaling", "batch_per_device", "global_batch",
               "precision", "world_size", "num_nodes", "devices", "launcher", "accelerator", "device", "backend",
               "link", "link_gbit", "threads", "oversubscribed", "had_cpu", "starved", "status", "error",
               "train_time_s", "step_s", "epoch_s", "unit", "samples_per_s", "tokens_per_s", "first_step_s",
               "whole_run_s", "train_loss", "val_loss", "val_acc", "created", "job_id", "restart_count",
               *COMM_FIELDS[:-1], "bucket_bytes", COMM_FIELDS[-1], "tflops_per_device", "peak_tflops", "mfu",
               "peak_note", *LEVER_DEFAULTS, "wire_bytes", "samples_per_batch", "loss_curve", "exclusive",
               "fingerprint", "job_differs"]
NUMERIC = ("link_gbit", "had_cpu", "train_time_s", "step_s", "epoch_s", "samples_per_s", "tokens_per_s",
           "first_step_s", "whole_run_s", "train_loss", "val_loss", "val_acc", "params", *COMM_FIELDS,
           "tflops_per_device", "peak_tflops", "mfu")
# the throughput a unit is read from: tables, plots and exports pick the column by the frame's `unit`
THROUGHPUT_COLUMN = {"tokens/s": "tokens_per_s", "samples/s": "samples_per_s"}


def runs_frame(found: list) -> pd.DataFrame:
    """One row per training result, flat columns, readable in pandas or a CSV."""
    kept, superseded = results.latest_attempts(found)
    rows = [run_row(r) for r in kept if r["kind"] == "training"]
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    frame.attrs["identity"] = identity_notes(kept, superseded)
    for col in NUMERIC:
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    frame["job_differs"] = plausible.job_differences(frame)
    return frame


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


def run_row(r: dict) -> dict:
    """One training result as a row of the runs frame."""
    w, launch, t, m = r["workload"], r["launch"], r["timing"], r.get("metrics") or {}
    slurm = r.get("slurm") or {}
    epochs = t.get("epoch_times_s") or []
    c = t.get("comm") or {}
    return {
        "run_id": r["run_id"],
        "group": results.group_key(r),
        "model": w.get("model"),
        "describe": w.get("describe") or w.get("model"),
        "params": w.get("params"),
        "scaling": w.get("scaling"),
        "batch_per_device": w.get("batch_per_device"),
        "global_batch": w.get("global_batch"),
        "precision": w.get("precision"),
        "world_size": launch["world_size"],
        "num_nodes": launch["num_nodes"],
        "devices": launch.get("devices"),
        "launcher": launch.get("launcher"),
        "accelerator": launch.get("accelerator"),
        "device": (launch.get("device_names") or ["?"])[0],
        "backend": launch.get("backend"),
        "link": link_label(launch.get("link")),
        "link_gbit": (launch.get("link") or {}).get("gbit"),
        "threads": launch.get("threads"),
        "oversubscribed": launch.get("oversubscribed") or "",  # ranks shared cores (launch.cores); "" = no
        **contention(t.get("had_cpu")),
        "status": r["status"],
        "error": r.get("error"),
        "train_time_s": t.get("train_time_s"),
        "step_s": (t.get("step_s") or {}).get("median", float("nan")),
        "epoch_s": statistics.median(epochs) if epochs else None,
        "unit": throughput_unit(w.get("tokens_per_sample")),
        "samples_per_s": t.get("samples_per_s"),
        "tokens_per_s": t.get("tokens_per_s"),
        "first_step_s": t.get("first_step_s"),
        "whole_run_s": t.get("whole_run_s"),
        "train_loss": m.get("train_loss"),
        "val_loss": m.get("val_loss"),
        "val_acc": m.get("val_acc"),
        "created": r.get("created"),
        "job_id": slurm.get("job_id"),
        "restart_count": slurm.get("restart_count") or 0,
        **{k: c.get(k) for k in COMM_FIELDS},
        "bucket_bytes": tuple(c.get("bucket_bytes") or ()) or None,
        **{k: t.get(k) for k in ("tflops_per_device", "peak_tflops", "mfu", "peak_note")},
        **{k: w.get(k, default) for k, default in LEVER_DEFAULTS.items()},
        "wire_bytes": tuple(c.get("wire_bytes") or ()) or None,
        "samples_per_batch": (w.get("batch_per_device") or 0) * launch["world_size"],
        "loss_curve": loss_curve(r.get("ranks") or []),
        "exclusive": slurm.get("exclusive"),  # had its nodes alone (SLURM --exclusive); None: not known
        # what the step ran (scalelab/fingerprint.py), as JSON text: "" where the run did not record it
        "fingerprint": json.dumps(r["fingerprint"], sort_keys=True) if isinstance(r.get("fingerprint"), dict)
        else "",
    }


def contention(shares) -> dict:
    """The least any rank had a core when it was ready to run, and the words for it (measure/cpushare.py)."""
    return {"had_cpu": min((x for x in shares or [] if x is not None), default=None),
            "starved": cpushare.contended(shares) or ""}


def loss_curve(ranks: list) -> tuple | None:
    """The training loss of every batch, averaged over the ranks (each rank logs the loss of its own shard); NaN
    where a rank's loss was not finite (written as null)."""
    curves = [r.get("losses") or [] for r in ranks if isinstance(r, dict)]
    # zip stops at the shortest curve; sum/len, not statistics.fmean: fmean was most of a 10,000-file report
    return tuple(float("nan") if None in batch else sum(batch) / len(batch) for batch in zip(*curves)) or None


def link_label(link) -> str:
    """A result's launch.link in words, "" for none (a real network): "emulated 1 Gbit/s", "emulated 200 Mbit/s
    +5 ms". Runs with different labels are different configurations, never repeats of one."""
    if not isinstance(link, dict) or not isinstance(link.get("gbit"), (int, float)):
        return ""
    gbit = link["gbit"]
    rate = human_rate(gbit)
    latency = f" +{link['latency_ms']:g} ms" if isinstance(link.get("latency_ms"), (int, float)) else ""
    return f"{'emulated ' if link.get('emulated') else ''}{rate}{latency}"


def scaling_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (group, devices, nodes, link): repeats combined, speedup and efficiency vs the group's baseline
    (its fewest devices; among those, a real network before an emulated link)."""
    ok = runs[runs["status"] == "completed"].copy()
    if ok.empty:
        return pd.DataFrame()
    ok["throughput"] = float("nan")
    for unit, column in THROUGHPUT_COLUMN.items():  # each run's throughput in its own unit
        ok.loc[ok["unit"] == unit, "throughput"] = ok[column]
    agg = (ok.groupby(CONFIGURATION, sort=True)
           .agg(runs=("run_id", "size"), throughput=("throughput", "median"),
                throughput_min=("throughput", "min"), throughput_max=("throughput", "max"),
                train_time_s=("train_time_s", "median"), step_s=("step_s", "median"),
                epoch_s=("epoch_s", "median"), global_batch=("global_batch", "first"),
                accelerator=("accelerator", "first"), device=("device", "first"), backend=("backend", "first"),
                link_gbit=("link_gbit", "first"), oversubscribed=("oversubscribed", "max"),
                had_cpu=("had_cpu", "min"), starved=("starved", lambda s: most_starved(s, ok["had_cpu"])),
                threads=("threads", "max"),
                scaling=("scaling", "first"), model=("model", "first"),
                describe=("describe", "first"),
                unit=("unit", "first"), samples_per_s=("samples_per_s", "median"),
                bucket_bytes=("bucket_bytes", "first"), tokens_per_s=("tokens_per_s", "median"),
                wire_bytes=("wire_bytes", "first"), samples_per_batch=("samples_per_batch", "first"),
                loss_curve=("loss_curve", "last"), peak_note=("peak_note", "first"),
                batch_per_device=("batch_per_device", "first"), precision=("precision", "first"),
                job_differs=("job_differs", lambda s: next((t for t in s if t), "")),
                fingerprinted=("fingerprint", lambda s: bool((s != "").all())),
                exclusive=("exclusive", all_or_none),
                **{k: (k, "first") for k in LEVER_DEFAULTS},
                **{k: (k, "median") for k in (*COMM_FIELDS, "tflops_per_device", "peak_tflops", "mfu")})
           .reset_index())
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


def all_or_none(flags: pd.Series):
    """Whether every repeat had its nodes alone: False where one did not, True where all did, else None (unknown)."""
    if (flags == False).any():  # noqa: E712 - None and NaN are neither
        return False
    return True if len(flags) and (flags == True).all() else None  # noqa: E712


def most_starved(starved: pd.Series, had_cpu: pd.Series) -> str:
    """Of repeats' contention words, those of the run whose rank had the least share of a core: the worst, as
    `had_cpu` is (the largest string would be "rank 2 … 70 %" over "rank 10 … 5 %"). Words exist exactly where a
    share is below cpushare.QUIET, so the least share's run has words whenever any repeat has."""
    shares = had_cpu.loc[starved.index]
    return starved.loc[shares.idxmin()] if shares.notna().any() else ""


def group_letters(groups) -> dict:
    """Group key -> "A", "B", … in the order the groups first appear: one naming for tables, plots and files."""
    return {g: chr(ord("A") + i) if i < 26 else str(i + 1) for i, g in enumerate(dict.fromkeys(groups))}
