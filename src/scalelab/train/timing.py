"""Time every training step honestly, on every rank, and gather the figures on rank 0.

A step is measured from the end of the previous one (so data loading, forward, backward,
gradient all-reduce and the optimizer all count), on the device's own clock: CUDA kernels run
asynchronously, and a host clock read without a device sync times the launch, not the work. On a GPU
every step boundary is a CUDA event and the timer syncs once every SYNC_EVERY steps to read them
(DeviceClock), instead of stalling the host every step: a sync per step is itself a cost that a small
model's GPU step would mostly measure. On CPU the clock is perf_counter, read at once.
Validation and the first `warmup_steps` steps never enter a timing figure. Compute-only probe
steps (see comm.py) are timed apart and never enter a throughput figure either.
"""

import os
import statistics
import time
from typing import Optional

import lightning.pytorch as pl
import torch

from scalelab import perfmodel
from scalelab.launch import cluster, cores
from scalelab.results import CommRecord
from scalelab.train import comm
from scalelab.train.steps import optimizer_view

SYNC_EVERY = 10  # GPU: steps between the device syncs that read the step events (torchtitan logs every 10)


class DeviceClock:
    """Marks on the device's clock, read later as perf_counter seconds: floats on CPU, CUDA events on GPU.

    `anchor()` syncs and ties the GPU clock to the host's (perf_counter at a reference event); a mark is read
    as anchor + the GPU time elapsed since the reference, once its event has completed. Re-anchored at every
    sync, so a float32 elapsed time never spans more than a window of steps."""

    def __init__(self, device):
        self.device, self.cuda = device, device.type == "cuda"
        self.ref_event, self.ref_s = None, None

    def anchor(self, synced: bool = False) -> float:
        if not synced:
            comm.sync(self.device)
        self.ref_s = time.perf_counter()
        if self.cuda:
            self.ref_event = torch.cuda.Event(enable_timing=True)
            self.ref_event.record()
        return self.ref_s

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def ready(mark) -> bool:
        return isinstance(mark, float) or mark.query()

    def seconds(self, mark) -> float:
        return mark if isinstance(mark, float) else self.ref_s + self.ref_event.elapsed_time(mark) / 1e3


class PinCores(pl.Callback):
    """Pins the rank's compute to its device's cores once the process group (and its transport threads) exist;
    gives the cores back at teardown (a run started in-process, from a notebook or a test, leaves it unpinned)."""

    def __init__(self, device: cores.Placement):
        self.device, self.before = device, None

    def setup(self, trainer, pl_module, stage):
        self.before = cores.affinity()
        cores.pin(trainer.local_rank, self.device.threads, self.device.node_cores)

    def teardown(self, trainer, pl_module, stage):
        cores.restore(self.before)


class StepTimer(pl.Callback):
    def __init__(self, warmup_steps: int, process_start: float, probe_every: int = 0, comm_hook: str = "none"):
        self.warmup_steps = warmup_steps
        self.probe_every = probe_every
        self.process_start = process_start  # wall clock (time.time) when this process started
        self.step_times = []  # seconds, every step including warm-up
        self.grads_ready = []  # seconds from step start until gradients were reduced (or local, in a probe)
        self.comm_times = []  # seconds the gradient all-reduce was busy in the step (this rank's view)
        self.buckets = []
        self.probe_steps = []  # optimizer steps that were compute-only probes
        self.optimizer_steps = 0  # ended so far (host side); with --accumulate_grad_batches K, every Kth batch
        self.step_ends = []  # the batches (as read) that ended an optimizer step
        self._probe = False
        self.loss_scale = 1  # Lightning hands on_train_batch_end the loss divided by accumulate_grad_batches
        self.clock = comm.BucketClock(comm_hook)
        self.alone = []  # per probe step: seconds to all-reduce the step's buckets with nothing else running
        self.scratch = comm.Scratch()  # their stand-in buffers, one bucket's worth for the run
        self.grad_bytes = None
        self.losses = []
        self.epoch_times = []
        self.first_step_end = None  # wall clock
        self.train_start = None
        self.per_rank = None  # filled on every rank by gather(); rank 0 writes it
        self.device_clock = None
        self.pending = []  # steps ended on the host, not yet read on the device's clock: (end, ready, buckets, loss)
        self._last = None  # perf_counter seconds of the previous step's end (read)
        self._epoch_start = None
        self._ready = None

    def on_train_start(self, trainer, pl_module):
        from torch.nn.parallel import DistributedDataParallel

        self.grad_bytes = comm.grad_bytes(pl_module)
        ddp = trainer.strategy.model
        if isinstance(ddp, DistributedDataParallel):
            # Lightning registers comm hooks on CUDA only; this one times DDP's all-reduce (or --comm_hook's).
            ddp.register_comm_hook(self.clock, comm.timed_allreduce_hook)
        if trainer.strategy.root_device.type == "cuda" and torch.cuda.is_available():  # the peak of training alone
            torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device)
        self.train_start = time.time()
        self.loss_scale = getattr(trainer, "accumulate_grad_batches", 1)
        # A run resumed mid-epoch (a requeued SLURM job from Lightning's checkpoint) gets no epoch-start hook
        # before its first step: start the clocks here too.
        self._epoch_start = self._last = self._clock(trainer).anchor()

    def _clock(self, trainer) -> DeviceClock:
        if self.device_clock is None:
            self.device_clock = DeviceClock(trainer.strategy.root_device)
        return self.device_clock

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # A probe is a whole optimizer step: all its micro-batches (Lightning's no_sync covers all but the last)
        probe = self._probe = comm.is_probe(self.optimizer_steps, self.warmup_steps, self.probe_every)
        if probe and self.probe_steps[-1:] != [self.optimizer_steps]:
            self.probe_steps.append(self.optimizer_steps)
        ddp = trainer.strategy.model
        if hasattr(ddp, "require_backward_grad_sync"):
            ddp.require_backward_grad_sync = not probe  # what DDP.no_sync() sets, for this batch only
        self.clock.mark_step_start(trainer.strategy.root_device)
        self._ready = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._ready = self.device_clock.mark()  # after backward and DDP's wait for the reduced buckets
        if self._probe:
            if self.clock.bucket_bytes and _world_size() > 1:
                self.alone.append(round(comm.allreduce_alone_s(self.clock.bucket_bytes, trainer.strategy.root_device,
                                                               scratch=self.scratch), 6))
            for group in optimizer.param_groups:  # local gradients: drop them, so no replica moves
                for p in group["params"]:
                    p.grad = None

    def on_train_epoch_start(self, trainer, pl_module):
        self.read(wait=True)
        self._epoch_start = self._last = self._clock(trainer).anchor()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        end = self.device_clock.mark()
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        step_end = self._ready is not None  # on_before_optimizer_step ran: this batch ended an optimizer step
        self.optimizer_steps += step_end
        self.pending.append((end, self._ready or end, self.clock.cut(), None if loss is None else loss.detach(),
                             step_end))
        if len(self.pending) >= (SYNC_EVERY if self.device_clock.cuda else 1):
            self.read(wait=True)

    def read(self, wait: bool):
        """Turn pending steps into figures: all of them after a device sync (wait), or (a failing run, whose
        device may never catch up) only the ones whose events have completed."""
        if self.device_clock is None:
            return
        if wait:
            comm.sync(self.device_clock.device)
        while self.pending:
            end, ready, buckets, loss, step_end = self.pending[0]
            if not (self.device_clock.ready(end) and comm.BucketClock.done(buckets)):
                break
            self.pending.pop(0)
            end_s, ready_s = self.device_clock.seconds(end), self.device_clock.seconds(ready)
            self.step_times.append(round(end_s - self._last, 6))  # 1 us: far below run-to-run noise
            self.grads_ready.append(round(ready_s - self._last, 6))
            busy, n = comm.BucketClock.resolve(buckets)
            self.comm_times.append(round(busy, 6))
            self.buckets.append(n)
            if step_end:
                self.step_ends.append(len(self.step_times) - 1)
            self._last = end_s
            if self.first_step_end is None:
                self.first_step_end = time.time() - (time.perf_counter() - end_s)
            if loss is not None and (wait or not loss.is_cuda):  # reading a GPU loss waits for the device
                self.losses.append(float(f"{float(loss) * self.loss_scale:.6g}"))
        if wait:
            self.device_clock.anchor(synced=True)  # the next window's events are read against a fresh reference

    def on_validation_end(self, trainer, pl_module):
        # Mid-epoch validation must not be billed to the next training step.
        self.read(wait=True)
        self._last = self._clock(trainer).anchor()

    def on_train_epoch_end(self, trainer, pl_module):
        self.read(wait=True)
        self.epoch_times.append(self._last - self._epoch_start)

    def on_train_end(self, trainer, pl_module):
        self.read(wait=True)
        self.per_rank = gather(self.rank_record(trainer))

    def rank_record(self, trainer) -> dict:
        self.read(wait=False)  # a failing run: the steps the device has finished (never wait: it may be blocked)
        return {
            "rank": trainer.global_rank,
            "local_rank": trainer.local_rank,
            "node_rank": trainer.node_rank,
            "host": cluster.hostname(),
            "device": str(trainer.strategy.root_device),
            "device_name": cluster.device_name(trainer.strategy.root_device.type.replace("cuda", "gpu"),
                                               trainer.strategy.root_device),
            "threads": torch.get_num_threads(),
            "cpu_affinity": cores.affinity(),  # the cores this rank ran on, and on which machine (shared_cores)
            "machine": cores.machine_id(),
            "visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            # the most the caching allocator held for tensors at once (GPU only): the self-check's memory claim
            "peak_memory_bytes": (torch.cuda.max_memory_allocated(trainer.strategy.root_device)
                                  if trainer.strategy.root_device.type == "cuda" else None),
            "process_start": self.process_start,
            "first_step_end": self.first_step_end,
            "step_times_s": self.step_times,
            "grads_ready_s": self.grads_ready,
            "allreduce_s": self.comm_times,
            "buckets": self.buckets,
            "probe_steps": self.probe_steps,  # optimizer-step indices
            # batches that ended an optimizer step, when not every batch did (--accumulate_grad_batches)
            **({"step_ends": self.step_ends} if self.step_ends != list(range(len(self.step_times))) else {}),
            "grad_bytes": self.grad_bytes,
            "bucket_bytes": self.clock.bucket_bytes,
            "wire_bytes": self.clock.wire_bytes,  # what --comm_hook put on the wire for those buckets
            "allreduce_alone_s": self.alone,
            "epoch_times_s": self.epoch_times,
            "losses": self.losses,
        }


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather(record: dict) -> list:
    """All ranks' records, ordered by rank (every rank must call this)."""
    import torch.distributed as dist

    if _world_size() == 1:
        return [record]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, record)
    return sorted(out, key=lambda r: r["rank"])


def summarize(per_rank: list, warmup_steps: int, samples_per_step: int, tokens_per_sample: int) -> dict:
    """Run-level figures from per-rank step times (a step: an optimizer step; samples_per_step: its samples).

    DDP steps end together (the all-reduce is a barrier), so the slowest rank sets the pace:
    a step's time is the max over ranks, and throughput counts every rank's samples.
    """
    per_rank = [optimizer_view(r) for r in per_rank]
    steps = min(len(r["step_times_s"]) for r in per_rank)
    warmup_steps = max(0, min(warmup_steps, steps - 1))  # a run shorter than its warm-up keeps its last step
    probes = set(per_rank[0].get("probe_steps") or [])
    # an epoch's last optimizer step may have fewer than K batches: not the step being measured
    short = set(per_rank[0].get("short_steps") or [])
    normal = [i for i in range(warmup_steps, steps) if i not in probes and i not in short]
    timed = [max(r["step_times_s"][i] for r in per_rank) for i in normal]
    train_time = sum(timed)
    samples = samples_per_step * len(timed)
    rank0 = per_rank[0]
    tail = max(1, steps // 10)
    final_losses = [statistics.fmean(r["losses"][-tail:]) for r in per_rank if r["losses"]]
    out = {
        "warmup_steps": warmup_steps,
        "steps": steps,
        "timed_steps": len(timed),
        "train_time_s": train_time,
        "step_time_s": _stats(timed),
        "samples_per_step": samples_per_step,
        "samples_per_s": samples / train_time if train_time > 0 else None,
        "tokens_per_s": samples * tokens_per_sample / train_time if tokens_per_sample and train_time > 0 else None,
        "epoch_times_s": rank0["epoch_times_s"],
        "time_to_first_step_s": (rank0["first_step_end"] - rank0["process_start"]) if rank0["first_step_end"] else None,
        "final_train_loss": statistics.fmean(final_losses) if final_losses else None,
        "comm": comm_summary(per_rank, normal,
                             [i for i in sorted(probes) if warmup_steps <= i < steps and i not in short]),
    }
    return out


def comm_summary(per_rank: list, normal: list, probes: list) -> Optional[CommRecord]:
    """Compute vs communication of a step, from the probe steps and the timed all-reduce hook.

    compute_s = time to gradients-ready in a probe step (no sync), slowest rank;
    waited_s = the same in a normal step minus compute: what the step waited for the network;
    allreduce_s = how long the all-reduce ran (per step, the rank that waited least: the others' extra
    wait is skew, not transfer); hidden_s = allreduce_s - waited_s, the part overlapped with backward
    (hidden_fraction of allreduce_s); allreduce_alone_s = the same buckets all-reduced with nothing else
    running (probe steps, after a barrier). The names are the report's and the CSVs' column names.
    """
    if not probes or not normal or "grads_ready_s" not in per_rank[0]:
        return None

    def ready(i):
        return max(r["grads_ready_s"][i] for r in per_rank)

    compute = statistics.median(ready(i) for i in probes)
    synced = statistics.median(ready(i) for i in normal)
    step = statistics.median(max(r["step_times_s"][i] for r in per_rank) for i in normal)
    allreduce = statistics.median(min(r["allreduce_s"][i] for r in per_rank) for i in normal)
    alone_runs = [r.get("allreduce_alone_s") or [] for r in per_rank]
    n_alone = min(len(a) for a in alone_runs)
    alone = statistics.median(min(a[k] for a in alone_runs) for k in range(n_alone)) if n_alone else None
    world = len(per_rank)
    # One process has nothing to communicate: a probe/normal difference there is noise, not network.
    waited = max(0.0, synced - compute) if world > 1 else 0.0
    grad_bytes = per_rank[0].get("grad_bytes")
    moved = sum(per_rank[0].get("wire_bytes") or []) or grad_bytes  # --comm_hook: the bytes it sent
    measurable = world > 1 and allreduce > 0 and moved
    busbw = perfmodel.busbw_from_time(moved, allreduce, world) if measurable else None
    return {
        "probe_steps": len(probes),
        "compute_s": compute,
        "synced_s": synced,  # gradients-ready in a normal step: below compute_s only by noise
        "waited_s": waited,
        "allreduce_s": allreduce,
        "allreduce_alone_s": alone,
        "hidden_s": max(0.0, allreduce - waited),
        "hidden_fraction": min(1.0, max(0.0, allreduce - waited) / allreduce) if allreduce > 0 else None,
        "comm_share": waited / step if step > 0 else None,
        "step_s": step,
        "grad_bytes": grad_bytes,
        "bucket_bytes": per_rank[0].get("bucket_bytes") or None,
        "wire_bytes": per_rank[0].get("wire_bytes") or None,  # fewer than bucket_bytes with --comm_hook
        "buckets": statistics.median(r["buckets"][i] for r in per_rank for i in normal),
        "ddp_busbw_GBps": busbw,
    }


def _stats(values):
    if not values:
        return None
    q = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "min": min(values), "max": max(values), "p90": q[8]}

