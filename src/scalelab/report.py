"""From a folder of result.json files to speedup and parallel-efficiency tables.

Runs of the identical workload on the same hardware form a group; the smallest device count
in a group is its baseline. Speedup = throughput / baseline throughput (for a fixed amount
of work, epochs over the same data or strong scaling, that equals T_baseline / T);
efficiency = speedup / (devices / baseline devices). Repeats of one configuration are
combined: median, with min-max shown.
"""

import os
import statistics
import sys

import pandas as pd
from tabulate import tabulate

from scalelab import explain, results
from scalelab.cli import human_count
from scalelab.errors import UsageError

RUN_COLUMNS = ["run_id", "group", "model", "describe", "params", "scaling", "batch_per_device", "global_batch",
               "precision", "devices", "nodes", "procs_per_node", "launcher", "accelerator", "device", "backend",
               "threads", "status", "error", "train_time_s", "step_ms", "epoch_s", "samples_per_s",
               "tokens_per_s", "first_step_s", "whole_run_s", "train_loss", "val_loss", "val_acc", "created",
               "slurm_job", "restart_count", "compute_s", "synced_s", "comm_busy_s", "comm_alone_s", "exposed_comm_s",
               "comm_share", "overlap", "grad_bytes", "buckets", "bucket_bytes", "train_busbw_GBps",
               "tflops_per_device", "peak_tflops", "mfu"]
NUMERIC = ("train_time_s", "step_ms", "epoch_s", "samples_per_s", "tokens_per_s", "first_step_s", "whole_run_s",
           "train_loss", "val_loss", "val_acc", "params", "compute_s", "synced_s", "comm_busy_s", "comm_alone_s",
           "exposed_comm_s", "comm_share", "overlap", "grad_bytes", "buckets", "train_busbw_GBps", "tflops_per_device",
           "peak_tflops", "mfu")


def runs_frame(found: list) -> pd.DataFrame:
    """One row per training result, flat columns, readable in pandas or a CSV."""
    rows = []
    for r in results.latest_attempts(found):
        if r["kind"] != "training":
            continue
        w, launch, t, m = r["workload"], r["launch"], r["timing"], r.get("metrics") or {}
        slurm = r.get("slurm") or {}
        epochs = t.get("epoch_times_s") or []
        c = t.get("comm") or {}
        rows.append({
            "run_id": r["run_id"],
            "group": results.group_key(r),
            "model": w.get("model"),
            "describe": w.get("describe") or w.get("model"),
            "params": w.get("params"),
            "scaling": w.get("scaling"),
            "batch_per_device": w.get("batch_per_device"),
            "global_batch": w.get("global_batch"),
            "precision": w.get("precision"),
            "devices": launch["world_size"],
            "nodes": launch["num_nodes"],
            "procs_per_node": launch.get("procs_per_node"),
            "launcher": launch.get("launcher"),
            "accelerator": launch.get("accelerator"),
            "device": (launch.get("device_names") or ["?"])[0],
            "backend": launch.get("backend"),
            "threads": launch.get("threads_per_proc"),
            "status": r["status"],
            "error": r.get("error"),
            "train_time_s": t.get("train_time_s"),
            "step_ms": (t.get("step_time_s") or {}).get("median", float("nan")) * 1e3,
            "epoch_s": statistics.median(epochs) if epochs else None,
            "samples_per_s": t.get("samples_per_s"),
            "tokens_per_s": t.get("tokens_per_s"),
            "first_step_s": t.get("time_to_first_step_s"),
            "whole_run_s": t.get("whole_run_s"),
            "train_loss": m.get("final_train_loss"),
            "val_loss": m.get("val_loss"),
            "val_acc": m.get("val_acc"),
            "created": r.get("created"),
            "slurm_job": slurm.get("job_id"),
            "restart_count": slurm.get("restart_count") or 0,
            **{k: c.get(k) for k in ("compute_s", "synced_s", "comm_busy_s", "comm_alone_s", "exposed_comm_s",
                                     "comm_share", "overlap", "grad_bytes", "buckets", "train_busbw_GBps")},
            "bucket_bytes": tuple(c.get("bucket_bytes") or ()) or None,
            **{k: t.get(k) for k in ("tflops_per_device", "peak_tflops", "mfu")},
        })
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    for col in NUMERIC:
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    return frame


def scaling_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (group, devices, nodes): repeats combined, speedup and efficiency vs the group's baseline."""
    ok = runs[runs["status"] == "completed"].copy()
    if ok.empty:
        return pd.DataFrame()
    ok["throughput"] = ok["tokens_per_s"].where(ok["tokens_per_s"].notna(), ok["samples_per_s"])
    agg = (ok.groupby(["group", "devices", "nodes"], sort=True)
           .agg(runs=("run_id", "size"), throughput=("throughput", "median"),
                throughput_min=("throughput", "min"), throughput_max=("throughput", "max"),
                train_time_s=("train_time_s", "median"), step_ms=("step_ms", "median"),
                epoch_s=("epoch_s", "median"), global_batch=("global_batch", "first"),
                accelerator=("accelerator", "first"), device=("device", "first"), backend=("backend", "first"),
                scaling=("scaling", "first"), model=("model", "first"), describe=("describe", "first"),
                samples_per_s=("samples_per_s", "median"), bucket_bytes=("bucket_bytes", "first"),
                tokens_per_s=("tokens_per_s", "median"),
                **{k: (k, "median") for k in ("compute_s", "synced_s", "comm_busy_s", "comm_alone_s", "exposed_comm_s",
                                               "comm_share", "overlap", "grad_bytes", "buckets", "train_busbw_GBps",
                                               "tflops_per_device", "peak_tflops", "mfu")})
           .reset_index())
    agg["letter"] = agg["group"].map(group_letters(ok["group"]))
    agg["hardware"] = [d if a == "gpu" else "CPU (gloo)" for a, d in zip(agg["accelerator"], agg["device"])]
    base = agg.sort_values(["devices", "nodes"]).groupby("group").first()
    agg["baseline_devices"] = agg["group"].map(base["devices"])
    agg["speedup"] = agg["throughput"] / agg["group"].map(base["throughput"])
    agg["efficiency"] = agg["speedup"] / (agg["devices"] / agg["baseline_devices"])
    agg["throughput_per_device"] = agg["throughput"] / agg["devices"]
    agg["baseline_step_ms"] = agg["group"].map(base["step_ms"])
    agg["baseline_compute_s"] = agg["group"].map(base["compute_s"])
    return agg


def group_letters(groups) -> dict:
    """Group key -> "A", "B", … in the order the groups first appear: one naming for tables, plots and files."""
    return {g: chr(ord("A") + i) if i < 26 else str(i + 1) for i, g in enumerate(dict.fromkeys(groups))}


def fmt_num(x, spec=",.1f", missing="—"):
    """A number for a table cell; "—" where it is missing (None or NaN)."""
    return missing if x is None or pd.isna(x) else format(x, spec)


def _group_title(first: pd.Series, letter: str) -> str:
    batch = (f"batch {first['batch_per_device']}/device (weak scaling: global batch grows)"
             if first["scaling"] == "weak" else f"global batch {first['global_batch']} split over devices "
             "(strong scaling)")
    if first["accelerator"] == "gpu":
        hw = f"GPU: {first['device']}"
    else:
        hw = "CPU rehearsal (gloo; ranks share this machine's cores)"
    params = f"{human_count(first['params'])} params" if pd.notna(first["params"]) else "params unknown"
    return f"Group {letter}: {first['describe']} ({params}) · {batch} · precision {first['precision']} · {hw}"


def fmt_pct(x, spec=".0f") -> str:
    return "—" if x is None or pd.isna(x) else f"{x * 100:{spec}} %"


def _predicted(r) -> str:
    lo, hi = r.pred_eff_no_overlap, r.pred_eff_overlap
    if pd.isna(lo) or pd.isna(hi):
        return "—"
    if round(lo * 100) == round(hi * 100):
        return f"{hi * 100:.0f} %"
    return f"{lo * 100:.0f}–{hi * 100:.0f} %"


def _money_headers(g, unit) -> list:
    heads = []
    if g["cost_per_1k_samples"].notna().any():
        heads.append("cost / 1K samples")
    if g["budget_hours"].notna().any():
        heads.append("hours for token budget")
        if g["budget_cost"].notna().any():
            heads.append("cost for token budget")
    return heads


def _money(r, unit) -> list:
    cells = []
    if pd.notna(r.cost_per_1k_samples):
        cells.append(f"{r.cost_per_1k_samples:.4g}")
    if pd.notna(r.budget_hours):
        cells.append(f"{r.budget_hours:,.1f}")
        if pd.notna(r.budget_cost):
            cells.append(f"{r.budget_cost:,.0f}")
    return cells


def _bench_hint(g: pd.DataFrame) -> str:
    """The benchmark command that matches the group's largest configuration."""
    big = g.sort_values(["devices", "nodes"]).iloc[-1]
    devices, nodes = int(big["devices"]), int(big["nodes"])
    if big["accelerator"] == "gpu" or nodes > 1:  # the job script runs one task per GPU, as training did
        return (f"`sbatch --nodes={nodes} slurm_jobs/allreduce_bench.sh` (its header must say "
                f"{devices // nodes} tasks per node, as the training runs had)")
    return f"`python src/allreduce_bench.py --devices {devices}`"


def render(runs: pd.DataFrame, scaling: pd.DataFrame, fmt: str = "simple", max_runs: int = 12) -> str:
    """Per group: the runs (the newest `max_runs` per configuration; None = all) and the scaling table."""
    out = []
    if not scaling.empty and "pred_eff_overlap" not in scaling:
        scaling = explain.annotate(scaling, explain.bench_frame([]))
    ok = runs[runs["status"] == "completed"]
    letters = group_letters(ok["group"])
    for group, members in ok.groupby("group", sort=False):
        letter = letters[group]
        first = members.iloc[0]
        unit = "tokens/s" if first["model"] == "transformer" else "samples/s"
        thr_col = "tokens_per_s" if unit == "tokens/s" else "samples_per_s"
        out.append(_group_title(first, letter))
        members = members.sort_values(["devices", "nodes", "created"])
        hidden = 0
        if max_runs is not None and len(members) > max_runs:
            shown = members.groupby(["devices", "nodes"]).tail(max(1, max_runs // members[["devices", "nodes"]].drop_duplicates().shape[0]))
            hidden, members = len(members) - len(shown), shown
        run_rows = [[r.run_id, r.devices, r.nodes, f"{r.procs_per_node}×{r.threads}t" if r.accelerator == "cpu"
                     else r.procs_per_node, fmt_num(r.first_step_s), fmt_num(r.train_time_s, ".2f"), fmt_num(r.step_ms),
                     fmt_num(r.epoch_s, ".2f"), fmt_num(getattr(r, thr_col), ",.0f"), fmt_num(r.train_loss, ".3f"),
                     fmt_num(r.val_acc, ".3f")] for r in members.itertuples()]
        out.append(tabulate(run_rows, headers=["run id", "devices", "nodes", "procs/node" if first["accelerator"] == "gpu"
                                               else "procs×threads", "1st step s", "train s", "step ms",
                                               "epoch s", unit, "train loss", "val acc"],
                            tablefmt=fmt, disable_numparse=True))
        if hidden:
            out.append(f"  ... {hidden} older run(s) not listed (all are in the scaling table; --all_runs lists them)")
        g = scaling[scaling["group"] == group].sort_values(["devices", "nodes"])
        base = int(g["baseline_devices"].iloc[0])
        out.append("")
        out.append(f"Scaling (baseline: {base} device{'s' if base > 1 else ''}; speedup = {unit} ÷ baseline {unit})")
        if len(g) == 1:
            out.append(f"  only one configuration ({base} device(s)) in this group: nothing to compare against yet")
        sc_rows = [[r.devices, r.nodes, r.runs,
                    fmt_num(r.throughput, ",.0f") + (f" [{r.throughput_min:,.0f}–{r.throughput_max:,.0f}]" if r.runs > 1 else ""),
                    fmt_num(r.speedup, ".2f") + "×", fmt_num(r.efficiency * 100, ".0f") + " %", _predicted(r),
                    fmt_num(r.throughput_per_device, ",.0f")] + _money(r, unit) for r in g.itertuples()]
        out.append(tabulate(sc_rows, headers=["devices", "nodes", "runs", f"{unit} (median [min–max])", "speedup",
                                              "efficiency", "predicted eff.", f"{unit} per device"]
                            + _money_headers(g, unit), tablefmt=fmt, disable_numparse=True))
        if g["compute_s"].notna().any():
            out.append("")
            out.append("Where the step goes (medians; compute from no-sync probe steps; all-reduce from DDP's timed "
                       "hook, during backward and alone; predicted from the all-reduce benchmark's busbw)")
            tg_rows = [[r.devices, r.nodes, fmt_num(r.step_ms, ",.1f"), fmt_num(r.compute_s * 1e3, ",.1f"),
                        fmt_num(r.comm_busy_s * 1e3, ",.1f"), fmt_num(r.comm_alone_s * 1e3, ",.1f"),
                        fmt_num(r.pred_comm_s * 1e3, ",.1f"),
                        *(["?"] * 3 if explain.split_within_noise(r) else
                          [fmt_num(r.exposed_comm_s * 1e3, ",.1f"), fmt_pct(r.comm_share), fmt_pct(r.overlap)]),
                        fmt_num(r.grad_bytes / 1e6, ".3g"),
                        fmt_num(r.train_busbw_GBps, ".3g"), fmt_num(r.bench_busbw_GBps, ".3g"),
                        fmt_num(r.tflops_per_device, ".3g"), fmt_pct(r.mfu_shown, ".1f")]
                       for r in g.itertuples()]
            out.append(tabulate(tg_rows, headers=["devices", "nodes", "step ms", "compute ms", "all-reduce ms",
                                                  "alone ms", "predicted ms", "waited ms", "comm share", "hidden",
                                                  "grad MB", "DDP busbw GB/s", "bench busbw GB/s", "TFLOP/s/dev", "MFU"],
                                tablefmt=fmt, disable_numparse=True))
            lines = [explain.limiting_line(r) for r in g.itertuples()]
            out.extend(f"  {line}" for line in lines if line)
            if g["devices"].max() > 1 and g["bench_busbw_GBps"].isna().all():
                out.append(f"  (No all-reduce benchmark in this folder at these sizes: {_bench_hint(g)} adds the "
                           "predicted columns.)")
            elif g["bench_runs"].max() > 1:
                out.append(f"  (predicted ms and bench busbw: the median of {g['bench_runs'].max():.0f} all-reduce "
                           "benchmark runs in this folder, per message size)")
            if g["mfu_shown"].isna().all():
                out.append("  MFU: — (no peak known for this hardware; give --peak_tflops to compute it)")
        out.append("")
    failed = runs[runs["status"] != "completed"]
    if not failed.empty:
        out.append("Runs that did not complete (left out of every speedup):")
        out.append(tabulate([[r.run_id, r.status, r.devices, r.nodes, (r.error or "")[:100]] for r in failed.itertuples()],
                            headers=["run id", "status", "devices", "nodes", "error"], tablefmt=fmt,
                            disable_numparse=True))
        out.append("")
    return "\n".join(out)


def build(output_dir: str, peak_tflops=None, gpu_hour_price=None, token_budget=None) -> tuple:
    """Folder -> (runs, annotated scaling, all-reduce benchmarks, skipped files): what every view draws from."""
    if not os.path.isdir(output_dir):
        raise UsageError(f"{output_dir} is not a folder (run `make demo` or src/train.py first)")
    found, skipped = results.scan(output_dir)
    runs = runs_frame(found)
    bench = explain.bench_frame(found)
    scaling = scaling_frame(runs)
    if not scaling.empty:
        scaling = explain.annotate(scaling, bench, peak_tflops, gpu_hour_price, token_budget)
    return runs, scaling, bench, skipped


def main(argv=None) -> int:
    from scalelab.cli import OneLineParser, positive_float

    p = OneLineParser(prog="benchmark.py", description="Speedup and parallel-efficiency tables from result.json files.")
    p.add_argument("--output_dir", default=None, help="folder searched (recursively) for result.json (default outputs)")
    p.add_argument("--plot", metavar="DIR", help="also draw PNGs there: speedup, efficiency, throughput per device, "
                                               "all-reduce busbw vs message size")
    p.add_argument("--export", metavar="DIR", help="also write every table as CSV and Markdown, and summary.json")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="two outputs folders (or summary.json files) side by side, with B ÷ A per configuration")
    p.add_argument("--save_csv", metavar="FILE", help="also write the scaling table (all groups) as CSV")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables (for slides and issues)")
    p.add_argument("--all_runs", action="store_true", help="list every run, not only the newest per configuration")
    p.add_argument("--peak_tflops", type=positive_float, help="peak TFLOP/s per device for MFU (default: known GPUs)")
    p.add_argument("--gpu_hour_price", type=positive_float, metavar="PRICE",
                   help="price of one device-hour: adds cost per 1K samples (and per token budget)")
    p.add_argument("--token_budget", type=positive_float, metavar="TOKENS",
                   help="tokens to train (e.g. 2e9): adds time (and cost) to train them, per configuration")
    args = p.parse_args(argv)
    money = (args.peak_tflops, args.gpu_hour_price, args.token_budget)
    if args.compare:
        from scalelab import compare, export

        extra = [flag for flag, v in (("--output_dir", args.output_dir), ("--plot", args.plot),
                                      ("--save_csv", args.save_csv), ("--all_runs", args.all_runs)) if v]
        if extra:
            raise UsageError(f"--compare A B does not take {', '.join(extra)} (its files: --export DIR)")

        def summarize_folder(folder):
            runs, scaling, bench, skipped = build(folder, *money)
            _warn(skipped)
            return export.summary(scaling, bench, len(runs), folder)

        return compare.main(args, summarize_folder)
    args.output_dir = args.output_dir or "outputs"
    try:
        runs, scaling, bench, skipped = build(args.output_dir, *money)
    except UsageError as exc:
        raise UsageError(f"--output_dir {exc}") from None
    _warn(skipped)
    if runs.empty:
        print(f"No training results under {args.output_dir}/ yet: run `make demo` or `python src/train.py`.")
        return 1
    for flag, path in (("--plot", args.plot), ("--export", args.export)):
        if path:  # before anything is printed: a bad folder fails in one line, with nothing half-written
            results.ensure_output_dir(path, flag)
    n_groups = runs.loc[runs["status"] == "completed", "group"].nunique()
    print(f"scalelab report: {len(runs)} run(s) in {args.output_dir}/, {n_groups} scaling group(s)\n")
    max_runs = None if args.all_runs else 12
    print(render(runs, scaling, fmt="github" if args.markdown else "simple", max_runs=max_runs))
    written = []
    if args.save_csv:
        written.append(results.atomic_write_text(args.save_csv, scaling.to_csv(index=False)))
    if args.export:
        from scalelab import export

        written += export.write_all(args.export, runs, scaling, bench, render(runs, scaling, "github", max_runs),
                                    args.output_dir)
    if args.plot:
        from scalelab import plots

        written += plots.write_all(args.plot, scaling, bench)
    for path in written:
        print(f"written: {path}")
    return 0


def _warn(skipped):
    for path, reason in skipped:
        print(f"benchmark.py: warning: skipped {path}: {reason}", file=sys.stderr)


def cli():
    """Console-script entry point (see setup.cfg)."""
    import sys

    from scalelab.cli import run_main

    sys.exit(run_main("scalelab-report", main))
