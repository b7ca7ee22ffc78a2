"""ReFrame perflogs beside `--history`: each performance variable by date, judged as a configuration's series is.

A site's nightly ReFrame run appends one line per performance variable to a perflog per test (chapter 14's
`handlers_perflog`: `|`-separated, its first line naming the columns, as ReFrame writes it when it creates the
file). `--history --perflog PATH` reads them (files, or folders of *.log) and follows each (test, variable)
through its lines: the latest value against an 80 % band from the series' own scatter since its last change, and
each lasting change with its date and size (history.judge: the rule the report's own series use). A line that is no
value of a variable is counted and said in one line per file, never guessed at.
"""

import functools
import os

import pandas as pd

from scalelab import files
from scalelab.errors import UsageError
from scalelab.numeric import finite, float_or_none
from scalelab.redaction import as_read
from scalelab.report import history
from scalelab.report.cells import narrow, three_digits

SEPARATOR = "|"  # ReFrame's default perflog format's and chapter 14's
WHEN = ("job_completion_time", "job_completion_time_unix")  # the run's date, as ReFrame names it (either)
TEST = ("display_name", "name", "short_name")  # the test's name, as the format chose it
VALUE = ("perf_var", "perf_value")


def paths_of(given) -> list:
    """The perflog files a --perflog list names: a file as given, a folder's *.log at any depth (sorted); a path
    that is neither, or a folder with no *.log (the view would print nothing), fails in one line."""
    out = []
    for path in given:
        if os.path.isdir(path):
            unlisted = []
            logs = [os.path.join(d, f) for d, _, names in files.walk(path, unlisted) for f in sorted(names)
                    if f.endswith(".log")]
            if unlisted:
                raise UsageError(f"--perflog {unlisted[0][0]}: {unlisted[0][1]}")
            if not logs:
                raise UsageError(f"--perflog {path}: no *.log in this folder (ReFrame's --perflogdir holds them)")
            out += logs
        elif os.path.isfile(path):
            out.append(path)
        else:
            raise UsageError(f"--perflog {path}: no such file or folder")
    return list({os.path.realpath(p): p for p in reversed(out)}.values())[::-1]  # a file named twice: read once


def read(paths: list, skipped: list) -> pd.DataFrame:
    """Every value line of these perflogs as a frame (where, test, var, value, unit, when); a file that is no
    perflog, or its lines that hold no dated finite value, go to `skipped` as (path, why), one entry per file.
    `where`: the file's folder's last two names (ReFrame's <system>/<partition>); where the files lie in more than
    one, each test's name is shown after its own (two systems' ScalelabReport are two series, never one)."""
    rows = []
    for path in paths:
        try:
            lines = files.read_text(path, "log").splitlines()
        except (OSError, files.Refused) as exc:
            skipped.append((path, f"not read ({exc})"))
            continue
        header = lines[0].removeprefix("\ufeff").split(SEPARATOR) if lines else []  # a BOM an editor wrote
        when = next((c for c in WHEN if c in header), None)
        if when is None or not all(c in header for c in VALUE):
            skipped.append((path, "not a ReFrame perflog: its first line names no job_completion_time, perf_var "
                                  "and perf_value columns (`|`-separated)"))
            continue
        test = next((c for c in TEST if c in header), None)
        bad, in_ms, where = 0, 0, as_read("/".join(os.path.dirname(os.path.abspath(path)).split(os.sep)[-2:]))
        unix = when.endswith("_unix")
        for line in lines[1:]:
            parts = line.split(SEPARATOR)
            cells = dict(zip(header, parts))
            value = float_or_none(cells.get("perf_value"))
            value = value if finite(value) else None
            date = _date(cells.get(when), unix=unix)
            usable = len(parts) == len(header) and value is not None and bool(cells["perf_var"])  # its date aside
            if not usable or date is None:
                bad += bool(line.strip())
                in_ms += usable and unix and _in_ms(cells.get(when))  # its one fault: a date in milliseconds
                continue
            name = cells.get(test, "") if test else os.path.basename(path).removesuffix(".log")
            # what a line names is shown as any file's text is: secrets redacted, escapes inert
            rows.append({"where": where, "test": as_read(name), "var": as_read(cells["perf_var"]), "value": value,
                         "unit": as_read(cells.get("perf_unit", "")), "when": date})
        if bad:
            skipped.append((path, f"{bad} line(s) with no date, variable or finite value, left out" + (
                f" ({in_ms} of them dated in milliseconds since 1970, not ReFrame's seconds)" if in_ms else "")))
    frame = pd.DataFrame(rows, columns=["where", "test", "var", "value", "unit", "when"])
    if frame["where"].nunique() > 1:  # two systems' or partitions' tests of one name are two series
        frame["test"] = frame["where"] + ": " + frame["test"]
    return frame


def _date(text, unix: bool):
    """A line's date (UTC), or None where it holds none a site's nightly run could have written (1970-9999)."""
    if not text:
        return None
    when = pd.to_datetime(float_or_none(text) if unix else text, utc=True, errors="coerce", unit="s" if unix else None,
                          format=None if unix else "ISO8601")
    return None if when is None or pd.isna(when) or not 1970 <= when.year <= 9999 else when


def _in_ms(text) -> bool:
    """Whether a job_completion_time_unix is a date of this century in milliseconds (a format of a site's own; from
    MS_FROM on, no date in seconds): said, never read as one (a stamp past 9999 may as well be a wrong column)."""
    stamp = float_or_none(text)
    return finite(stamp) and stamp >= MS_FROM and _date(repr(stamp / 1000), unix=True) is not None


MS_FROM = 1e12  # 2001-09-09 in milliseconds, the year 33658 in seconds: a smaller stamp past 9999 in seconds (from
# 253402300800) would be a 1978-2001 date in ms, no nightly run's either way


def follow(frame: pd.DataFrame) -> list:
    """One dict per (test, variable): its values by date judged by history.judge (latest, band, changes)."""
    out = []
    for (test, var), g in frame.sort_values("when", kind="stable").groupby(["test", "var"], sort=True):
        judged = history.judge(g["value"].to_numpy(dtype=float), g["when"])
        out.append({"test": test, "var": var, "unit": g["unit"].iloc[-1], "runs": len(g),
                    "first": g["when"].iloc[0], "last": g["when"].iloc[-1], **judged})
    return out


# --export's perflog.csv (a variable a row, judged) and perflog_changes.csv (a change a row), as history's CSVs
COLUMNS = ["test", "var", *history.JUDGED]
CHANGE_COLUMNS = ["test", "var", *history.CHANGED, "unit"]


def exported(rows: list) -> tuple:
    """(variables, changes): follow's rows as the frames --export writes (COLUMNS, CHANGE_COLUMNS)."""
    variables = [[r["test"], r["var"], *history.judged_cells(r)] for r in rows]
    changed = [[r["test"], r["var"], *history.change_cells(when, c), r["unit"]]
               for r in rows for when, c in r["changes"]]
    return pd.DataFrame(variables, columns=COLUMNS), pd.DataFrame(changed, columns=CHANGE_COLUMNS)


def render(rows: list, skipped: list, fmt: str = "simple") -> list:
    """The perflog table and each variable's changes, then one line per file or part of it not read."""
    lines = []
    if rows:
        table = [[r["test"], r["var"], r["runs"], r["first"].strftime("%Y-%m-%d"), r["last"].strftime("%Y-%m-%d"),
                  cell(r["latest"], r["unit"]), "too few runs" if r["band"] is None else
                  f"{cell(r['band'][0], '')}–{cell(r['band'][1], '')}", history.inside(r),
                  len(r["changes"])] for r in rows]
        lines += ["ReFrame perflog (each performance variable by date, judged as the history's series are: the "
                  "latest against an 80 % band from its own scatter since its last change; a change: a lasting step)",
                  narrow(table, ["test", "variable", "runs", "from", "to", "latest", "80 % band", "inside",
                                 "changes"], fmt)]
        for r in rows:
            lines += [f"  {r['test']} {r['var']}: {when.strftime('%Y-%m-%d')}: {c.size * 100:+.0f} % "
                      f"({cell(c.before, r['unit'])} → {cell(c.after, r['unit'])})" for when, c in r["changes"]]
            if r["not_above_0"]:
                lines.append(f"  {r['test']} {r['var']}: {r['not_above_0']} value(s) of 0 or below, left out of its "
                             "changes and band")
            shown = functools.partial(cell, unit=r["unit"])  # one value in its unit, for each line
            lines += [f"  {r['test']} {r['var']}: {line}"
                      for line in history.latest_lines(r, shown) + history.left_out_lines(r, shown)]
    else:
        lines.append("ReFrame perflog: no dated value of any performance variable.")
    lines += [f"  skipped {path}: {why}" for path, why in skipped]
    return [*lines, ""]


def cell(x: float, unit: str) -> str:
    """A value in a cell: cells.three_digits, its unit beside; — alone where not finite."""
    shown = three_digits(x)
    return f"{shown} {unit}" if unit and shown != "—" else shown
