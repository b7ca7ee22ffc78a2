"""The all-reduce benchmark's flags and their checks: what src/allreduce_bench.py accepts, the defaults that depend on
the accelerator, and the refusals made before any rank starts (the configure step; allreduce.py runs the ranks)."""

import argparse

from scalelab.bench import collectives
from scalelab.entry import DEVICES, NODES, TIMEOUT_S, OneLineParser, bounded, label, number_type
from scalelab.errors import UsageError
from scalelab.launch import cores
from scalelab.perfmodel.network import human_bytes, parse_size

PROG = "allreduce_bench.py"
DTYPES = ("float32", "bfloat16", "float16")
FORMATS = ("scalelab", "nccl-tests")
# Defaults that depend on the accelerator: (gpu, cpu). CPU sizes stay small enough for a laptop rehearsal.
DEFAULTS = {"max_bytes": ("4G", "64M"), "iters": (20, 20), "warmup_iters": (5, 5)}


size_type = number_type(parse_size, lambda v: 0 < v <= 64 * 2**30,
                        "a size in bytes like 32K, 64M or 4G (1K = 1024), at most 64G (a buffer of this size is made)")
factor_type = bounded(int, 2, 1024, "the ratio of one size to the next")


# --- flags ----------------------------------------------------------------------------------------


# pragma: no mutate start (flags and help text; `make mutation` scores the pure functions below)
def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Collective (all-reduce, all-gather, reduce-scatter) bus bandwidth "
                                             "over message sizes (nccl-tests style).")
    p.add_argument("--collective", choices=tuple(collectives.COLLECTIVES), default="all_reduce",
                   help="what to measure (default all_reduce; all_gather and reduce_scatter are FSDP/ZeRO's)")
    p.add_argument("--devices", type=DEVICES,
                   help="processes per node (one per GPU); default: from the launcher, else 1")
    p.add_argument("--num_nodes", type=NODES, help="nodes; default: from the launcher, else 1")
    p.add_argument("--accelerator", choices=("auto", "cpu", "gpu"), default="auto")
    p.add_argument("--min_bytes", type=size_type, default=parse_size("32K"),
                   help="smallest message (default 32K)")
    p.add_argument("--max_bytes", type=size_type, help="largest message (default 4G on GPU, 64M on CPU)")
    p.add_argument("--factor", type=factor_type, default=2,
                   help="each size is the previous one times this (default 2)")
    p.add_argument("--iters", type=bounded(int, 1, 10**6, "all-reduces a size"),
                   help="timed all-reduces per size (default 20)")
    p.add_argument("--warmup_iters", type=bounded(int, 0, 10**6, "all-reduces a size"),
                   help="untimed all-reduces per size first (default 5)")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--oversubscribe", action="store_true",
                   help="on CPU, run more ranks than the node has cores (each rank is one core otherwise)")
    p.add_argument("--format", choices=FORMATS, default="scalelab",
                   help="the table printed: scalelab's, or all_reduce_perf's (adds out-of-place columns; "
                        "benchmark.py reads such a log back)")
    p.add_argument("--output_dir", default="outputs")
    p.add_argument("--run_name", type=label("a run name"), default=None)
    p.add_argument("--timeout", type=TIMEOUT_S, default=120.0,
                   help="seconds a collective may wait for the other ranks before the run fails (default 120)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="after timing, all-reduce a known pattern once per size and count wrong values")
    # Test hook: the last rank adds 1 to one element it contributes, so the check must catch a wrong result.
    p.add_argument("--inject_wrong", action="store_true", help=argparse.SUPPRESS)
    return p


# pragma: no mutate end
def resolve(args, launch):
    """Fill the accelerator-dependent defaults and check the flags against each other, before any rank starts."""
    gpu = launch.accelerator == "gpu"
    for name, (on_gpu, on_cpu) in DEFAULTS.items():
        if getattr(args, name) is None:
            value = on_gpu if gpu else on_cpu
            setattr(args, name, parse_size(value) if name == "max_bytes" else value)
    if args.min_bytes > args.max_bytes:
        raise UsageError(f"--min_bytes {human_bytes(args.min_bytes)} is larger than --max_bytes "
                         f"{human_bytes(args.max_bytes)}")
    if not gpu and launch.launcher == "local":  # one device = 1 core: refuse ranks that would share cores
        cores.place(launch, oversubscribe=args.oversubscribe)  # before any rank starts
    if gpu and launch.launcher == "local":
        import torch

        if launch.devices > torch.cuda.device_count():
            raise UsageError(f"--devices {launch.devices} but this machine has {torch.cuda.device_count()} GPU(s)")
    return args
