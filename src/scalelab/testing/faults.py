"""Fault injection for the tests: break a real run on purpose, on one rank, at one step.

Inert unless SCALELAB_FAULT is set (then `from_env()` returns the callbacks a run adds), and never recorded in a
result (results.ENV_NOT_RECORDED):

    SCALELAB_FAULT="raise@step=5,rank=1"   rank 1 raises RuntimeError("injected fault ...") in step 5
    SCALELAB_FAULT="exit@step=5,rank=1"    rank 1 dies with os._exit(3) in step 5 (a crashed rank)
    SCALELAB_FAULT="sleep@start=30,rank=1" rank 1 sleeps 30 s before it joins (a late joiner)
    SCALELAB_FAULT="wedge@step=5,rank=0"   rank 0 blocks for good in step 5, without an error, as a survivor of a
                                           dead NCCL peer blocks in a device sync (the run arms the stall deadline
                                           as under NCCL: train/deadline.py)

Several faults, one per rank, are separated by ';': "exit@step=3,rank=1;wedge@step=3,rank=0" is what a crashed
rank does to the others under NCCL.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping

import lightning.pytorch as pl

from scalelab.errors import UsageError
from scalelab.launch import cluster


class InjectFault(pl.Callback):
    def __init__(self, kind: str, step: int):
        self.kind, self.step = kind, step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step + 1 != self.step:
            return
        if self.kind == "raise":
            raise RuntimeError(f"injected fault (SCALELAB_FAULT, rank {trainer.global_rank}, step {self.step})")
        if self.kind == "exit":
            os._exit(3)
        if self.kind == "wedge":
            threading.Event().wait()  # waits in C with the GIL released, as torch's syncs and collectives do


def blocks_like_nccl(callbacks: list) -> bool:
    """Whether a fault of this rank blocks it the way a dead NCCL peer does (no error ever reaches Python)."""
    return any(isinstance(cb, InjectFault) and cb.kind == "wedge" for cb in callbacks)


def parse_fault(text: str) -> dict:
    """'raise@step=5,rank=1' -> {'kind': 'raise', 'step': 5, 'rank': 1}."""
    kind, _, rest = text.strip().partition("@")
    spec = {"kind": kind, "rank": 0}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            spec[key.strip()] = float(value) if key.strip() == "start" else int(value)
        except ValueError:
            spec["kind"] = None  # reported below
    if spec["kind"] not in ("raise", "exit", "sleep", "wedge") or (kind == "sleep") != ("start" in spec) or \
            (kind != "sleep" and "step" not in spec):
        raise ValueError(f"SCALELAB_FAULT={text!r}: expected raise@step=N,rank=R, exit@step=N,rank=R, "
                         "wedge@step=N,rank=R or sleep@start=S,rank=R (several: separated by ';')")
    return spec


def from_env(environ: Mapping[str, str] | None = None) -> list[pl.Callback]:
    """Callbacks for SCALELAB_FAULT; [] when it is unset. A `sleep` fault sleeps right here, before the process
    group forms, so the rank joins late."""
    environ = os.environ if environ is None else environ
    if not environ.get("SCALELAB_FAULT"):
        return []
    try:
        specs = [parse_fault(text) for text in environ["SCALELAB_FAULT"].split(";") if text.strip()]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    callbacks = []
    for spec in specs:
        if spec["rank"] != cluster.env_rank():
            continue
        if spec["kind"] == "sleep":
            time.sleep(spec["start"])
        else:
            callbacks.append(InjectFault(spec["kind"], spec["step"]))
    return callbacks
