"""Fault injection for the tests: break a real run on purpose, on one rank, at one step.

Inert unless SCALELAB_FAULT is set, and never recorded in a result (redaction.ENV_NOT_RECORDED). The loop never
sees it: a fault rides on the loader (it fires as the step's first batch is fetched) or on the run's teardown.

    SCALELAB_FAULT="raise@step=5,rank=1"   rank 1 raises RuntimeError("injected fault ...") in step 5
    SCALELAB_FAULT="exit@step=5,rank=1"    rank 1 dies with os._exit(3) in step 5 (a crashed rank)
    SCALELAB_FAULT="sleep@start=30,rank=1" rank 1 sleeps 30 s before it joins (a late joiner)
    SCALELAB_FAULT="wedge@step=5,rank=0"   rank 0 blocks for good in step 5, without an error, as a survivor of a
                                           dead NCCL peer blocks in a device sync (every rank then arms the stall
                                           deadline as under NCCL: train/guard/deadline.py)
    SCALELAB_FAULT="exit@teardown,rank=0"  rank 0 dies with os._exit(3) as its teardown starts (after the record)
    SCALELAB_FAULT="kill@step=5,rank=0"    rank 0 is killed by SIGKILL in step 5 (kill -9, the OOM killer)
    SCALELAB_FAULT="stop@step=5,rank=0"    rank 0 stops itself with SIGSTOP in step 5 (SIGCONT resumes it)

SCALELAB_FAULT_WEDGED=PATH: a wedged rank creates the file PATH as it blocks (a test's cue to act on it).

Several faults, one per rank, are separated by ';': "exit@step=3,rank=1;wedge@step=3,rank=0" is what a crashed
rank does to the others under NCCL.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping

from scalelab.errors import UsageError
from scalelab.launch import cluster

KINDS = ("raise", "exit", "sleep", "wedge", "kill", "stop")


class Fault:
    def __init__(self, kind: str, step: int | None = None):
        self.kind, self.step = kind, step  # step None: at teardown

    def fire(self, rank: int):
        if self.kind == "raise":
            raise RuntimeError(f"injected fault (SCALELAB_FAULT, rank {rank}, step {self.step})")
        if self.kind == "exit":
            os._exit(3)
        if self.kind in ("kill", "stop"):
            os.kill(os.getpid(), signal.SIGKILL if self.kind == "kill" else signal.SIGSTOP)
        if self.kind == "wedge":
            mark = os.environ.get("SCALELAB_FAULT_WEDGED")  # a test's signal that the rank is wedged now
            if mark:
                open(mark, "w").close()
            threading.Event().wait()  # waits in C with the GIL released, as torch's syncs and collectives do


class FaultyLoader:
    """A loader that fires its fault as the first batch of step `fault.step` is fetched (K batches a step)."""

    def __init__(self, loader, fault: Fault, accumulate: int):
        self.loader, self.fault, self.accumulate = loader, fault, accumulate
        self.fetched = 0

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):  # sampler, batch_size, ...: the loader's own
        return getattr(self.loader, name)

    def __iter__(self):
        for batch in self.loader:
            if self.fetched == (self.fault.step - 1) * self.accumulate:
                self.fault.fire(cluster.env_rank())
            self.fetched += 1
            yield batch


class Faults:
    """This rank's faults, where the run's guard lets them act (train/guard/run_guard.py): on the loader and at
    teardown. Without SCALELAB_FAULT there are none, and each method hands back what it was given or does nothing."""

    def __init__(self, faults: list[Fault]):
        self.faults = faults

    def loader(self, loader, accumulate: int):
        """The loader, with this rank's step fault riding on it (the loader itself when there is none)."""
        for fault in self.faults:
            if fault.step is not None:
                loader = FaultyLoader(loader, fault, accumulate)
        return loader

    def at_teardown(self):
        for fault in self.faults:
            if fault.step is None:
                fault.fire(cluster.env_rank())

    @property
    def blocks_like_nccl(self) -> bool:
        """Whether a fault of this rank blocks it the way a dead NCCL peer does (no error ever reaches Python)."""
        return any(f.kind == "wedge" for f in self.faults)


def wedge_anywhere(environ: Mapping[str, str] | None = None) -> bool:
    """Whether SCALELAB_FAULT blocks some rank like NCCL: then every rank arms the stall deadline, as every rank
    of an NCCL run does (the ranks waiting for the wedged one block too)."""
    environ = os.environ if environ is None else environ
    return any(text.strip().startswith("wedge@") for text in environ.get("SCALELAB_FAULT", "").split(";"))


def parse_fault(text: str) -> dict:
    """'raise@step=5,rank=1' -> {'kind': 'raise', 'step': 5, 'rank': 1}; 'exit@teardown' -> step None."""
    kind, _, rest = text.strip().partition("@")
    spec = {"kind": kind, "rank": 0}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        key = key.strip()
        try:
            if key == "teardown" and not value:
                spec["teardown"] = True
            else:
                spec[key] = float(value) if key == "start" else int(value)
        except ValueError:
            spec["kind"] = None  # reported below
    wants = {"sleep": "start"}.get(kind, "step")
    if spec["kind"] not in KINDS or wants not in spec and not (kind == "exit" and spec.get("teardown")):
        raise ValueError(f"SCALELAB_FAULT={text!r}: expected raise@step=N,rank=R, exit@step=N,rank=R, "
                         "wedge@step=N,rank=R, exit@teardown,rank=R or sleep@start=S,rank=R (several: separated "
                         "by ';')")
    return spec


def from_env(environ: Mapping[str, str] | None = None) -> Faults:
    """This rank's faults for SCALELAB_FAULT; none when it is unset. A `sleep` fault sleeps right here, before the
    process group forms, so the rank joins late."""
    environ = os.environ if environ is None else environ
    if not environ.get("SCALELAB_FAULT"):
        return Faults([])
    try:
        specs = [parse_fault(text) for text in environ["SCALELAB_FAULT"].split(";") if text.strip()]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    faults = []
    for spec in specs:
        if spec["rank"] != cluster.env_rank():
            continue
        if spec["kind"] == "sleep":
            time.sleep(spec["start"])
        else:
            faults.append(Fault(spec["kind"], spec.get("step")))
    return Faults(faults)
