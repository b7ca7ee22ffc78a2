"""`benchmark.py` (and the scalelab-report console script): a folder of result.json files -> the report.

Reads the folder once (`build`), prints the tables, and on request writes the same frames as plots and
files, or puts two folders side by side (`--compare`).
"""

import os
import subprocess
import sys
from dataclasses import dataclass

import pandas as pd

from scalelab import files, redaction, results
from scalelab.bench import nccl_tests
from scalelab.entry import FORECAST_NODES, GBIT, PERCENT, PRICE, TFLOPS, OneLineParser, count, number_type, run_piped
from scalelab.errors import UsageError
from scalelab.report import (
    compare,
    explain,
    export,
    forecast_view,
    history,
    index,
    nccl_logs,
    perflog,
    ranks,
    reference,
    trace,
)
from scalelab.report.cells import blocks
from scalelab.report.frames import read_runs, scaling_frame
from scalelab.report.tables import render, terminal_width, wrap

fraction = number_type(float, lambda v: 0 < v <= 1, "a fraction in (0, 1], e.g. 0.1 for 10 %")
FORECAST_NONE = ("Forecast: none: no group here holds what a forecast is calibrated on (a 1-device run's step and the "
                 "gradient size its runs recorded; chapter 13)")


@dataclass(frozen=True)
class Report:
    """One folder, read once: what every view (tables, plots, files, --compare, --reference) draws from."""
    runs: pd.DataFrame  # one row per training run (report/columns.py's RUNS)
    scaling: pd.DataFrame  # one row per configuration, annotated, with forecast_error; empty without a completed run
    benches: pd.DataFrame  # every collective's benchmarks: result.json files and nccl-tests logs (explain.bench_frame)
    skipped: list  # (path, reason) of each file not read
    track_record: pd.DataFrame  # each multi-device configuration predicted from the other runs (forecast_view.record)
    identity_notes: list  # results not counted as runs of their own (frames.identity_notes)
    light_records: list  # the training results as read (through the index: light, without their ranks' lists)

    def full_records(self, only=None) -> list:
        """The training results whole, per-rank marks and all (what the step timelines and --trace draw): read
        again from their files where the index gave them light. only: those run ids (a site's folder holds
        100,000; the timelines draw one run per configuration)."""
        return index.full([r for r in self.light_records if only is None or r["run_id"] in only])

    @property
    def bench(self) -> pd.DataFrame:
        """The all-reduce benchmarks (what DDP's step, the busbw plot and --reference read); all-gathers and
        reduce-scatters price FSDP's step (annotate and the forecast read `benches`)."""
        return self.benches[self.benches["collective"] == "all_reduce"]


def build(output_dir: str, *, peak_tflops=None, gpu_hour_price=None, token_budget=None, nccl_logs=(),
          use_index: bool = True) -> Report:
    """Folder -> Report. All-reduce benchmarks come from result.json files and from nccl-tests logs: those in the
    folder (*.log, *.txt, *.out that hold all_reduce_perf output) and those named in nccl_logs. use_index: read the
    results through the folder's index (report/index.py), else every file whole.
    """
    folder_to_read(output_dir)
    with files.gc_set_aside() as set_aside:
        found, skipped = read_folder(output_dir, nccl_logs, use_index)
        set_aside()
        runs, notes = read_runs(found)
        benches = explain.bench_frame(found, explain.COLLECTIVES)
        scaling, track = scaling_frame(runs), pd.DataFrame()
        if not scaling.empty:
            scaling = explain.annotate(scaling, benches, peak_tflops, gpu_hour_price, token_budget)
            track = forecast_view.record(runs, benches)
            scaling = forecast_view.with_forecast_error(scaling, track)
    records = [r for r in found if r.get("kind") == "training"]
    return Report(runs, scaling, benches, skipped, track, notes, records)


def folder_to_read(path: str):
    """The folder a report reads, or UsageError: what is there instead (a file: give its folder), or nothing yet."""
    if os.path.isdir(path):
        return
    if not os.path.lexists(path):
        raise UsageError(f"{path} is not a folder ({_what_to_run()})")
    what = ("a symlink to nothing" if not os.path.exists(path) else "a file" if os.path.isfile(path) else
            "a device, a FIFO or a socket")
    raise UsageError(f"{path} is {what}, not a folder: give the folder the result.json files are in (searched "
                     "recursively)")


def read_folder(output_dir: str, nccl_logs, use_index: bool) -> tuple:
    """(results, skipped): the folder's result.json files (through its index where use_index) and its nccl-tests
    logs and those named, from one walk of it."""
    if use_index:  # its walk too: an earlier report's listings, kept, where they hold
        found, skipped, listing = index.read(output_dir)
    else:
        listing = files.listing(output_dir)
        found, skipped = results.scan(output_dir, listing)
    found += read_nccl_logs(output_dir, nccl_logs, {r["run_id"] for r in found}, skipped, listing)
    return found, skipped


def read_nccl_logs(output_dir: str, paths, known: set, skipped: list, listing=None) -> list:
    """nccl-tests logs as benchmark results; a scalelab run's own log (--format nccl-tests) beside its
    result.json is the same run, counted once. Logs that cannot be used go to skipped, with the reason; what
    is odd in a log that is used is one warning line on stderr."""
    logs, bad = nccl_tests.scan(output_dir, listing)
    for path in paths:
        if os.path.abspath(path) in {os.path.abspath(r["_path"]) for r in logs}:
            continue
        try:
            logs += nccl_tests.load(path)
        except results.ResultError as exc:
            bad.append((path, str(exc)))
    skipped += bad
    kept = [r for r in logs if r["run_id"] not in known]
    for path, warning in sorted({(r["_path"], w) for r in kept for w in r.get("_warnings", [])}):
        print(f"benchmark.py: warning: {path}: {warning}", file=sys.stderr)  # once per log, whatever its types
    return kept


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="benchmark.py", description="Speedup and parallel-efficiency tables from result.json files.")
    p.add_argument("--output_dir", default=None, help="folder searched (recursively) for result.json (default outputs)")
    p.add_argument("--nccl_tests", nargs="+", metavar="LOG", default=[],
                   help="all_reduce_perf logs (nccl-tests' output) to read as all-reduce benchmarks, besides the "
                        "*.log/*.txt/*.out under --output_dir that hold one")
    p.add_argument("--plot", metavar="DIR", help="also draw PNGs there: speedup, efficiency, throughput per device, "
                                               "all-reduce busbw vs message size, one step at each scale rank by "
                                               "rank (a timeline per group), loss vs training time per group "
                                               "(from the runs' metrics.csv)")
    p.add_argument("--export", metavar="DIR", help="also write every table as CSV and Markdown, and summary.json")
    p.add_argument("--trace", metavar="DIR", help="also write each run's steps as a trace Perfetto and "
                                                "chrome://tracing open (<run id>.trace.json: a process per rank, "
                                                "compute and communication tracks)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="two outputs folders (or summary.json files) side by side, with B ÷ A per configuration")
    p.add_argument("--save_csv", metavar="FILE", help="also write the scaling table (all groups) as CSV")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables (for slides and issues)")
    p.add_argument("--all_runs", action="store_true", help="list every run, not only the newest per configuration")
    p.add_argument("--details", action="store_true",
                   help="also each group's runs and where its step goes (wide tables); by default the report fits "
                        "120 columns: per group its scaling table, what limits it, and every warning")
    p.add_argument("--ranks", action="store_true",
                   help="instead of the report: each rank of each multi-rank run, by host, with the slow ones flagged "
                        "and the sbatch --exclude= list to try next")
    p.add_argument("--straggler_pct", type=PERCENT, metavar="PCT",
                   help=f"with --ranks: flag a rank whose compute is more than PCT %% above the median rank's "
                        f"(default {ranks.DEFAULT_PCT:g})")
    p.add_argument("--no_index", action="store_true",
                   help="read every result.json whole, not through the folder's index (.scalelab-index.sqlite, "
                        "updated by each report: only new or changed files are read)")
    p.add_argument("--history", action="store_true",
                   help="also follow each configuration's runs by date: the latest against its own scatter, and the "
                        "date and size of each lasting change (a site's nightly results; with --plot: history_*.png)")
    p.add_argument("--perflog", nargs="+", metavar="PATH", default=[],
                   help="with --history: ReFrame perflogs (files, or folders of *.log: --perflogdir) followed "
                        "beside it, each performance variable by date, judged by the same rule")
    p.add_argument("--forecast", action="store_true",
                   help="also forecast the scales not run (1 to 64 nodes at the measured devices per node), calibrated "
                        "on this folder's runs and all-reduce benchmarks, each with a band (chapter 13)")
    p.add_argument("--forecast_nodes", type=FORECAST_NODES, nargs="+", metavar="N",
                   help="with --forecast: these node counts instead of 1 2 4 8 16 32 64")
    p.add_argument("--link_gbit", type=GBIT, metavar="GBIT",
                   help="with --forecast: between nodes at this rate (Gbit/s per node), scaled from an emulated "
                        "link measured at another rate")
    p.add_argument("--peak_tflops", type=TFLOPS, help="peak TFLOP/s per device for MFU (default: known GPUs)")
    p.add_argument("--gpu_hour_price", type=PRICE, metavar="PRICE",
                   help="price of one device-hour: adds cost per 1K samples (and per token budget)")
    p.add_argument("--token_budget", type=count, metavar="TOKENS",
                   help="tokens to train (e.g. 2e9): adds time (and cost) to train them, per configuration")
    p.add_argument("--reference", metavar="FILE", help="check the folder against a reference file (YAML, ReFrame's "
                                                    "[value, lower, upper, unit] per quantity): PASS/FAIL and PERF "
                                                    "lines, exit 1 on any failure")
    p.add_argument("--write_reference", metavar="FILE",
                   help="write a reference file from this (good) folder: its current values, --reference_tolerance "
                        "below them, no upper bound")
    p.add_argument("--reference_tolerance", type=fraction, metavar="FRACTION",
                   help="with --write_reference: how far below the current values a check still passes "
                        "(default 0.1 = 10 %%)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    money = dict(peak_tflops=args.peak_tflops, gpu_hour_price=args.gpu_hour_price, token_budget=args.token_budget)
    if args.compare:
        return _compare(args, money)
    args.output_dir = args.output_dir or "outputs"
    _check_pairs(args)
    checks = _reference_args(args)
    if args.ranks:
        return _ranks(args)
    try:
        report = build(args.output_dir, **money, nccl_logs=args.nccl_tests, use_index=not args.no_index)
    except UsageError as exc:
        raise UsageError(f"--output_dir {exc}") from None
    _warn(report.skipped)
    if args.write_reference or checks is not None:
        return _reference(args, checks, report)
    runs, scaling, bench = report.runs, report.scaling, report.bench
    fmt = "github" if args.markdown else "simple"
    if runs.empty:
        return _no_runs(args.output_dir, bench, fmt)
    for flag, path in (("--plot", args.plot), ("--export", args.export), ("--trace", args.trace)):
        if path:  # before anything is printed: a bad folder fails in one line, with nothing half-written
            results.ensure_output_dir(path, flag)
    max_runs = None if args.all_runs else 12
    width = terminal_width() if fmt == "simple" else 0
    show = print if fmt == "simple" else lambda text: print(blocks(text))  # Markdown: each table a block of its own
    show(_header(report, args.output_dir, width))
    show(render(runs, scaling, fmt=fmt, max_runs=max_runs, details=args.details or args.all_runs, width=width))
    track = forecast_view.track_record(runs, report.track_record, fmt, details=args.details or args.all_runs)
    for lines in ([wrap(line, width) for line in track], nccl_logs.render(bench, fmt)):  # a log's table unfolded
        if lines:  # a section with nothing to say prints no blank line either
            show("\n".join(lines))
    followed = history.follow(runs) if args.history else []
    if args.history:
        show("\n".join(wrap(line, width) for line in history.render(followed, fmt)))
    logged, unread = [], []
    if args.perflog:
        logged = perflog.follow(perflog.read(args.perflog, unread))
        show("\n".join(wrap(line, width) for line in perflog.render(logged, unread, fmt)))
    nodes = tuple(args.forecast_nodes or forecast_view.fc.DEFAULT_NODES)
    if args.forecast:  # asked for: said, even where there is nothing to forecast from
        show("\n".join(forecast_view.render(runs, report.benches, nodes, fmt, args.token_budget, args.gpu_hour_price,
                                           args.link_gbit) or [FORECAST_NONE, ""]))
    written = []
    if args.save_csv:
        written.append(results.atomic_write_text(args.save_csv, redaction.csv_text(scaling)))
    if args.export:
        written += export.write_all(args.export, runs, scaling, bench, render(runs, scaling, "github", max_runs),
                                    args.output_dir, followed=followed if args.history else None,
                                    perflogs=(logged, unread) if args.perflog else None)
    if args.trace:
        written += trace.write_all(args.trace, report.full_records())
    if args.plot:
        written += _draw(args, report, nodes, followed)
    for path in written:
        print(f"written: {path}")
    return 0


def _draw(args, report: Report, nodes: tuple, followed: list) -> list:
    """--plot: every figure there is data for (and --forecast's, --history's where asked: followed, history.follow's
    rows); the paths written."""
    from scalelab.report import curves, plots, step_plot  # matplotlib takes a while to import: only when asked

    runs, scaling = report.runs, report.scaling
    written = plots.write_all(args.plot, scaling, report.bench)
    if not scaling.empty:
        drawn = report.full_records(step_plot.chosen_runs(runs, scaling))
        written += plots.save(args.plot, step_plot.figures(drawn, runs, scaling))
    if args.forecast:
        written += plots.save(args.plot, forecast_view.figures(runs, report.benches, nodes))
    if args.history:
        written += plots.save(args.plot, history.figures(followed))
    figures, note = curves.figures(args.output_dir, runs, scaling) if not scaling.empty else ([], None)
    written += plots.save(args.plot, figures)
    if note:
        print(f"benchmark.py: note: {note}", file=sys.stderr)
    return written


def _reference(args, checks, report: Report) -> int:
    """--write_reference: a reference file of this folder's values; --reference: PASS/FAIL lines, 1 on a failure."""
    if args.write_reference:
        checks = reference.draft(report.scaling, report.bench, -(args.reference_tolerance or 0.1))
        path = reference.write(args.write_reference, checks)
        print(f"written: {path} ({reference.count(checks)})")
        return 0
    lines, failed = reference.check(checks, report.scaling, report.bench, args.output_dir)
    print("\n".join(lines))
    return 1 if failed else 0


def _header(report: Report, output_dir: str, width: int) -> str:
    """What was counted: runs, groups, and each result not counted as a run of its own (frames.identity_notes)."""
    runs = report.runs
    n_groups = runs.loc[runs["status"] == "completed", "group"].nunique()
    lines = [f"scalelab report: {len(runs)} run(s) in {output_dir}/, {n_groups} scaling group(s)"]
    for note in report.identity_notes:  # one line each, folded where a terminal shows it
        lines.append(wrap(f"note: {redaction.inert(note)}", width))
    return "\n".join(lines) + "\n"


def _no_runs(output_dir: str, bench: pd.DataFrame, fmt: str) -> int:
    """No training run: the nccl-tests logs read are still shown (`--nccl_tests LOG` alone prints them)."""
    print("\n".join(nccl_logs.render(bench, fmt)[1:] + [""]), end="")
    print(f"No training results under {output_dir}/ yet: {_what_to_run()}.")
    return 1


def _what_to_run() -> str:
    """Where nothing was written yet: on a cluster right after sbatch, the jobs that have not written (yet)."""
    try:
        proc = subprocess.run(["squeue", "--me", "-h", "-o", "%i %j %T"], capture_output=True, text=True, timeout=5)
        jobs = [line.split() for line in proc.stdout.splitlines() if len(line.split()) == 3] if not proc.returncode \
            else []
        jobs = [job for job in jobs if job[1].startswith("sl-")]  # scalelab's jobs (slurm_jobs/, submit.py)
    except (OSError, subprocess.TimeoutExpired):
        jobs = []
    if not jobs:
        return "run `make demo` or `python src/train.py` first"
    listed = ", ".join(f"{i} ({name}, {state.lower()})" for i, name, state in jobs[:4])
    more = f" and {len(jobs) - 4} more" if len(jobs) > 4 else ""
    return f"your SLURM job(s) {listed}{more} have not written theirs: run this again when they end (squeue --me)"


def _check_pairs(args):
    """Files that must exist and flags that only mean something beside another, each one line."""
    for path in args.nccl_tests:
        if not os.path.isfile(path):
            raise UsageError(f"--nccl_tests {path}: no such file")
    if args.straggler_pct is not None and not args.ranks:
        raise UsageError("--straggler_pct goes with --ranks")
    if args.perflog and not args.history:
        raise UsageError("--perflog goes with --history")
    args.perflog = perflog.paths_of(args.perflog)  # a path that is neither a file nor a folder: one line, now
    for flag, value in (("--forecast_nodes", args.forecast_nodes), ("--link_gbit", args.link_gbit)):
        if value and not args.forecast:
            raise UsageError(f"{flag} goes with --forecast")


def _reference_args(args):
    """The checks of --reference (read before the folder: a bad file fails fast), None without it; either
    reference flag is a mode of its own."""
    given = [f for f, v in (("--reference", args.reference), ("--write_reference", args.write_reference)) if v]
    if args.reference_tolerance is not None and not args.write_reference:
        raise UsageError("--reference_tolerance goes with --write_reference (a reference file holds its own)")
    if not given:
        return None
    extra = [flag for flag, v in (("--plot", args.plot), ("--export", args.export), ("--save_csv", args.save_csv),
                                  ("--trace", args.trace), ("--markdown", args.markdown), ("--all_runs", args.all_runs),
                                  ("--ranks", args.ranks), ("--history", args.history)) if v]
    if len(given) > 1 or extra:
        raise UsageError(f"{given[0]} does not take {', '.join((given[1:] + extra))}")
    return reference.load(args.reference) if args.reference else None


def _compare(args, money) -> int:
    """`--compare A B`: each side a folder (through `build`) or a summary.json."""
    extra = [flag for flag, v in (("--output_dir", args.output_dir), ("--plot", args.plot), ("--trace", args.trace),
                                  ("--nccl_tests", args.nccl_tests),
                                  ("--save_csv", args.save_csv), ("--all_runs", args.all_runs),
                                  ("--ranks", args.ranks), ("--straggler_pct", args.straggler_pct),
                                  ("--reference", args.reference), ("--write_reference", args.write_reference),
                                  ("--history", args.history)) if v]
    if extra:
        raise UsageError(f"--compare A B does not take {', '.join(extra)} (its files: --export DIR)")

    def summarize_folder(folder):
        report = build(folder, **money)
        _warn(report.skipped)
        return export.summary(report.scaling, report.bench, len(report.runs), folder)

    return compare.main(args, summarize_folder)


def _ranks(args) -> int:
    """`--ranks`: the per-rank view alone (report/ranks.py)."""
    extra = [flag for flag, v in (("--plot", args.plot), ("--export", args.export), ("--save_csv", args.save_csv),
                                  ("--trace", args.trace), ("--history", args.history)) if v]
    if extra:
        raise UsageError(f"--ranks prints the per-rank view only; it does not take {', '.join(extra)}")
    try:
        folder_to_read(args.output_dir)
    except UsageError as exc:
        raise UsageError(f"--output_dir {exc}") from None
    with files.gc_set_aside():  # through the index: only the runs shown are read whole (a site's 100,000: 70 s)
        found, skipped = (results.scan if args.no_index else index.scan)(args.output_dir)
    _warn(skipped)
    pct = ranks.DEFAULT_PCT if args.straggler_pct is None else args.straggler_pct
    print(ranks.render(found, pct, "github" if args.markdown else "simple", args.all_runs))
    return 0


def _warn(skipped):
    for path, reason in skipped:  # a file's name is data too: shown, never obeyed (redaction.inert)
        print(f"benchmark.py: warning: skipped {redaction.inert(path)}: {redaction.inert(reason)}", file=sys.stderr)


def cli():
    """Console-script entry point (see setup.cfg); `benchmark.py ... | head` stops quietly."""
    return run_piped("benchmark.py", main)
