"""The compute-only probe step's two measurements besides the clock's marks (train/comm.py says why probes exist).

Around the probe's compute: did this rank have its cores, from the kernel's scheduler figures of its threads
(measure/cpushare.py, two reads of about 1 us). After it: the step's buckets all-reduced once more, every rank
together after a barrier, with nothing else running: the communication alone. The loop says which steps are
probes (loop.Plan.is_probe); the probe step is timed apart and never enters a throughput figure.
"""

from __future__ import annotations

from scalelab.measure import cpushare
from scalelab.train import comm


class AloneProbe:
    """Per probe step: [seconds on a core, seconds ready but waiting for one] of the compute, and the seconds the
    step's buckets took to all-reduce alone (as --comm_hook sent them, in its dtype)."""

    def __init__(self, device, world_size: int, comm_timer: comm.CommTimer):
        self.device, self.world_size, self.comm = device, world_size, comm_timer
        self.scratch = comm.Scratch()  # stand-in buffers for the all-reduce alone, one bucket's worth for the run
        self.threads = cpushare.Threads()
        self.cpu = []  # per probe step: [on a core, waiting for one]
        self.alone = []  # per probe step: seconds, with nothing else running
        self._cpu_start = None

    def start(self) -> None:
        """A probe step begins: the scheduler's figures of this rank's threads."""
        self._cpu_start = self.threads.read()

    def allreduce_alone(self) -> None:
        """The probe's compute is done: the scheduler's figures again (it ran with no communication beside it), then
        all ranks all-reduce what the last communicating step put on the wire, together, with nothing else running.
        Either way the device ends drained (the all-reduce alone syncs it; a 1-device run syncs it here): the step
        after a probe starts on an idle device at every world size."""
        span = cpushare.computing(self._cpu_start, self.threads.read()) if self._cpu_start else None
        if span:
            self.cpu.append(span)
        self._cpu_start = None
        if self.world_size > 1 and self.comm.bucket_bytes:
            sent = self.comm.wire_bytes or self.comm.bucket_bytes
            self.alone.append(round(comm.allreduce_alone_s(sent, self.device, scratch=self.scratch,
                                                           dtype=self.comm.wire_dtype), 6))
        else:
            comm.sync(self.device)

    def figures(self) -> dict:
        """What the probes measured, as the rank's record names it."""
        self.threads.close()
        return {"probe_cpu_s": self.cpu, "allreduce_alone_times_s": self.alone}
