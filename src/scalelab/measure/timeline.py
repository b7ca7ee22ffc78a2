"""One step of a run as bars on a time axis, rank by rank: the marks the step clock took (train/clock.py), laid out.

A step, from the end of the previous one: forward (with the batch's fetch), backward's compute, the wait after it
(DDP's finalize: its last buckets' all-reduce, then the reduced gradients copied out), the optimizer; beside them,
on a track of their own, the collectives as they ran (each from its call to its end). Every edge is a mark the step
took. A rank's wait is its own; the "Where the step goes" table's waited_s is, per step, the last rank's
gradients-ready less the last rank's end of backward (timing.waited_after_backward): under skew no one rank's bar is
it. A run whose table has no wait (FSDP, no probe steps) draws none: its backward runs to gradients-ready, as the
table counts it. The step drawn never paid a read of the clock (the sync point's read and agreement, billed to the
step after it).

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
    """The run's normal timed steps whose every batch kept its collectives' spans (the first SPAN_STEPS steps), as
    measure/timing.summarize counts them (after warm-up, no probe, no epoch's short last step), less those that
    began with a read of the clock; [] for a result without sound marks (older, or not this program's)."""
    ranks = result.get("ranks") or []
    if not ranks or not all(marked(r) for r in ranks) or len({r["rank"] for r in ranks}) < len(ranks):
        return []
    per_rank = [optimizer_view(r) for r in ranks]
    steps = min(len(r["step_times_s"]) for r in per_rank)
    warmup = min((result.get("timing") or {}).get("warmup_steps") or 0, steps - 1)
    skip = {*(ranks[0].get("probe_steps") or []), *(per_rank[0].get("short_steps") or []),
            *(ranks[0].get("after_read_steps") or [])}
    kept = min(len(r["comm_spans_s"]) for r in ranks)  # at most record.MAX_SPAN_STEPS: the steps looked at below
    out = []
    for i in range(max(warmup, 0), steps):
        if batches(ranks[0], i)[-1] >= kept:
            break  # the batches only grow with the step: none after this kept its spans
        if i not in skip:
            out.append(i)
    return out


def marked(record: dict) -> bool:
    """Whether a rank's record holds the timeline's marks, one per batch, and step ends that name its batches in
    order (a result that passed the schema can still hold lists of other lengths: drawn from, it would raise)."""
    n = len(record.get("step_times_s") or [])
    lists = [record.get(k) for k in ("forward_times_s", "backward_times_s", "grads_ready_times_s")]
    spans = record.get("comm_spans_s")
    ends = record.get("step_ends")
    return (n > 0 and isinstance(record.get("rank"), int) and all(isinstance(x, list) and len(x) == n for x in lists)
            and isinstance(spans, list) and len(spans) <= n
            and (ends is None or (isinstance(ends, list) and all(isinstance(e, int) for e in ends)
                                  and all(a < b for a, b in zip([-1, *ends], ends)) and (not ends or ends[-1] < n))))


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


def step_bars(record: dict, step: int, split: bool = True) -> list:
    """One rank's bars for optimizer step `step` (its batches one after another: --accumulate_grad_batches K draws
    K forwards and backwards, the last one's wait and the optimizer once); split=False: no wait drawn apart."""
    ids = batches(record, step)
    bars, offset = [], 0.0
    for b in ids:
        forward, backward, ready, end = (offset + record[name][b] for name in (
            "forward_times_s", "backward_times_s", "grads_ready_times_s", "step_times_s"))
        bars.append(Bar("compute", "forward", offset, forward))
        if b == ids[-1]:
            backward = backward if split else ready
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
    split = splits(result)
    return {"step": step, "ranks": {r["rank"]: step_bars(r, step, split) for r in result["ranks"]}}


def splits(result: dict) -> bool:
    """Whether a run's wait is drawn apart from its backward: where its table has one, on more than one rank."""
    return len(result["ranks"]) > 1 and ((result.get("timing") or {}).get("comm") or {}).get("waited_s") is not None


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
