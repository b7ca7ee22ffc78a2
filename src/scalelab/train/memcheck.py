"""Refuse, before the ranks start, a step the device cannot hold: its workload's estimate (WorkloadSpec.memory; the
GPT's is perfmodel.memory's: DDP's replica, or one rank's shard under --strategy fsdp) against the GPU's memory, or
on CPU (the rehearsal) against the host's, which all of a node's ranks share. A workload without an estimate is not
checked. An out-of-memory after minutes of start-up, or the kernel's OOM killer ending one
rank of eight, is said now, in one line."""

import os

from scalelab import workloads
from scalelab.errors import UsageError
from scalelab.perfmodel import memory

# A CPU rank's process beside its tensors (Python, torch, Lightning, the data): 518 MB peak RSS measured for
# `train.py --config gpt-tiny`, whose tensors the model puts at 0.1 GB (/usr/bin/time -v, this project's CPU VM).
CPU_OVERHEAD_BYTES = 0.5e9
SKIP = "SCALELAB_NO_MEMORY_CHECK"  # =1: run anyway


def check(cfg, launch, batch: int) -> None:
    """A workload that declares an estimate (the GPT; the MLP is kilobytes); once per node, by its first rank (the
    others are still starting). Under --strategy fsdp the GPT's estimate is one rank's shard of the run's world size
    plus FSDP's working set."""
    if workloads.get(cfg.model).memory is None or os.environ.get(SKIP) == "1":
        return
    if launch.accelerator == "gpu":
        check_gpu(cfg, batch, launch.world_size)
    elif os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")) == "0":
        check_host(cfg, batch, launch.world_size, launch.devices, *host_memory())


def check_gpu(cfg, batch: int, world_size: int) -> None:
    import torch  # a GPU run only, and only here: a refused flag never waits for torch to load

    model = workloads.get(cfg.model).memory
    props = torch.cuda.get_device_properties(0)
    est = model.estimate(cfg, batch, world_size)
    if not memory.fits(est, props.total_memory):
        raise UsageError(f"{model.what(cfg, batch, 'GPU')} needs {est.describe()} but {props.name} has "
                         f"{props.total_memory / 1e9:.1f} GB: "
                         f"{model.advice(cfg, batch, world_size, props.total_memory)} ({SKIP}=1 runs anyway)")


def check_host(cfg, batch: int, world_size: int, ranks_here: int, available: float, where: str) -> None:
    """ranks_here: this node's ranks (--devices on CPU), each a process holding its step (a replica's, or under
    --strategy fsdp its shard and FSDP's working set)."""
    model = workloads.get(cfg.model).memory
    est = model.estimate(cfg, batch, world_size, overhead=CPU_OVERHEAD_BYTES)
    if ranks_here * est.total <= available:
        return
    advice = model.advice(cfg, batch, world_size, available / ranks_here, overhead=CPU_OVERHEAD_BYTES)
    raise UsageError(f"{model.what(cfg, batch, 'device')}: {ranks_here} rank(s) on this node need {ranks_here} x "
                     f"{est.total / 1e9:.1f} GB of host memory "
                     f"but {where} leaves {available / 1e9:.1f} GB: {advice.replace('fits', 'would fit')}, or fewer "
                     f"--devices per node ({SKIP}=1 runs anyway)")


def host_memory(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup",
                own: str = "/proc/self/cgroup") -> tuple:
    """(bytes this node's ranks can have, where that figure comes from): the kernel's MemAvailable, or less where
    this process's cgroup (SLURM's --mem under cgroups, a container) allows less."""
    try:
        with open(meminfo) as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        available, where = int(fields["MemAvailable"].split()[0]) * 1024, "this node's MemAvailable"
    except (OSError, KeyError, ValueError):
        return float("inf"), "nothing (no /proc/meminfo)"
    limit = _cgroup_room(cgroup, own)
    if limit is not None and limit < available:
        return limit, "its cgroup's memory.max"
    return available, where


def _cgroup_room(root: str, own: str):
    """The least room (memory.max - memory.current) of this process's cgroup (v2) and its ancestors: SLURM sets
    --mem on the job's and the step's cgroups, above the task's; None where none sets a limit."""
    try:
        with open(own) as f:
            path = next((line.strip().split("::", 1)[1] for line in f if line.startswith("0::")), "/")
    except (OSError, StopIteration):
        return None
    rooms, parts = [], [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        folder = os.path.join(root, *parts[:depth])
        try:
            with open(os.path.join(folder, "memory.max")) as f:
                limit = f.read().strip()
            with open(os.path.join(folder, "memory.current")) as f:
                used = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit != "max":
            rooms.append(max(0, int(limit) - used))
    return min(rooms) if rooms else None
