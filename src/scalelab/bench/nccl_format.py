"""nccl-tests' `all_reduce_perf` text output, written: the benchmark prints its rows in it as it goes.

The layout is nccl-tests' own (src/util.cu of NVIDIA/nccl-tests: writeResultHeader,
writeBenchmarkLinePreamble/Body, writeResultFooter), so the two tools' logs read side by side;
bench/nccl_tests.py reads either back.
"""

# our dtype name -> nccl-tests' type name (src/common.cu test_typenames)
TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double"}


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals, fewer where the width would overflow, then an exponent."""
    for fmt in (f"{{:{width}.2f}}", f"{{:{width}.1f}}", f"{{:{width}.0f}}"):
        text = fmt.format(value)
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"


def avg_busbw(rows: list) -> float:
    """nccl-tests' closing average: every busbw printed, out-of-place and in-place, over all sizes (common.cu
    adds busBw once per BenchTime call, and calls it twice per size). Rows without an out-of-place column
    count their in-place busbw only."""
    values = [v for r in rows for v in (r.get("oop_busbw_GBps"), r["busbw_GBps"]) if v is not None]
    return sum(values) / len(values) if values else 0.0


def _body(time_s, algbw, busbw, wrong) -> str:
    wrong_text = "   N/A" if wrong is None else f"{wrong:6g}"
    return f"  {float_str(time_s * 1e6, 7)}  {float_str(algbw, 6)}  {float_str(busbw, 6)}  {wrong_text}"


def format_log(rows: list, ranks: list, params: dict, program: str, run: tuple = None) -> str:
    """Rows (with oop_* fields where out-of-place was measured) -> the text all_reduce_perf prints: header,
    one line per row, footer (the benchmark prints them as it goes, as nccl-tests does)."""
    return "\n".join([header(ranks, params, program, run), *map(row_line, rows), footer(rows, program)])


def header(ranks: list, params: dict, program: str, run: tuple = None) -> str:
    """ranks: one dict per rank (rank, pid, host, device, bus, name) for the `# Using devices` lines; params:
    min_bytes, max_bytes, factor, warmup_iters, iters, check (the `# nThread` line). run: (run_id, accelerator,
    backend) of a scalelab run, written as a comment so that reading the log back finds the same run (and
    the report counts it once beside its result.json).
    """
    p = params
    lines = [f"# Collective test starting: {program}"]
    if run:
        lines.append("# scalelab run_id: {} accelerator: {} backend: {}".format(*run))
    lines += [f"# nThread 1 nGpus 1 minBytes {p['min_bytes']} maxBytes {p['max_bytes']} step: {p['factor']}(factor) "
              f"warmup iters: {p['warmup_iters']} iters: {p['iters']} agg iters: 1 validation: {int(p['check'])} "
              "graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r['rank']:2d} Group  0 Pid {r['pid']:6d} on {r['host']:>10} device {r['device']:2d} "
              f"[{r['bus']}] {r['name']}" for r in ranks]
    lines += ["#",
              f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       in-place"
              "          ",
              f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
              f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
              f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
              f"{'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}"]
    return "\n".join(lines)


def row_line(r: dict, redop: str = "sum") -> str:
    """One size; redop as nccl-tests prints it: "sum" for the reductions, "none" for all-gather."""
    line = f"{r['bytes']:12d}  {r['count']:12d}  {TYPE_NAMES.get(r['dtype'], r['dtype']):>8}  {redop:>6}  {-1:6d}"
    if r.get("oop_time_s") is not None:
        line += _body(r["oop_time_s"], r["oop_algbw_GBps"], r["oop_busbw_GBps"], r.get("oop_wrong"))
    else:
        line += " " * 32  # nccl-tests leaves the out-of-place columns blank where it ran in-place only
    return line + _body(r["time_s"], r["algbw_GBps"], r["busbw_GBps"], r.get("wrong"))


def footer(rows: list, program: str) -> str:
    """Out of bounds counts the tests (a size, one column) that had wrong values, as nccl-tests counts them."""
    bad = sum(bool(r.get("oop_wrong")) + bool(r.get("wrong")) for r in rows)
    return "\n".join([f"# {'Out of bounds values':<20} : {bad} {'FAILED' if bad else 'OK'}",
                      f"# {'Avg bus bandwidth':<20} : {avg_busbw(rows):g} ", "#",
                      f"# Collective test concluded: {program}"])
