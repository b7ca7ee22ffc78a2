"""One step of a run as bars on a time axis, rank by rank: the marks the step clock took (train/clock.py), laid out.

A step, from the end of the previous one: forward (with the batch's fetch), backward's compute, the wait for the
collectives still in flight when it ended (DDP's last bucket), the optimizer; beside them, on a track of their own,
the collectives as they ran (each from its call to its end). Every edge is a mark the step took: the wait is what
the "Where the step goes" table's waited_s is the median of (measure/timing.waited_after_backward), for one rank.

Torch-free: the report draws it (report/step_plot.py) and writes it as a trace (report/trace.py).
"""

import statistics
from typing import NamedTuple, Optional

from scalelab.measure.steps import optimizer_view

# the bars of the compute track, in the order a step runs them
COMPUTE = ("forward", "backward", "waiting", "optimizer")


class Bar(NamedTuple):
    """One activity of one rank in one step: seconds from the step's start."""
    track: str  # "compute" or "comm"
    kind: str  # a COMPUTE name, or "collective" (the comm track)
    start: float
    end: float


def timed_steps(result: dict) -> list:
    """The run's normal timed steps whose every batch kept its collectives' spans (the first SPAN_BATCHES batches),
    as measure/timing.summarize counts them: after warm-up, no probe, no epoch's short last step."""
    per_rank = [optimizer_view(r) for r in result.get("ranks") or []]
    if not per_rank or not all(r.get("backward_times_s") for r in per_rank):
        return []  # a result from before the timeline's marks
    steps = min(len(r["step_times_s"]) for r in per_rank)
    warmup = min((result.get("timing") or {}).get("warmup_steps") or 0, steps - 1)
    skip = set(per_rank[0].get("probe_steps") or []) | set(per_rank[0].get("short_steps") or [])
    kept = min(len(r.get("comm_spans_s") or []) for r in result["ranks"])
    return [i for i in range(max(warmup, 0), steps) if i not in skip and batches(result["ranks"][0], i)[-1] < kept]


def representative(result: dict) -> Optional[int]:
    """The timed step whose time (the mean over ranks, as the report's step ms) is nearest the median: the one a
    timeline shows. None: the run kept no such step."""
    steps = timed_steps(result)
    if not steps:
        return None
    per_rank = [optimizer_view(r) for r in result["ranks"]]
    times = {i: statistics.fmean(r["step_times_s"][i] for r in per_rank) for i in steps}
    median = statistics.median(times.values())
    return min(steps, key=lambda i: (abs(times[i] - median), i))


def step_bars(record: dict, step: int) -> list:
    """One rank's bars for optimizer step `step` (its batches one after another: --accumulate_grad_batches K draws
    K forwards and backwards, the last one's wait and the optimizer once)."""
    ids = batches(record, step)
    bars, offset = [], 0.0
    for b in ids:
        forward, backward, ready, end = (offset + record[name][b] for name in (
            "forward_times_s", "backward_times_s", "grads_ready_times_s", "step_times_s"))
        bars.append(Bar("compute", "forward", offset, forward))
        if b == ids[-1]:
            bars.append(Bar("compute", "backward", forward, backward))
            if ready > backward:
                bars.append(Bar("compute", "waiting", backward, ready))
            bars.append(Bar("compute", "optimizer", ready, end))
        else:
            bars.append(Bar("compute", "backward", forward, end))  # accumulating: no sync, no update
        bars += [Bar("comm", "collective", offset + a, offset + z) for a, z in record["comm_spans_s"][b]]
        offset = end
    return bars


def of_run(result: dict) -> Optional[dict]:
    """The representative step of a run: {"step": index, "ranks": {rank: [Bar, ...]}}; None without one."""
    step = representative(result)
    if step is None:
        return None
    return {"step": step, "ranks": {r["rank"]: step_bars(r, step) for r in result["ranks"]}}


def totals(bars: list) -> dict:
    """Seconds per kind of bar (the collectives: the union of their spans, as the report's all-reduce ms)."""
    out = {kind: sum(b.end - b.start for b in bars if b.kind == kind) for kind in COMPUTE}
    out["collective"] = union_length((b.start, b.end) for b in bars if b.track == "comm")
    return out


def union_length(spans) -> float:
    """Total length covered by possibly overlapping (start, end) intervals: how long a step's collectives were busy
    (DDP's buckets overlap one another on a GPU; each counts once)."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(spans):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def batches(record: dict, step: int) -> list:
    """The batch indices of optimizer step `step` (one, unless --accumulate_grad_batches ran more per step)."""
    ends = record.get("step_ends")
    if ends is None:
        return [step]
    return list(range(ends[step - 1] + 1 if step else 0, ends[step] + 1))
