"""Workloads: what a run trains. Each one declares itself once, in its own module, as a `WorkloadSpec`.

The flags, per-workload defaults and the fields that identify the computation (config.py), the model and its
seeded data, the analytic FLOPs per sample and how they count (the report's note beside MFU), the memory estimate
(the check before the ranks start, and the result's) and the throughput unit (the report) all come from the spec,
so a new workload is one declaration module here (plus, if its network is new, a file in `nets/`), one line in
REGISTRY, and its test. Declarations import no torch: flags are checked in a fraction of a second, before
torch and Lightning load; `build` imports the network when a run actually starts.
"""

from scalelab.workloads import gpt, mlp
from scalelab.workloads.spec import Option, Workload, WorkloadSpec

__all__ = ["REGISTRY", "Option", "Workload", "WorkloadSpec", "build", "get", "throughput_unit"]

REGISTRY = {spec.name: spec for spec in (mlp.SPEC, gpt.SPEC)}


def get(name: str) -> WorkloadSpec:
    return REGISTRY[name]


def build(cfg, batch_per_device: int, world_size: int) -> Workload:
    """The module and loaders for cfg (a RunConfig) at this per-device batch and world size."""
    return REGISTRY[cfg.model].build(cfg, batch_per_device, world_size)


def throughput_unit(tokens_per_sample) -> str:
    """The unit a workload's throughput is read in: tokens/s where a sample has tokens, else samples/s.

    The one rule for every table, plot and export (they read tokens_per_sample from the result)."""
    return "tokens/s" if tokens_per_sample else "samples/s"
