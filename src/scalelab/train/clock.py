"""The step clock: marks on the device's own clock at the points the loop names, read a window at a time.

A step is measured from the end of the previous one (so fetching the batch, forward, backward, the gradient
all-reduce and the optimizer all count) to its own end. CUDA kernels run asynchronously: a host clock read without
a device sync times the launch, not the work. So on a GPU every mark is a CUDA event, and the marks are read once
every SYNC_EVERY steps after one device sync (loop.py calls `read`), instead of stalling the host every step; on
CPU a mark is perf_counter, and the same window is read the same way (the sync is then a no-op). The losses are
read in that window too, with one copy: a step never waits for the device. Warm-up and compute-only probe steps
are marked like the others; timing.summarize leaves them out of every throughput figure.
"""

from __future__ import annotations

import os
import resource
import time

import torch

from scalelab.launch import cluster, cores
from scalelab.measure import cpushare
from scalelab.train import comm


class DeviceClock:
    """Marks on the device's clock, read later as perf_counter seconds: floats on CPU, CUDA events on GPU.

    `anchor()` syncs and ties the GPU clock to the host's (perf_counter at a reference event); a mark is read
    as anchor + the GPU time elapsed since the reference, once its event has completed. Re-anchored at every
    read, so a float32 elapsed time never spans more than a window of steps."""

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
        """Whether a mark's work has completed; False also where the device cannot say: after a sticky CUDA error
        (an illegal address, an ECC or Xid error) every query raises, and a failing run records what it has."""
        return isinstance(mark, float) or comm.query(mark)

    def seconds(self, mark) -> float:
        return mark if isinstance(mark, float) else self.ref_s + self.ref_event.elapsed_time(mark) / 1e3


class StepClock:
    """What the loop marks, per batch: its end, when its gradients were ready, DDP's bucket all-reduces inside it,
    its loss; read into lists (one entry per batch) that `rank_record` hands to the result.

    With --accumulate_grad_batches K an optimizer step is K batches: `step_ends` says which batch ended one, and
    timing.summarize adds them up. `batches` and `steps` count what ended on the host, read or not: the stall
    deadline's progress and the failure line's "during step N"."""

    def __init__(self, device, world_size: int, process_start: float, comm_hook: str = "none"):
        self.device, self.world_size, self.process_start = device, world_size, process_start
        self.clock = DeviceClock(device)
        self.buckets = comm.BucketClock(comm_hook)  # DDP's comm hook state (attach): times every bucket
        self.scratch = comm.Scratch()  # stand-in buffers for the all-reduce alone, one bucket's worth for the run
        self.grad_bytes = None
        self.batches = self.steps = 0  # ended on the host
        self.pending = []  # batches ended, not yet read: (end, ready, buckets, loss, ended_a_step)
        self.step_times, self.ready_times, self.comm_times, self.bucket_counts, self.losses = [], [], [], [], []
        self.step_ends = []  # read batches that ended an optimizer step
        self.probe_steps = []  # optimizer steps that were compute-only probes
        self.alone = []  # per probe step: seconds to all-reduce the step's buckets with nothing else running
        self.epoch_times = []
        self.threads = cpushare.Threads()  # per probe step's compute: did the rank have its cores?
        self.probe_cpu = []  # per probe step: [seconds on a core, seconds ready but waiting for one]
        self._probe_cpu = None
        self.first_step_end = None  # wall clock
        self.loop_wall_s = None  # host seconds from the loop's start to its end, each after a device sync
        self._loop_start = None
        self._last = self._ready = self._epoch_start = None

    def attach(self, model) -> None:
        """Time DDP's gradient all-reduce (--comm_hook's, by default DDP's own) through a comm hook; count the
        bytes it reduces. `model` is what Fabric set up: the DDP module sits inside it when there are ranks.
        SCALELAB_NO_COMM_TIMING=1 leaves DDP's own all-reduce untimed (benchmarks/hook_overhead.py: what the hook
        costs a step)."""
        from torch.nn.parallel import DistributedDataParallel

        self.grad_bytes = comm.grad_bytes(model)
        ddp = next((m for m in model.modules() if isinstance(m, DistributedDataParallel)), None)
        if ddp is not None:
            comm.rare_runtime_stats(ddp)
        if ddp is not None and os.environ.get(comm.NO_TIMING_ENV) != "1":
            ddp.register_comm_hook(self.buckets, comm.timed_allreduce_hook)

    def start(self) -> None:
        if self.clock.cuda:  # the peak of training alone
            torch.cuda.reset_peak_memory_stats(self.device)
        self._last = self._loop_start = self.clock.anchor()

    def loop_end(self) -> None:
        """The loop is over: the host interval around it, after a device sync at each end. The steps are timed on
        the device's events and chained end to end; this interval is read on the host clock alone, so the
        self-check can hold one against the other (a step clock that missed work shows as a gap)."""
        if self._loop_start is not None:
            comm.sync(self.device)
            self.loop_wall_s = round(time.perf_counter() - self._loop_start, 6)

    def epoch_start(self) -> None:
        self.read()
        self._epoch_start = self._last = self.clock.anchor()

    def epoch_end(self) -> None:
        self.read()
        self.epoch_times.append(self._last - self._epoch_start)

    def grads_ready(self) -> None:
        """After backward: DDP has waited for its last bucket, the gradients are reduced (or local, in a probe)."""
        self._ready = self.clock.mark()

    def probe_start(self) -> None:
        """A probe step begins: the scheduler's figures of this rank's threads (train/cpushare.py), 1 us."""
        self._probe_cpu = self.threads.sample()

    def allreduce_alone(self) -> None:
        """A probe step: all ranks all-reduce what the last step put on the wire (its buckets as --comm_hook sent
        them, in its dtype) together, with nothing else running. First, the scheduler's figures again: the compute
        since probe_start ran with no communication beside it."""
        now = self.threads.sample()
        if now and self._probe_cpu:
            self.probe_cpu.append([round(now[0] - self._probe_cpu[0], 6), round(now[1] - self._probe_cpu[1], 6)])
        self._probe_cpu = None
        if self.world_size > 1 and self.buckets.bucket_bytes:
            sent = self.buckets.wire_bytes or self.buckets.bucket_bytes
            self.alone.append(round(comm.allreduce_alone_s(sent, self.device, scratch=self.scratch,
                                                           dtype=self.buckets.wire_dtype), 6))

    def batch_end(self, loss, ended_a_step: bool, probe: bool) -> None:
        end = self.clock.mark()
        self.pending.append((end, self._ready or end, self.buckets.cut(), loss.detach(), ended_a_step))
        self._ready = None
        self.batches += 1
        if ended_a_step:
            if probe:
                self.probe_steps.append(self.steps)
            self.steps += 1

    def read(self, wait: bool = True) -> None:
        """The pending marks as seconds: all of them after one device sync (wait), or (a failing run, whose
        device may never catch up) only the ones already complete, and then no GPU loss (reading it would wait)."""
        if self._last is None:
            return
        if wait:
            comm.sync(self.device)
        done = 0
        for end, ready, buckets, _, ended_a_step in self.pending:
            if not (self.clock.ready(end) and comm.BucketClock.done(buckets)):
                break
            end_s, ready_s = self.clock.seconds(end), self.clock.seconds(ready)
            self.step_times.append(round(end_s - self._last, 6))  # 1 us: far below run-to-run noise
            self.ready_times.append(round(ready_s - self._last, 6))
            busy, n = comm.BucketClock.resolve(buckets)
            self.comm_times.append(round(busy, 6))
            self.bucket_counts.append(n)
            if ended_a_step:
                self.step_ends.append(len(self.step_times) - 1)
            self._last = end_s
            if self.first_step_end is None:
                self.first_step_end = time.time() - (time.perf_counter() - end_s)
            done += 1
        losses = [p[3] for p in self.pending[:done]]
        if losses and (wait or not self.clock.cuda):  # one copy for the window's losses, never one per step
            self.losses += [float(f"{v:.6g}") for v in torch.stack(losses).float().tolist()]
        del self.pending[:done]
        if wait:
            self.clock.anchor(synced=True)  # the next window's events are read against a fresh reference

    def steps_within(self, seconds: float, most: int) -> int:
        """How many of the latest steps (as read) fit in `seconds`: 1 to `most`."""
        recent = sorted(self.step_times[-most:])
        if not recent or recent[len(recent) // 2] <= 0:
            return most
        return max(1, min(most, int(seconds / recent[len(recent) // 2])))

    def rank_record(self, rank: int, local_rank: int, node_rank: int) -> dict:
        """This rank's figures for the result (a failing run: the steps its device has finished; never waits)."""
        self.read(wait=False)
        self.threads.close()
        gpu = self.device.type == "cuda"
        return {
            "rank": rank,
            "local_rank": local_rank,
            "node_rank": node_rank,
            "host": cluster.hostname(),
            "device": str(self.device),
            "device_name": cluster.device_name("gpu" if gpu else "cpu", self.device),
            # the physical GPU (cuda:N names a slot, the same on every node and under any CUDA_VISIBLE_DEVICES)
            "gpu_uuid": gpu_uuid(self.device),
            "backend": process_group_backend(),  # as torch.distributed runs it, not as asked for
            "loop_wall_s": self.loop_wall_s,
            "threads": torch.get_num_threads(),
            "cpu_affinity": cores.affinity(),  # the cores this rank ran on, and on which machine (shared_cores)
            "machine": cores.machine_id(),
            "visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            # the most the caching allocator held for tensors at once (GPU only): the self-check's memory claim
            "peak_memory_bytes": _or_none(torch.cuda.max_memory_allocated, self.device) if gpu else None,
            "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # host memory, so far
            "probe_cpu_s": self.probe_cpu,
            "load_avg": _load_avg(),  # the host's 1-minute load at the end, beside its cores
            "host_cores": os.cpu_count(),
            "process_start": self.process_start,
            "first_step_end": self.first_step_end,
            "step_times_s": self.step_times,
            "grads_ready_times_s": self.ready_times,
            "allreduce_times_s": self.comm_times,
            "buckets": self.bucket_counts,
            "probe_steps": self.probe_steps,  # optimizer-step indices
            # batches that ended an optimizer step, when not every batch did (--accumulate_grad_batches)
            **({"step_ends": self.step_ends} if self.step_ends != list(range(len(self.step_times))) else {}),
            "grad_bytes": self.grad_bytes,
            "bucket_bytes": self.buckets.bucket_bytes,
            "wire_bytes": self.buckets.wire_bytes,  # what --comm_hook put on the wire for those buckets
            "allreduce_alone_times_s": self.alone,
            "epoch_times_s": self.epoch_times,
            "losses": self.losses,
        }


def gpu_uuid(device):
    """The GPU's UUID (unique per physical GPU), or None: a CPU device, or a torch that does not report it."""
    if device.type != "cuda":
        return None
    uuid = getattr(_or_none(torch.cuda.get_device_properties, device), "uuid", None)
    return str(uuid) if uuid is not None else None


def _or_none(read, device):
    """A figure the device gives, or None where it cannot (a sticky CUDA error: the failing run's record must
    still be written)."""
    try:
        return read(device)
    except RuntimeError:
        return None


def process_group_backend():
    """dist.get_backend() of the world group ("nccl", "gloo", or per device: "cpu:gloo,cuda:nccl"); None without a
    process group (one rank)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return str(dist.get_backend())


def _load_avg():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def gather(record: dict) -> list:
    """All ranks' records, ordered by rank (every rank must call this)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [record]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, record)
    return sorted(out, key=lambda r: r["rank"])
