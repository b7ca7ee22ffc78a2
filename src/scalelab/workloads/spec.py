"""What a workload declares (WorkloadSpec) and what building it gives a run (Workload). Torch-free."""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple


@dataclass(frozen=True)
class Option:
    """One flag of a workload: `--name`, its default, and the rest of argparse's add_argument keywords."""
    name: str
    default: Any
    argparse: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryCheck:
    """How a workload's memory per device is estimated before its ranks start, and what to say where it does not fit.

    estimate(cfg, batch, world_size, **kw) -> perfmodel.MemoryEstimate (kw: overhead=0 for the tensors alone): the
    up-front check (train/memcheck.py) and the result's memory.estimate_bytes ask the same function.
    what(cfg, batch, per) -> the run as a refusal names it ("--preset tiny at batch 8/GPU, seq 128, precision 32").
    advice(cfg, batch, world_size, room_bytes, **kw) -> what would fit in room_bytes (kw: overhead)."""
    estimate: Callable[..., Any]
    what: Callable[[Any, int, str], str]
    advice: Callable[..., str]


@dataclass(frozen=True)
class WorkloadSpec:
    name: str  # the value of --model
    help: str  # what it is, for --model's help
    defaults: Dict[str, Any]  # common flags whose default differs per workload (batch_size, learning_rate, ...)
    options: Tuple[Option, ...]  # flags only this workload reads
    identity: Tuple[str, ...]  # option names that define the computation: they join the scaling-group key
    build: Callable[..., "Workload"]  # (cfg, batch_per_device, world_size) -> Workload; imports torch itself
    finalize: Callable[[Any], None] = lambda cfg: None  # fill defaults that depend on other flags; check combos
    gpu_precision: str = "32"  # --precision when not given and the run is on GPUs (config.for_accelerator)
    shards: str = ""  # what --strategy fsdp shards one by one ("" : nothing worth sharding, refused in one line)
    memory: Optional[MemoryCheck] = None  # None: no estimate (no check up front; the result's estimate is null)
    flops_note: str = ""  # how its FLOPs per sample count, where a comparison of MFU needs it (the report says it)
    formerly: Tuple[str, ...] = ()  # names earlier results, configs and job scripts gave it: read as this one
    # (scalelab's own workloads: upgrades.py reads them; a user's declaration with any is refused)


@dataclass
class Workload:
    """What `build` returns: the Lightning module, its seeded datasets and the figures every result records."""
    module: Any  # a LightningModule: training_step, configure_optimizers, and validation_step where val_set is
    train_set: Any  # torch Dataset; each rank reads its shard (data.train_loader)
    val_set: Optional[Any]
    n_params: int
    tokens_per_sample: int  # 0 for workloads without tokens: throughput is then read in samples/s
    describe: str
    flops_per_sample: Optional[float]  # training (forward + backward) FLOPs of one sample, analytic: see each
    # workload; None: the run counts them (train/flopcount.py)
    trainable_params: int  # parameters with gradients, what DDP all-reduces: n_params unless LoRA
    flops_from: str = "analytic"  # how flops_per_sample was obtained (the result's timing.flops_from)
