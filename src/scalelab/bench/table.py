"""scalelab's own all-reduce table (nccl_tests.py writes all_reduce_perf's): one row per size, the same columns
for every run, sizes as people read them."""

from scalelab.perfmodel.network import LARGE_MSG_BYTES, bench_summary, human_bytes


def table(rows: list) -> str:
    from tabulate import tabulate

    body = [[human_bytes(r["bytes"]), r["count"], r["dtype"], f"{r['time_s'] * 1e6:.1f}",
             f"{r['algbw_GBps']:.3f}", f"{r['busbw_GBps']:.3f}", f"{r['single_op_s'] * 1e6:.1f}",
             "n/a" if r["wrong"] is None else r["wrong"]] for r in rows]
    return tabulate(body, headers=["size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                                   "1 op (us)", "#wrong"], stralign="right", disable_numparse=True)


def avg_line(rows: list) -> str:
    """The average busbw, over the sizes where bandwidth (not latency) dominates when there are any."""
    avg = bench_summary(rows)["avg_busbw_GBps"]
    which = "sizes >= 1 MiB" if any(r["bytes"] >= LARGE_MSG_BYTES for r in rows) else "all sizes"
    return f"Avg bus bandwidth: {avg:.3f} GB/s ({which})"
