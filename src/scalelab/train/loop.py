"""The training loop scalelab times. Every line a step runs is in `train` below: read it top to bottom.

Lightning Fabric did the rest before the loop starts (train/run.py): it read the ranks' places (local ranks
started by rank 0, or srun's, or torchrun's), formed the process group, wrapped the model in
DistributedDataParallel and set the precision. A step:

    fetch this rank's batch → forward under the run's precision → backward of the loss divided by the ranks,
    during which DDP all-reduces (sums) the gradients → optimizer step → a mark on the step clock

The same code runs at every world size: the step enters the precision's context (autocast for *-mixed) itself
(`in_precision`), at 1 device as at N, and the last warm-up step is observed (train/observe.py), so each result says
what its step ran and the report can hold a baseline against its N-device runs. Nothing else runs between two marks:
no framework hook (the clock's backward mark is a timestamp queued from a hook on the loss, at every world size
alike), no collective, no host-device sync of scalelab's, so a multi-device run pays what the 1-device
baseline pays plus DDP's gradient all-reduce. (DDP's own runtime statistics sync CUDA events at the start of
forward in its first synchronised steps: the GPU warm-up covers them, config.for_accelerator and docs/08. A
compute-only probe step, every 5th after warm-up, also all-reduces its buckets alone, after a barrier: it is timed
apart and never enters a throughput figure.) At a sync point, the one other place the ranks meet, the clock's
window is read (one device sync) and the ranks agree, with one all-reduce of three numbers, whether a signal asks
them to stop and when to meet next: after the first step, then every SYNC_EVERY steps, or fewer when steps are
long, so that a SIGTERM is acted on within about SYNC_SECONDS. That agreement is billed to the next step, as it
should be.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import torch

from scalelab.train.guard.signals import Stop
from scalelab.train.observe import StepObserver

SYNC_EVERY = 10  # optimizer steps between the ranks' agreements and the clock's reads (torchtitan logs every 10)
SYNC_SECONDS = 5.0  # at most about this long between them (SLURM's KillWait: 30 s from SIGTERM to SIGKILL)


@dataclass
class Plan:
    """How long the loop runs and what each step is: the flags, and where a requeued job resumes."""

    max_steps: Optional[int]  # optimizer steps in all; None: until max_epochs end
    max_epochs: Optional[int]  # None: until max_steps
    accumulate: int = 1  # batches per optimizer step (--accumulate_grad_batches)
    warmup_steps: int = 5  # timed like the others, left out of every figure (timing.summarize)
    probe_every: int = 5  # every Nth step after warm-up is a compute-only probe (is_probe)
    step: int = 0  # optimizer steps done: past 0 when a requeued job resumes
    epoch: int = 0
    batch: int = 0  # batches of `epoch` done before a requeue

    def done(self) -> bool:
        return self.step == self.max_steps or (self.max_epochs is not None and self.epoch >= self.max_epochs)

    def is_probe(self) -> bool:
        """Whether the step about to run is a compute-only probe: no gradient sync, no update (train/probe.py)."""
        return is_probe(self.step, self.warmup_steps, self.probe_every)


def is_probe(step: int, warmup_steps: int, every: int) -> bool:
    """Every `every`-th step after warm-up is a compute-only probe (0 = no probes)."""
    return every > 0 and step >= warmup_steps and (step - warmup_steps) % every == every - 1


def train(fabric, model, optimizer, loader, plan: Plan, clock, probe, signals, metrics=None,
          seen=None) -> Optional[Stop]:
    """Run the steps of `plan`; None when it ran to its end, else why every rank agreed to stop early. `clock`: the
    step clock (train/clock.py); `probe`: the probe steps' measurements (train/probe.py); `seen`: the StepObserver
    of the step it watches (train/observe.py; none: no step is observed)."""
    k = plan.accumulate
    # K batches' gradients add up and the ranks' are summed (comm.attach sets how many): their mean is the step's
    divide = k * clock.comm.average_over
    seen = seen or StepObserver(at=None)
    step = in_precision(fabric, model.training_step)
    update = getattr(optimizer, "optimizer", optimizer)  # the torch optimizer inside Fabric's wrapper: its hooks
    next_sync = plan.step + 1  # the first sync point: after the first step
    clock.start()
    signals.loop_started = True
    while not plan.done():
        loader.sampler.set_epoch(plan.epoch)  # a new shuffle each epoch, the same on every rank
        clock.epoch_start()
        for i, batch in itertools.islice(enumerate(loader), plan.batch, None):  # (a resumed job: skip what it did)
            batch = fabric.to_device(batch)
            ends_step = (i + 1) % k == 0 or i + 1 == len(loader)  # the K-th batch (or the epoch's last)
            probing = plan.is_probe()  # compute only: no sync, no update
            if probing and i % k == 0:
                probe.start()  # did this rank have its cores while it computed alone? (measure/cpushare.py)
            with fabric.no_backward_sync(model, enabled=probing or not ends_step), seen.watching(plan.step, update):
                loss = step(batch, i)  # forward, under the run's precision (autocast when --precision is *-mixed)
                clock.forward_end(loss)  # marks forward's end and, as backward ends, its compute's (the timeline)
                fabric.backward(loss / divide if divide > 1 else loss)  # DDP sums each bucket as backward fills it
            if ends_step:
                clock.grads_ready()  # DDP has waited for its last bucket: the gradients are the ranks' average
                if probing:
                    probe.allreduce_alone()  # what it sent, once more, every rank together, nothing else running
                else:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                plan.step += 1
            clock.batch_end(loss, ends_step, probing)  # the step's end: a mark on the device clock, read below
            if plan.step == plan.max_steps or (i + 1 == len(loader) and plan.epoch + 1 == plan.max_epochs):
                break  # the run's last step: nothing left to agree on
            if ends_step and plan.step == next_sync:
                clock.read()  # one device sync: the window's marks become seconds, its losses numbers
                if metrics:
                    metrics.flush()  # --logger's rows for the steps just read (rank 0; no sync of its own)
                every = clock.steps_within(SYNC_SECONDS, SYNC_EVERY)  # this rank's proposal; the fewest wins
                stop = signals.agree(fabric.device, fabric.world_size, plan.step, every)  # SIGTERM, requeue?
                if stop:
                    plan.batch = i + 1  # where a requeued job resumes
                    return stop
                next_sync = plan.step + signals.every
        clock.epoch_end()
        plan.epoch, plan.batch = plan.epoch + 1, 0
    return None


def in_precision(fabric, method):
    """`method` (a workload's training_step or validation_step) run as Fabric's module wrapper runs forward: inputs
    converted, under the precision's context (autocast for *-mixed), output converted. The same at every world size.

    Fabric does this itself only when DDP wraps the module: it sends the step through DDP's forward and so through
    its own. With one device its strategy leaves the module unwrapped, the step comes back bare, and a bf16-mixed
    baseline trained in fp32 while its N-device runs trained in bf16 (Lightning-AI/pytorch-lightning#16857). Under
    DDP the wrapper then applies the same again: inputs already converted, autocast inside autocast, no change."""
    precision = fabric.strategy.precision

    def call(batch, i):
        with precision.forward_context():
            return precision.convert_output(method(precision.convert_input(batch), i))

    return call


def validate(fabric, model, loader) -> dict:
    """The workload's validation_step over every rank's share of the set, summed over ranks in one all-reduce:
    {name: mean per sample}. After the timed loop: never part of a step; under the run's precision, as the step."""
    model.eval()
    totals, count = {}, 0
    step = in_precision(fabric, model.validation_step)
    with torch.no_grad():
        for i, batch in enumerate(loader):
            batch = fabric.to_device(batch)
            for name, value in step(batch, i).items():
                totals[name] = totals.get(name, 0.0) + value.double()
            count += len(batch[0])
    names = sorted(totals)
    sums = torch.stack([totals[n] for n in names] + [torch.tensor(float(count), device=fabric.device).double()])
    sums = fabric.all_reduce(sums, reduce_op="sum") if fabric.world_size > 1 else sums
    *values, n = sums.tolist()
    return {name: value / n for name, value in zip(names, values)} if n else {}
