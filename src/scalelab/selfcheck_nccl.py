"""The self-check's "one all-reduce algorithm" claim (selfcheck.py shows it): on GPUs, the algorithm NCCL chose for
the step's gradient all-reduce is one it chose for the benchmark's messages of that size.

The benchmark's busbw prices the step's communication (the forecast, "running beside backward cost it X ms"): that
holds only where both ran the same NCCL algorithm. NCCL picks one per call from the message size and the reduction;
on NVSwitch nodes its NVLS algorithms take a plain fp32 sum but not a pre-multiplied one (what ReduceOp.AVG is on
floats), so a step that averaged in the collective ran Ring while the benchmark ran NVLS. With
NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS including TUNING (gpu_selfcheck.sh sets both) NCCL logs each choice:

    NCCL INFO AllReduce: 26214400 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}      (NCCL 2.19 and newer)
    NCCL INFO 26214400 Bytes -> Algo 4 proto 2 time 123.4                                      (older: numbers)

The job's log holds the benchmark's lines first, then the training runs' (each starts with its banner,
"scalelab: <workload> (<N> params) ..."): the step's are those after the last banner whose size is one of the
step's buckets. A bucket's size is rarely one the benchmark measured (powers of two): the step's choice must be the
benchmark's at one of the two sizes around it (a threshold between them may switch NCCL's choice).

Returns (claim, status, figure, note), which selfcheck.py makes its Verdict.
"""

import re
from collections import Counter

CLAIM = "one all-reduce algorithm"
ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")  # ncclAlgoStr, by NCCL_ALGO_*
CHOICE = re.compile(r"NCCL INFO (?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)")
BANNER = re.compile(r"^scalelab: \S.* \(\S+ params\)", re.M)


def algo_name(text: str) -> str:
    """NCCL's algorithm as newer NCCL names it ("NVLS", "Ring"), from a name in any case or an older number."""
    if text.isdigit():
        return ALGOS[int(text)] if int(text) < len(ALGOS) else f"algo {text}"
    return next((a for a in ALGOS if a.lower() == text.lower()), text)


def choices(lines: str) -> dict:
    """{message bytes: the algorithm NCCL chose most often for an all-reduce of that size} in a piece of log (lines
    that name no collective, from an older NCCL, are taken as all-reduces: the self-check's runs issue no other
    collective of a gradient's size)."""
    seen = {}
    for op, size, algo, _ in CHOICE.findall(lines):
        if op in ("", "AllReduce"):
            seen.setdefault(int(size), Counter())[algo_name(algo)] += 1
    return {size: counts.most_common(1)[0][0] for size, counts in seen.items()}


def split(log_text: str) -> tuple:
    """(the benchmark's part of the log, the last training run's part): before the first banner, after the last."""
    banners = list(BANNER.finditer(log_text))
    if not banners:
        return log_text, ""
    return log_text[:banners[0].start()], log_text[banners[-1].end():]


def around(size: int, measured: dict) -> list:
    """The benchmark's choices at the measured sizes just below and above `size` (one where it is beyond them)."""
    below = [s for s in measured if s <= size]
    above = [s for s in measured if s >= size]
    return [measured[s] for s in {max(below, default=None), min(above, default=None)} if s is not None]


def nccl_algorithm(log_text, run, bench) -> tuple:
    """The claim's verdict for the N-GPU training `run` against the benchmark's choices in the job's log."""
    if run["launch"].get("accelerator") != "gpu":
        return CLAIM, "SKIP", "CPU run", "gloo has no algorithm choice to log"
    if run["launch"]["world_size"] == 1:
        return CLAIM, "SKIP", "1 GPU", "no all-reduce in a 1-GPU run"
    if not log_text:
        return CLAIM, "SKIP", "no log", "give --log with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING output"
    if bench is None:
        return CLAIM, "SKIP", "no benchmark", "the claim holds the step against the benchmark's choices"
    bench_part, step_part = split(log_text)
    measured, ran = choices(bench_part), choices(step_part)
    buckets = sorted({b for r in run.get("ranks") or [] for b in (r.get("bucket_bytes") or [])})
    steps = {b: ran[b] for b in buckets if b in ran}
    if not measured or not steps:
        return (CLAIM, "SKIP", "no NCCL tuning lines" if not measured else "no tuning line of the step's buckets",
                "run with NCCL_DEBUG_SUBSYS including TUNING (gpu_selfcheck.sh sets it)")
    wrong = [f"{b / 2**20:.1f} MiB: step {algo}, benchmark {'/'.join(sorted(set(around(b, measured))))}"
             for b, algo in sorted(steps.items()) if algo not in around(b, measured)]
    if wrong:
        return (CLAIM, "FAIL", "; ".join(wrong[:3]),
                "the step's all-reduce ran another algorithm than the benchmark that prices it: another reduce op "
                "(AVG keeps NCCL off NVLS) or NCCL settings that differ between the two")
    said = ", ".join(f"{b / 2**20:.1f} MiB {algo}" for b, algo in sorted(steps.items())[-3:])
    return CLAIM, "PASS", f"step's buckets as the benchmark's sizes around them: {said}"
