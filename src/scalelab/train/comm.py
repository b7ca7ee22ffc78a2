"""How much of a DDP step is gradient communication, measured inside the real run.

Two measurements, because neither alone answers the question:
- A timed all-reduce hook (DDP's own bucketed all-reduce, wrapped) records when each bucket's
  all-reduce started and finished: the union of those intervals is the time the network was busy
  in a step, hidden behind backward or not.
- Compute-only probe steps: every Nth step after warm-up skips gradient sync (what DDP's
  `no_sync()` does) and skips the update (so the replicas stay identical). Time to gradients-ready
  in a normal step minus the same in a probe step is the communication the step actually waited
  for (waited_s); the rest of the busy time (allreduce_s) was hidden by overlap.
  A probe step also all-reduces buffers of DDP's bucket sizes once more, after a barrier and with
  nothing else running: the communication alone, which is what the all-reduce benchmark and the
  analytic model describe. Busy minus alone is what compute and communication cost each other
  when they share the cores (CPU) or the SMs and memory bandwidth (GPU).
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from scalelab.measure.timeline import union_length
from scalelab.perfmodel.levers import wire_bytes

NO_TIMING_ENV = "SCALELAB_NO_COMM_TIMING"  # "1": no timing hook, DDP's built-in all-reduce (hook on vs off)
# The one reduction every gradient collective of a step runs, and the all-reduce alone and the benchmark too
# (bench/collectives.py: "sum"): a plain sum. NCCL runs AVG on floats as a pre-multiplied sum, which its NVLS
# algorithms (NVSwitch H100/H200) do not take for fp32, so an AVG step would be measured on a slower algorithm than
# the benchmark and PyTorch's own DDP. The average is the loss's: divided by the ranks before backward
# (`average_over`), each rank's gradients arrive pre-divided and their sum is the mean.
REDUCE_OP = dist.ReduceOp.SUM


class CommTimer:
    """DDP comm-hook state (`attach`): (start, end) of every bucket all-reduce since the last `cut()`, and the hook it
    times (--comm_hook: PyTorch's default all-reduce, its fp16/bf16 compression or PowerSGD) with its state."""

    def __init__(self, hook: str = "none"):
        self.process_group = None  # None: the default (world) group, as DDP's default hook uses
        self.hook_name = hook
        self.hook, self.hook_state = inner_hook(hook, self.process_group)
        self.wire_bytes = []  # bytes the hook sent for each bucket of the latest step that communicated
        self.wire_sizes = []
        self.intervals = []
        self.cuda_events = []  # GPU: (start, end) events, turned into intervals once the device has caught up
        self.sizes = []  # bytes of each bucket since the last cut()
        self.bucket_bytes = []  # the bucket sizes of the latest step that communicated
        self.issued = 0  # bucket all-reduces issued in the run: progress finer than a step (failure.record_stall)
        self.wire_of = {}  # (bucket index, compressing) -> bytes on the wire: worked out once, not every step
        self.average_over = 1  # ranks the loss is divided by before backward (attach): the collectives only sum

    @property
    def wire_dtype(self):
        """The dtype --comm_hook all-reduces: fp16 and bf16 compress to theirs, DDP's own and PowerSGD (float32
        factors) send the gradients' float32."""
        return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.hook_name, torch.float32)

    def cut(self) -> tuple:
        """This batch's records, to be read once the device has caught up (`resolve`): the step clock reads a
        window of steps after one device sync instead of syncing every step."""
        raw = (self.intervals, self.cuda_events)
        if self.sizes:
            self.bucket_bytes = sorted(self.sizes, reverse=True)
            self.wire_bytes = sorted(self.wire_sizes, reverse=True)
        self.intervals, self.cuda_events, self.sizes, self.wire_sizes = [], [], [], []
        return raw

    def begin(self, cuda: bool):
        """Start one collective's span now (counted in `issued`) and return the call that ends it: a CUDA event on
        the current stream (GPU: the collective's own, where DDP's hook and FSDP issue it), else the host clock,
        appended to the records of the step it began in whenever it ends."""
        self.issued += 1
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()  # CPU only: on GPU the events are the clock
        events, intervals = self.cuda_events, self.intervals

        def end():
            if cuda:
                stop = torch.cuda.Event(enable_timing=True)
                stop.record()
                events.append((start, stop))
            else:
                intervals.append((t0, time.perf_counter()))
        return end

    @staticmethod
    def done(raw: tuple) -> bool:
        """Whether a cut step's GPU events have all completed (readable without waiting for the device)."""
        return all(query(end) for _, end in raw[1])

    @staticmethod
    def spans(raw: tuple, seconds) -> list:
        """A cut batch's collectives as (start, end) host seconds, in the order they began: the host clock's own
        intervals, a GPU's events placed by `seconds` (the step clock's DeviceClock.seconds: its own reference)."""
        intervals, cuda_events = raw
        return sorted([*intervals, *((seconds(a), seconds(b)) for a, b in cuda_events)])

    @staticmethod
    def resolve(raw: tuple) -> tuple:
        """Busy seconds (union of intervals) and bucket count of a cut batch.

        GPU intervals are read on the GPU's clock, each as (start, end) after the first bucket's start: the CPU
        runs ahead of the GPU, so a bucket's GPU duration placed at its CPU launch time would misplace it, and its
        overlap with the others would be wrong. (Any common reference gives the same union length.)"""
        intervals, cuda_events = raw
        spans = list(intervals)
        for start, end in cuda_events:  # completed events only (after a device sync, or done())
            spans.append((cuda_events[0][0].elapsed_time(start) / 1e3, cuda_events[0][0].elapsed_time(end) / 1e3))
        return union_length(spans), len(spans)


def attach(model, timer: CommTimer) -> int:
    """Time DDP's gradient all-reduce (--comm_hook's, by default DDP's own) through `timer` as its comm hook, or
    FSDP's all-gathers and reduce-scatters through its custom-collective API (`set_custom_all_gather`,
    `set_custom_reduce_scatter`: torch's own collectives, timed); the bytes of gradient a step reduces. `model` is
    what Fabric set up: the DDP module sits inside it when there are ranks, the FSDP units are in it at every size.
    SCALELAB_NO_COMM_TIMING=1 leaves the collectives untimed (benchmarks/hook_overhead.py: what the hook costs).

    Every gradient collective sums (REDUCE_OP); where the sum is scalelab's own (the default hook, FSDP's
    reduce-scatter), `timer.average_over` is the world size: the loop divides the loss by it before backward. The
    compression hooks and PowerSGD divide by the world size themselves (and sum); DDP without a hook divides as it
    copies into its buckets: theirs stays 1."""
    ddp = next((m for m in model.modules() if isinstance(m, DistributedDataParallel)), None)
    world = dist.get_world_size() if dist.is_initialized() else 1
    if ddp is not None:
        rare_runtime_stats(ddp)
    timed = os.environ.get(NO_TIMING_ENV) != "1"
    if ddp is not None and timed:
        ddp.register_comm_hook(timer, timed_allreduce_hook)
        timer.average_over = world if timer.hook is allreduce_sum_hook else 1
    if world > 1:  # one rank: FSDP runs no collective
        from torch.distributed.fsdp import FSDPModule

        units = [m for m in model.modules() if isinstance(m, FSDPModule)]
        for unit in units:  # FSDP2 would average (AVG) unless told: a plain sum, and no division of its own
            unit.set_force_sum_reduction_for_comms(True)
            unit.set_gradient_divide_factor(1.0)
            if timed:
                unit.set_custom_all_gather(TimedAllGather(timer))
                unit.set_custom_reduce_scatter(TimedReduceScatter(timer))
        if units:
            timer.average_over = world
    return grad_bytes(model)


class TimedAllGather:
    """FSDP2's all-gather as its default does it (`dist.all_gather_single` into a buffer of its own), timed into a
    CommTimer (`_timed`). Duck-typed to FSDP2's AllGather interface (`allocate`, `__call__`): the interface's
    class is not public in torch 2.13, the setter that takes it is."""

    def __init__(self, timer: CommTimer):
        self.timer = timer

    @staticmethod
    def allocate(size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        return _timed(self.timer, output_tensor, lambda: dist.all_gather_single(
            output_tensor, input_tensor, group=group, async_op=async_op))


class TimedReduceScatter(TimedAllGather):
    """FSDP2's reduce-scatter as its default does it (`dist.reduce_scatter_single`), timed likewise."""

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        return _timed(self.timer, input_tensor, lambda: dist.reduce_scatter_single(
            output=output_tensor, input=input_tensor, group=group, op=op, async_op=async_op))


def _timed(timer: CommTimer, tensor, run):
    """Run one FSDP collective with its span recorded in `timer` (CommTimer.begin), as the DDP hook's is: on the
    stream FSDP issues it on (its all-gather or reduce-scatter stream), ended as it returns (FSDP2 asks for
    synchronous collectives: async_op is False in its unshard and reduce), or in its future's callback where one
    was asked for asynchronously."""
    end = timer.begin(tensor.is_cuda)
    work = run()
    if work is None:
        end()
    else:
        work.get_future().then(lambda _: end())
    return work


def inner_hook(name: str, process_group=None) -> tuple:
    """(hook, state) of PyTorch's DDP communication hook for --comm_hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    if name == "fp16":
        return default_hooks.fp16_compress_hook, process_group
    if name == "bf16":
        return default_hooks.bf16_compress_hook, process_group
    if name.startswith("powersgd"):
        # PyTorch's recommended start: error feedback and warm start on; 2 plain all-reduces first (the least
        # it allows with them), not its default 1,000: a benchmark of 50 steps would never compress.
        state = powerSGD_hook.PowerSGDState(process_group=process_group, start_powerSGD_iter=2,
                                            matrix_approximation_rank=int(name.partition(":")[2] or 1))
        return powerSGD_hook.powerSGD_hook, state
    return allreduce_sum_hook, process_group


def rare_runtime_stats(ddp) -> None:
    """DDP collects runtime statistics in its synchronised steps 2-11 (the GPU warm-up covers them,
    config.WARMUP_STEPS) and then every `sample rate`-th, 100 by default: on a GPU each is a wait for the device at
    the start of forward, in a timed step that a 1-GPU run never pays. The rate is pushed past any run (torch's own
    setter, a prototype API: where a torch lacks it, the default stays)."""
    setter = getattr(ddp, "_set_ddp_runtime_logging_sample_rate", None)
    if setter is not None:
        setter(2**31 - 1)


def allreduce_sum_hook(process_group, bucket):
    """DDP's default all-reduce as a plain sum (REDUCE_OP) of gradients the loss already divided by the ranks
    (`attach`: CommTimer.average_over).

    Without a hook DDP divides each gradient as it copies it into the bucket (reducer.cpp: "divides while copying
    ... to save one scan over all the input parameters"); any registered hook turns that off, the copy becomes plain,
    and PyTorch's allreduce_hook then divides the bucket before its all-reduce: one more pass over every gradient per
    step, inside the timed window, paid by multi-device runs only. Dividing the loss costs one scalar operation;
    asking the collective for the average (ReduceOp.AVG) would cost none here but keeps NCCL off its NVLS
    algorithms for fp32 (REDUCE_OP)."""
    fut = dist.all_reduce(bucket.buffer(), op=REDUCE_OP, group=process_group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def timed_allreduce_hook(state: CommTimer, bucket):
    """--comm_hook's all-reduce (by default a sum of pre-divided gradients: allreduce_sum_hook), with its start and end
    recorded, and the bytes it put on the wire.

    On CPU (gloo) the future's callback runs when the all-reduce has finished. On GPU (NCCL) the
    callback can run as soon as the kernel is queued, so CUDA events on the stream time it instead
    (CommTimer.resolve).
    """
    buffer = bucket.buffer()
    state.sizes.append(buffer.numel() * buffer.element_size())
    hook_state = state.hook_state
    compressing = not hasattr(hook_state, "start_powerSGD_iter") or hook_state.iter >= hook_state.start_powerSGD_iter
    key = (bucket.index(), compressing, buffer.numel())
    if key not in state.wire_of:  # the gradients' shapes once per bucket: a list of them every step costs a step
        state.wire_of[key] = wire_bytes(state.hook_name, [tuple(g.shape) for g in bucket.gradients()],
                                        buffer.element_size(), compressing)
    state.wire_sizes.append(state.wire_of[key])
    end = state.begin(buffer.is_cuda)
    fut = state.hook(hook_state, bucket)

    def done(f):
        end()
        return f.value()  # the reduced bucket itself, as DDP expects (f.value()[0] would be its first element)

    return fut.then(done)


def query(event) -> bool:
    """event.query(), False where the device cannot answer: after a sticky CUDA error (illegal address, ECC, Xid)
    every query raises, and the failure path must still write what it has (clock.read(wait=False))."""
    try:
        return event.query()
    except RuntimeError:
        return False


def sync(device):
    """Wait for the device's queued work: a clock read without it times the launch, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def barrier(device):
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def median_allreduce_s(bufs: list, device, passes: int) -> float:
    """Median over `passes` of all-reducing `bufs` one after another, each pass started together on all ranks.

    Every rank must call it. The barrier first: waiting for a late rank is not transfer. This is how DDP
    issues a step's few buckets, so the run's "alone" figure and the benchmark's single-op time are this.
    """
    times = []
    for _ in range(passes):
        barrier(device)
        sync(device)
        t0 = time.perf_counter()
        for buf in bufs:  # one after another, as DDP's buckets go through one communicator
            dist.all_reduce(buf, op=REDUCE_OP)
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class Scratch:
    """One buffer of the largest bucket's size, kept for the run: a view of it stands in for each bucket.

    DDP's buckets are at most --bucket_cap_mb (25 MB by default), so this costs one bucket of memory for the whole
    run, instead of fresh gradient-sized buffers at every probe step (5 GB for `xl`, and a churn the caching
    allocator would keep). Zeros: sums never overflow; contents do not change the speed. Viewed in the dtype the
    wire carried (a compression hook's float16 or bfloat16), so the transfer alone moves the same bytes."""

    def __init__(self):
        self.buffer = None

    def views(self, bucket_bytes: list, device, dtype=torch.float32) -> list:
        n = -(-max(bucket_bytes) // 4)
        if self.buffer is None or self.buffer.numel() < n or self.buffer.device != device:
            self.buffer = torch.zeros(n, dtype=torch.float32, device=device)
        same = self.buffer.view(dtype)
        return [same[:b // same.element_size()] for b in bucket_bytes]


def allreduce_alone_s(bucket_bytes: list, device, passes: int = 3, scratch: Scratch | None = None,
                      dtype=torch.float32) -> float:
    """Seconds to all-reduce one step's buckets with nothing else running (every rank must call it): the bytes
    --comm_hook put on the wire, in its dtype.

    Median of `passes` (one pass: every bucket once); one pass is too noisy on shared CPU cores.
    """
    return median_allreduce_s((scratch or Scratch()).views(bucket_bytes, device, dtype), device, passes)


def grad_bytes(module) -> int:
    """Bytes DDP all-reduces per step: every parameter that receives a gradient."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
