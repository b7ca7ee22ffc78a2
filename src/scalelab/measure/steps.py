"""A rank record's per-batch lists as per-optimizer-step lists.

Torch-free: the step clock's summary (measure/timing.py) uses it and the report's per-rank view (report/ranks.py)
reads the same steps, so both count a step alike.
"""


MARKS = ("forward_times_s", "backward_times_s")  # per batch, from its start: placed in the step as gradients-ready is


def optimizer_view(record: dict) -> dict:
    """A rank's per-batch lists as per-optimizer-step lists (the same record when every batch was a step).

    With --accumulate_grad_batches K an optimizer step is K batches, and only the last one all-reduces: its
    time is their sum, its gradients are ready after the first K-1 batches plus the last one's backward and
    all-reduce. Batches after the last completed step (a failed run) are left out."""
    ends = record.get("step_ends")
    if ends is None:
        return record
    starts = [0] + [end + 1 for end in ends[:-1]]
    spans = list(zip(starts, ends))
    times, ready = record["step_times_s"], record["grads_ready_times_s"]
    full = max((b - a + 1 for a, b in spans), default=0)
    return {**record, "short_steps": [i for i, (a, b) in enumerate(spans) if b - a + 1 < full],
            "step_times_s": [sum(times[a:b + 1]) for a, b in spans],
            "grads_ready_times_s": [sum(times[a:b]) + ready[b] for a, b in spans],
            # the step's last batch's marks, from the step's start (the timeline's own layout reads the batches); None
            # where a record has none, or not one per batch (never a per-batch list under a per-step name)
            **{name: [sum(times[a:b]) + record[name][b] for a, b in spans]
               if record.get(name) and len(record[name]) == len(times) else None for name in MARKS},
            "allreduce_times_s": [sum(record["allreduce_times_s"][a:b + 1]) for a, b in spans],
            "buckets": [sum(record["buckets"][a:b + 1]) for a, b in spans]}
