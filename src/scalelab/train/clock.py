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

import time

import torch
from torch.autograd import Variable

from scalelab.train import comm

SPAN_STEPS = 60  # optimizer steps whose collectives are kept as spans: a timeline's choice of step, a bounded record


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
    """What the loop marks, per batch: its end, when its gradients were ready, the gradient all-reduces inside it
    (the comm hook's timer, comm.CommTimer), its loss; read into lists (one entry per batch) that `figures` hands
    to the rank's record (train/payload.py).

    With --accumulate_grad_batches K an optimizer step is K batches: `step_ends` says which batch ended one, and
    timing.summarize adds them up. `batches` and `steps` count what ended on the host, read or not: the stall
    deadline's progress and the failure line's "during step N"."""

    def __init__(self, device, process_start: float, comm_timer: comm.CommTimer):
        self.device, self.process_start = device, process_start
        self.marks = DeviceClock(device)
        self.comm = comm_timer  # the all-reduces of each batch, cut at its end
        self.batches = self.steps = 0  # ended on the host
        self.pending = []  # ended, not read: (end, ready, (forward, backward), all-reduces, loss, ended_a_step)
        self.step_times, self.ready_times, self.comm_times, self.bucket_counts, self.losses = [], [], [], [], []
        self.forward_times = []  # when each batch's forward ended, from its start (the timeline's first bar)
        self.backward_times = []  # when its backward's compute ended (before DDP's wait for its last bucket)
        self.comm_spans = []  # each batch's collectives as [start, end] from its start: the first SPAN_STEPS steps'
        self.after_read = []  # optimizer steps that began with a read of the clock (a sync point: billed to them)
        self.step_ends = []  # read batches that ended an optimizer step
        self.probe_steps = []  # optimizer steps that were compute-only probes
        self.epoch_times = []
        self.first_step_end = None  # wall clock
        self.loop_wall_s = None  # host seconds from the loop's start to its end, each after a device sync
        self.loop_start = None  # perf_counter at the loop's start (after a device sync): the sampled window's origin
        self._last = self._ready = self._forward = self._backward = self._epoch_start = None

    def start(self) -> None:
        if self.marks.cuda:  # the peak of training alone
            torch.cuda.reset_peak_memory_stats(self.device)
        self._last = self.loop_start = self.marks.anchor()

    def loop_end(self) -> None:
        """The loop is over: the host interval around it, after a device sync at each end. The steps are timed on
        the device's events and chained end to end; this interval is read on the host clock alone, so the
        self-check can hold one against the other (a step clock that missed work shows as a gap)."""
        if self.loop_start is not None:
            comm.sync(self.device)
            self.loop_wall_s = round(time.perf_counter() - self.loop_start, 6)

    def epoch_start(self) -> None:
        self.read()
        self._epoch_start = self._last = self.marks.anchor()

    def epoch_end(self) -> None:
        self.read()
        self.epoch_times.append(self._last - self._epoch_start)

    def forward_end(self, loss) -> None:
        """Forward is done (its loss computed): a mark, and one more when backward's own compute ends (before DDP
        waits for its last bucket): a callback the autograd engine runs once the graph is done, queued as backward
        starts, so ahead of the one DDP (or FSDP) queues to wait for its collectives. The engine's callback queue is
        what torch's own FSDP and DDP use for the same end of backward."""
        self._forward = self.marks.mark()
        if loss.requires_grad:
            loss.register_hook(self._at_backward_start)

    def _at_backward_start(self, grad):
        Variable._execution_engine.queue_callback(self._backward_done)
        return grad

    def _backward_done(self) -> None:
        self._backward = self.marks.mark()

    def grads_ready(self) -> None:
        """After backward: DDP has waited for its last bucket, the gradients are reduced (or local, in a probe)."""
        self._ready = self.marks.mark()

    def batch_end(self, loss, ended_a_step: bool, probe: bool) -> None:
        end = self.marks.mark()
        marks = (self._forward or end, self._backward or self._ready or end)
        self.pending.append((end, self._ready or end, marks, self.comm.cut(), loss.detach(), ended_a_step))
        self._ready = self._forward = self._backward = None
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
        for end, ready, (forward, backward), reduces, _, ended_a_step in self.pending:
            if not (self.marks.ready(end) and comm.CommTimer.done(reduces)):
                break
            end_s, ready_s = self.marks.seconds(end), self.marks.seconds(ready)
            self.step_times.append(round(end_s - self._last, 6))  # 1 us: far below run-to-run noise
            self.ready_times.append(round(ready_s - self._last, 6))
            self.forward_times.append(round(self.marks.seconds(forward) - self._last, 6))
            self.backward_times.append(round(self.marks.seconds(backward) - self._last, 6))
            if len(self.step_ends) < SPAN_STEPS:
                self.comm_spans.append([[round(a - self._last, 6), round(b - self._last, 6)]
                                        for a, b in comm.CommTimer.spans(reduces, self.marks.seconds)])
            busy, n = comm.CommTimer.resolve(reduces)
            self.comm_times.append(round(busy, 6))
            self.bucket_counts.append(n)
            if ended_a_step:
                self.step_ends.append(len(self.step_times) - 1)
            self._last = end_s
            if self.first_step_end is None:
                self.first_step_end = time.time() - (time.perf_counter() - end_s)
            done += 1
        losses = [p[4] for p in self.pending[:done]]
        if losses and (wait or not self.marks.cuda):  # one copy for the window's losses, never one per step
            self.losses += [float(f"{v:.6g}") for v in torch.stack(losses).float().tolist()]
        del self.pending[:done]
        if wait:
            self.marks.anchor(synced=True)  # the next window's events are read against a fresh reference
            if self.after_read[-1:] != [self.steps]:
                self.after_read.append(self.steps)  # the next step pays this read (and the ranks' agreement)

    def steps_within(self, seconds: float, most: int) -> int:
        """How many of the latest steps (as read) fit in `seconds`: 1 to `most`."""
        recent = sorted(self.step_times[-most:])
        if not recent or recent[len(recent) // 2] <= 0:
            return most
        return max(1, min(most, int(seconds / recent[len(recent) // 2])))

    def figures(self) -> dict:
        """What the clock measured, as the rank's record names it (a failing run: the steps its device has
        finished; never waits)."""
        self.read(wait=False)
        return {
            "loop_wall_s": self.loop_wall_s,
            "process_start": self.process_start,
            "first_step_end": self.first_step_end,
            "step_times_s": self.step_times,
            "grads_ready_times_s": self.ready_times,
            "forward_times_s": self.forward_times,
            "backward_times_s": self.backward_times,
            "comm_spans_s": self.comm_spans,  # the first SPAN_STEPS steps' batches' collectives (the timeline's)
            "after_read_steps": self.after_read,  # steps that paid a read of the clock: never the one drawn
            "allreduce_times_s": self.comm_times,
            "buckets": self.bucket_counts,
            "probe_steps": self.probe_steps,  # optimizer-step indices
            # batches that ended an optimizer step, when not every batch did (--accumulate_grad_batches)
            **({"step_ends": self.step_ends} if self.step_ends != list(range(len(self.step_times))) else {}),
            "epoch_times_s": self.epoch_times,
            "losses": self.losses,
        }
