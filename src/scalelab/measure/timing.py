"""Run-level timing figures from every rank's step clock (train/clock.py): the arithmetic, torch-free.

DDP steps end together (the all-reduce is a barrier: a slow rank makes every rank wait), so every rank spends the
same time over a run of steps. Each rank's clock cuts a step at its own point, though (its optimizer step and its
next batch are its own), so one step's time varies between ranks by that jitter. A step's time is therefore the
mean over ranks: its sum over the timed steps is the ranks' own wall time. (The max over ranks, summed, counted the
jitter as time: 7 % more than either rank spent, for the MLP at 2 devices.) Throughput counts every rank's samples.
Warm-up steps and compute-only probe steps never enter a throughput figure; the probes give the step's compute
alone (comm_summary).
"""

import statistics
from typing import Optional

from scalelab import perfmodel, record
from scalelab.measure import cpushare
from scalelab.measure.steps import optimizer_view


def summarize(per_rank: list, warmup_steps: int, samples_per_step: int, tokens_per_sample: int) -> record.Timing:
    """Run-level figures from per-rank step times (a step: an optimizer step; samples_per_step: its samples)."""
    per_rank = [optimizer_view(r) for r in per_rank]
    steps = min(len(r["step_times_s"]) for r in per_rank)
    warmup_steps = max(0, min(warmup_steps, steps - 1))  # a run shorter than its warm-up keeps its last step
    probes = set(per_rank[0].get("probe_steps") or [])
    # an epoch's last optimizer step may have fewer than K batches: not the step being measured
    short = set(per_rank[0].get("short_steps") or [])
    normal = [i for i in range(warmup_steps, steps) if i not in probes and i not in short]
    timed = [step_time(per_rank, i) for i in normal]
    train_time = sum(timed)
    samples = samples_per_step * len(timed)
    rank0 = per_rank[0]
    return record.Timing(
        warmup_steps=warmup_steps,
        steps=steps,
        timed_steps=len(timed),
        train_time_s=train_time,
        step_s=_stats(timed),
        samples_per_step=samples_per_step,
        samples_per_s=samples / train_time if train_time > 0 else None,
        tokens_per_s=samples * tokens_per_sample / train_time if tokens_per_sample and train_time > 0 else None,
        epoch_times_s=rank0["epoch_times_s"],
        first_step_s=(rank0["first_step_end"] - rank0["process_start"]) if rank0["first_step_end"] else None,
        comm=comm_summary(per_rank, normal,
                          [i for i in sorted(probes) if warmup_steps <= i < steps and i not in short]),
        had_cpu=had_cpu(per_rank),
    )


def final_loss(per_rank: list, steps: int) -> Optional[float]:
    """The training loss the run ended at: each rank's mean over its last tenth of the run's optimizer steps
    (`steps`, summarize's count; at least one), averaged over the ranks; None where no rank recorded a loss."""
    tail = max(1, steps // 10)
    losses = [statistics.fmean(r["losses"][-tail:]) for r in per_rank if r["losses"]]
    return statistics.fmean(losses) if losses else None


def had_cpu(per_rank: list) -> Optional[list]:
    """Per rank, the share of its ready-to-run time it had a core while computing alone (the probe steps, all
    after warm-up: measure/cpushare.py); None where no probe step recorded it."""
    shares = [cpushare.had_cpu(r.get("probe_cpu_s")) for r in per_rank]
    shares = [None if s is None else round(s, 3) for s in shares]
    return shares if any(s is not None for s in shares) else None


def step_time(per_rank: list, i: int) -> float:
    """Step i's time: the mean over ranks of their clocks' cut of it (see the module's docstring)."""
    return statistics.fmean(r["step_times_s"][i] for r in per_rank)


def comm_summary(per_rank: list, normal: list, probes: list) -> Optional[record.Comm]:
    """Compute vs communication of a step, from the probe steps and the timed all-reduce hook.

    compute_s = time to gradients-ready in a probe step (no sync), slowest rank;
    waited_s = what the step waited for the network: gradients-ready minus the end of backward's compute, both
    the last rank's, in the same normal step (waited_after_backward; older results: minus compute_s);
    slowed_s = how much later backward's compute ended than in the probes: the all-reduce's cost to compute;
    allreduce_s = how long the all-reduce ran (per step, the rank that waited least: the others' extra
    wait is skew, not transfer); hidden_s = allreduce_s - waited_s, the part overlapped with backward
    (hidden_fraction of allreduce_s); allreduce_alone_s = the same buckets all-reduced with nothing else
    running (probe steps, after a barrier). The names are the report's and the CSVs' column names; a rank's
    per-step lists they are the medians of are plural (`allreduce_times_s`, `grads_ready_times_s`).
    """
    if not normal or "grads_ready_times_s" not in per_rank[0]:
        return None
    if not probes:  # a run that took none (FSDP; --comm_probe_every 0): its timed collectives alone
        return None if any(r.get("probe_steps") for r in per_rank) else busy_only(per_rank, normal)

    def ready(i):
        return max(r["grads_ready_times_s"][i] for r in per_rank)

    compute = statistics.median(ready(i) for i in probes)
    synced = statistics.median(ready(i) for i in normal)
    step = statistics.median(step_time(per_rank, i) for i in normal)
    allreduce = statistics.median(min(r["allreduce_times_s"][i] for r in per_rank) for i in normal)
    alone_runs = [r.get("allreduce_alone_times_s") or [] for r in per_rank]
    n_alone = min(len(a) for a in alone_runs)
    alone = statistics.median(min(a[k] for a in alone_runs) for k in range(n_alone)) if n_alone else None
    world = len(per_rank)
    # One process has nothing to communicate: a probe/normal difference there is noise, not network.
    in_step = waited_after_backward(per_rank, normal) if world > 1 else 0.0
    waited = in_step
    if in_step is None:  # a result from before the backward mark: the probes' compute stands in for it
        waited = max(0.0, synced - compute)
    slowed = backward_slowed(per_rank, normal, probes) if world > 1 else None
    grad_bytes = per_rank[0].get("grad_bytes")
    moved = sum(per_rank[0].get("wire_bytes") or []) or grad_bytes  # --comm_hook: the bytes it sent
    measurable = world > 1 and allreduce > 0 and moved
    busbw = perfmodel.busbw_from_time(moved, allreduce, world) if measurable else None
    return record.Comm(
        probe_steps=len(probes),
        compute_s=compute,
        synced_s=synced,  # gradients-ready in a normal step: below compute_s only by noise
        waited_in_step=int(in_step is not None),  # 1: waited_s read in the step itself, not against the probes
        waited_s=waited,
        slowed_s=slowed,
        allreduce_s=allreduce,
        allreduce_alone_s=alone,
        hidden_s=max(0.0, allreduce - waited),
        hidden_fraction=min(1.0, max(0.0, allreduce - waited) / allreduce) if allreduce > 0 else None,
        # step: the run's step_s.median, as summarize's; the waits' median over another step than the steps' median
        # may pass it under a loaded machine (1.016 seen: a share check then failed the whole run), a share cannot
        comm_share=min(1.0, waited / step) if step > 0 else None,
        grad_bytes=grad_bytes,
        bucket_bytes=per_rank[0].get("bucket_bytes") or None,
        wire_bytes=per_rank[0].get("wire_bytes") or None,  # fewer than bucket_bytes with --comm_hook
        buckets=statistics.median(r["buckets"][i] for r in per_rank for i in normal),
        ddp_busbw_GBps=busbw,
    )


def waited_after_backward(per_rank: list, normal: list) -> Optional[float]:
    """What a step waited for the network, measured in the step itself: from the last rank's end of backward compute
    (the clock's backward mark) to gradients-ready (the last rank's), median over the normal steps. The probes'
    compute, from other steps, stands in for the first only in older results: their step-to-step scatter is as large
    as a small wait (a 10 ms exposed all-reduce read as 0 ms waited, 100 % hidden, at 2 CPU ranks)."""
    if not all(r.get("backward_times_s") for r in per_rank):
        return None
    return statistics.median(max(0.0, max(r["grads_ready_times_s"][i] for r in per_rank)
                                 - max(r["backward_times_s"][i] for r in per_rank)) for i in normal)


def backward_slowed(per_rank: list, normal: list, probes: list) -> Optional[float]:
    """How much later backward's compute ended in a normal step than in a probe step (no collective beside it), the
    last rank's each, medians: what running beside the all-reduces cost the compute (they share a CPU node's cores,
    a GPU's SMs and memory bandwidth). waited_s, read after backward's end, leaves it out; it is a cost of
    communication all the same. None without the backward mark; 0 where the probes were the slower."""
    if not probes or not all(r.get("backward_times_s") for r in per_rank):
        return None

    def ended(i):
        return max(r["backward_times_s"][i] for r in per_rank)

    return max(0.0, statistics.median(ended(i) for i in normal) - statistics.median(ended(i) for i in probes))


def busy_only(per_rank: list, normal: list) -> Optional[record.Comm]:
    """Without probe steps (FSDP takes none; --comm_probe_every 0), what the timed collectives say alone:
    collectives_s, how long a step's collectives (DDP's all-reduces, FSDP's all-gathers and reduce-scatters) were
    busy, as they ran beside compute (per step the rank that waited least, as allreduce_s); collective_calls, how
    many a step issued. No compute, wait or hidden share: nothing isolates the compute. None where none was timed
    (one device; SCALELAB_NO_COMM_TIMING)."""
    busy = statistics.median(min(r["allreduce_times_s"][i] for r in per_rank) for i in normal)
    if len(per_rank) < 2 or busy <= 0:
        return None
    calls = statistics.median(r["buckets"][i] for r in per_rank for i in normal)
    # DDP's buckets (FSDP records none): what the report prices and the forecast calibrates with
    buckets = per_rank[0].get("bucket_bytes") or None
    return record.Comm(collectives_s=busy, grad_bytes=per_rank[0].get("grad_bytes"), collective_calls=calls,
                       bucket_bytes=buckets, wire_bytes=per_rank[0].get("wire_bytes") or None,  # --comm_hook's: DDP's
                       buckets=calls if buckets else None)


def _stats(values):
    if not values:
        return None
    # "inclusive" interpolates between measured steps (numpy's default); the default "exclusive" extrapolates past
    # the slowest step for few steps (p90 of 1 s and 2 s would be 2.7 s)
    q = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else [values[0]] * 9
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "min": min(values), "max": max(values), "p90": q[8]}

