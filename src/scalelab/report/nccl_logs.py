"""The nccl-tests logs the report read, printed as all_reduce_perf prints them: one table per log.

Why: a log that only fed the predicted columns was nowhere in the terminal report, so a reader could not see
which log was used, over how many ranks, or what busbw it quotes.
"""

import pandas as pd
from tabulate import tabulate

from scalelab.bench.nccl_format import TYPE_NAMES, float_str
from scalelab.perfmodel.network import PLATEAU_SIZES, human_bytes

HEADERS = ["size (B)", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)"]


def render(bench: pd.DataFrame, fmt: str = "simple") -> list:
    """Lines for each log in the benchmark frame (none: no lines), by file name."""
    if bench.empty or "log" not in bench:
        return []
    out = []
    logs = bench[bench["log"].notna()].sort_values(["log", "dtype"])
    for _, b in logs.iterrows():
        out += ["", title(b), table(b["rows"], fmt), *busbw_lines(b)]
    return out


def title(b: pd.Series) -> str:
    """The log's file, ranks, hardware and the column the figures come from."""
    nccl = f", NCCL {b['source']['nccl']}" if b["source"].get("nccl") else ""
    nodes = b["num_nodes"]
    return (f"nccl-tests log {b['log']}: {b['world_size']} ranks on {nodes} node{'s' if nodes > 1 else ''}, "
            f"{b['device']}{nccl}; {b['source'].get('column', 'in-place')} columns")


def table(rows: list, fmt: str) -> str:
    """size, count, type, time, algbw, busbw: nccl-tests' columns and precision (getFloatStr)."""
    body = [[r["bytes"], r["count"], TYPE_NAMES.get(r["dtype"], r["dtype"]), _num(r["time_s"] * 1e6, 7),
             _num(r["algbw_GBps"]), _num(r["busbw_GBps"])] for r in sorted(rows, key=lambda r: r["bytes"])]
    return tabulate(body, headers=HEADERS, tablefmt=fmt, stralign="right", disable_numparse=True)


def busbw_lines(b: pd.Series) -> list:
    """The busbw the report quotes for the log (the plateau) and its peak; then nccl-tests' own average, named."""
    peak = max(b["rows"], key=lambda r: r["busbw_GBps"])
    out = [f"  busbw quoted: {_num(b['busbw_GBps'])} GB/s, the plateau (median of the {PLATEAU_SIZES} largest "
           f"sizes); peak {_num(peak['busbw_GBps'])} GB/s at {human_bytes(peak['bytes'])}"]
    avg = b["summary"].get("nccl_tests_avg_busbw_GBps")
    if avg is not None:
        out.append(f"  Avg bus bandwidth {avg:g} GB/s: the log's own, over every size and both columns")
    return out


def _num(value: float, width: int = 6) -> str:
    return float_str(value, width).strip()
