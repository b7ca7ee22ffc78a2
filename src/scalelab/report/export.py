"""The report as files (`benchmark.py --export DIR`): CSV and Markdown of every table, one JSON summary.

CSVs hold raw numbers (seconds, fractions, bytes) with the unit in the column name, for pandas
or a spreadsheet; `report.md` is the printed report in Markdown, for slides and issues;
`summary.json` (results.SUMMARY_SCHEMA) is what one folder showed, small enough to send to
another site and `--compare` against. Every file is written atomically.
"""

import datetime as _dt
import json
import math
import os
from types import SimpleNamespace

import pandas as pd
from tabulate import tabulate

from scalelab import __version__, redaction, results
from scalelab.errors import UsageError
from scalelab.report import cells, columns, explain, history, perflog, plausible

# CSV / summary.json columns: the frame's own names (report/columns.py's EXPORTED), times in seconds
SCALING_COLUMNS = columns.exported("scaling")
STEP_COLUMNS = columns.exported("step")
BENCH_COLUMNS = ["run_id", "world_size", "num_nodes", "backend", "device", "bytes", "count", "dtype", "time_s",
                 "algbw_GBps", "busbw_GBps", "single_op_s", "wrong"]


def bench_rows(bench: pd.DataFrame) -> pd.DataFrame:
    rows = [{**{k: b[k] for k in ("run_id", "world_size", "num_nodes", "backend", "device")}, **row}
            for _, b in bench.iterrows() for row in sorted(b["rows"], key=lambda r: r["bytes"])]
    return pd.DataFrame(rows, columns=BENCH_COLUMNS)


def _clean(x):
    """JSON has no NaN or inf: such numbers become null; numpy scalars become Python ones."""
    if x is None:
        return None
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):  # NaN or ±inf (a zero baseline throughput)
        return None
    return x


def summary(scaling: pd.DataFrame, bench: pd.DataFrame, n_runs: int, output_dir: str) -> dict:
    """What the report showed, per configuration, with the workload and hardware that identify it."""
    configurations = []
    for _, r in scaling.iterrows():
        key = json.loads(r["group"])
        configurations.append({
            "workload": key["workload"], "hardware_detail": key["hardware"],
            **{name: _clean(r[name]) for name in columns.exported()},
            "limiting": explain.limiting_line(r),
            "findings": plausible.findings(SimpleNamespace(**r)),  # what the report's "!" lines say of it
        })
    allreduce = [{"run_id": b["run_id"], "world_size": int(b["world_size"]), "num_nodes": int(b["num_nodes"]),
                  "backend": b["backend"], "device": b["device"], "large_msg_busbw_GBps": _clean(b["busbw_GBps"]),
                  "rows": b["rows"]} for _, b in bench.iterrows()]
    return {"schema": results.SUMMARY_SCHEMA, "schema_version": results.SUMMARY_VERSION,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "scalelab_version": __version__, "output_dir": output_dir, "training_runs": n_runs,
            "configurations": configurations, "allreduce": allreduce}


def write_all(folder: str, runs: pd.DataFrame, scaling: pd.DataFrame, bench: pd.DataFrame,
              report_markdown: str, output_dir: str, *, followed=None, perflogs=None) -> list:
    """runs.csv, scaling.csv, step_breakdown.csv, allreduce.csv (when benchmarked), report.md, summary.json; with
    --history (followed: history.follow's rows) history.csv and history_changes.csv, and with --perflog (perflogs:
    perflog.follow's rows and the files or lines it left out) perflog.csv and perflog_changes.csv, each view's
    table in report.md as printed."""
    os.makedirs(folder, exist_ok=True)
    files = {"runs.csv": redaction.csv_text(runs)}
    if not scaling.empty:
        for name, columns in (("scaling.csv", SCALING_COLUMNS), ("step_breakdown.csv", STEP_COLUMNS)):
            files[name] = redaction.csv_text(scaling[columns])
    markdown = report_markdown
    if followed is not None:
        files["history.csv"], files["history_changes.csv"] = map(redaction.csv_text, history.exported(followed))
        markdown += "\n\n" + "\n".join(history.render(followed, "github"))
    if perflogs is not None:
        files["perflog.csv"], files["perflog_changes.csv"] = map(redaction.csv_text, perflog.exported(perflogs[0]))
        markdown += "\n\n" + "\n".join(perflog.render(*perflogs, "github"))
    if not bench.empty:
        files["allreduce.csv"] = redaction.csv_text(bench_rows(bench))  # every run's rows; report.md the newest
        shown = explain.newest_benchmarks(bench)  # newest first, as allreduce.csv lists them
        older = len(bench) - len(shown)
        left = f"; the newest {explain.PER_CONFIGURATION} runs of each configuration, {older:,} older in " \
               "allreduce.csv" if older else ""
        table = bench_rows(shown)
        heading = f"All-reduce benchmark (nccl-tests definitions: busbw = algbw·2(n−1)/n{left})"
        markdown += f"\n\n{heading}\n\n" + tabulate(
            table[["run_id", "world_size", "num_nodes", "backend", "bytes", "time_s", "algbw_GBps", "busbw_GBps",
                   "single_op_s", "wrong"]], headers="keys", tablefmt="github", showindex=False, floatfmt=".4g")
    files["report.md"] = cells.blocks(markdown.rstrip()) + "\n"  # a note under a table is no row of it
    files["summary.json"] = json.dumps(summary(scaling, bench, len(runs), output_dir), indent=2,
                                       allow_nan=False) + "\n"
    written = []
    for name, text in files.items():
        path = os.path.join(folder, name)
        try:
            written.append(results.atomic_write_text(path, text))
        except OSError as exc:
            raise UsageError(f"--export: cannot write {path} ({exc.strerror}); written so far: "
                             f"{', '.join(written) or 'nothing'}") from None
    return written
