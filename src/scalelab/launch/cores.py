"""On CPU a device is a fixed share of cores: the same share at every scale, each rank pinned to its own.

Why: a 1-process baseline that uses every core against 2 processes of half the cores shows ≤ 50 % efficiency
whatever the network does, and 8 ranks on 2 cores "scale" only core contention. So a CPU device is
`--threads` cores (default 1), a rank runs on its own cores where the OS lets it, asking for more cores than
the node has is refused (or, with --oversubscribe, recorded and flagged), and every rank records the cores it
had, so the report can say what a device was and catch ranks that shared cores after the fact.
Torch-free: the launchers and the report import it.
"""

import os
from typing import NamedTuple, Optional

from scalelab.errors import UsageError
from scalelab.launch import slurm_env

DEFAULT_THREADS = 1  # one CPU device = one core
ENV_NODE_CORES = "SCALELAB_NODE_CORES"  # a node's cores, where a launcher says so (tests simulate a node with it)


def visible() -> list:
    """The cores this process may run on (its affinity), as the node's ranks share them."""
    if ENV_NODE_CORES in os.environ:
        try:
            return sorted({int(c) for c in os.environ[ENV_NODE_CORES].split(",")})
        except ValueError:
            pass
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def threads_per_device(requested: Optional[int], launcher: str, accelerator: str) -> Optional[int]:
    """--threads, else SLURM's --cpus-per-task for a SLURM rank, else 1 core per CPU device; None on GPU (torch's
    own default: the rank's cores feed one GPU)."""
    if requested:
        return requested
    if launcher == "slurm" and slurm_env.cpus_per_task():
        return slurm_env.cpus_per_task()
    return DEFAULT_THREADS if accelerator == "cpu" else None


class Placement(NamedTuple):
    threads: Optional[int]  # threads of one device (None on GPU: torch's default)
    warning: Optional[str]  # --oversubscribe's line, recorded in the result
    node_cores: list  # the cores this rank's node offers


def place(launch, requested: Optional[int] = None, oversubscribe: bool = False) -> Placement:
    """This rank's device: its threads, the fit check, the node's cores to pin into (pin, once the process group
    exists). Call before torch starts its thread pool. Changes nothing in the process (a benchmark rank may run
    inside a caller's process): training sets OMP_NUM_THREADS itself, for Lightning.

    Where the rank sees its node's cores (local, torchrun, emulated nodes) the fit is checked up front; a SLURM
    rank may already be bound to its own cores by srun, so there the ranks' recorded cores are compared after
    the run instead (shared_cores)."""
    threads = threads_per_device(requested, launch.launcher, launch.accelerator)
    if threads is None:
        return Placement(None, None, [])
    cores = visible()
    warning = None if launch.launcher == "slurm" else check_fit(launch.devices, threads, cores, oversubscribe)
    return Placement(threads, warning, cores)


def check_fit(local_ranks: int, threads: int, cores: list, oversubscribe: bool) -> Optional[str]:
    """None when local_ranks × threads cores exist; else UsageError, or (oversubscribe) the warning to record."""
    need = local_ranks * threads
    if need <= len(cores):
        return None
    what = (f"{local_ranks} device(s) x {threads} core(s) need {need} cores but this node has {len(cores)} "
            f"(cores {span(cores)})")
    if not oversubscribe:
        raise UsageError(f"{what}: ranks would share cores and the table would show contention, not scaling; "
                         "use fewer --devices or --threads, or --oversubscribe to run anyway (flagged in the result "
                         "and the report)")
    return f"oversubscribed: {what}"


def describe(threads: int, local_ranks: int, cores: list, launcher: str) -> str:
    """The job banner's words for a CPU device: '1 device = 2 core(s), each rank pinned' where every thread has a core
    of its own, else how many cores there are and who shares them (said at the start; the report says it again from
    the ranks' records). A SLURM rank may see only the cores srun bound it to: there its own threads are compared."""
    ranks = 1 if launcher == "slurm" else local_ranks
    if not cores or ranks * threads <= len(cores):
        return f"1 device = {threads} core(s), each rank pinned"
    here = f"{len(cores)} core(s) (cores {span(cores)})"
    if ranks == 1:
        return f"1 device = {threads} core(s), but only {here} here: its {threads} threads share them"
    return (f"1 device = {threads} core(s), but {ranks} devices need {ranks * threads} and the node has {here}: "
            "ranks share cores (oversubscribed)")


def pin(local_rank: int, threads: int, cores: list) -> list:
    """Pin the calling thread (the rank's compute, and the threads it starts later) to its slice of the node's
    cores. Where there is no such slice (srun bound the rank to fewer cores already, or the node is
    oversubscribed) it runs on all of `cores`. Returns the cores it ends up with.

    Called once the process group exists: the transport's threads (gloo's workers) were started before and keep
    the whole node, as a GPU's network and copy engines work beside its compute. Pinned with them, each rank's
    all-reduce ran on its compute's core and 2 devices on one 2-core node gave 77 % instead of 91 %."""
    mine = cores[local_rank * threads:(local_rank + 1) * threads]
    if hasattr(os, "sched_setaffinity") and cores:
        try:
            os.sched_setaffinity(0, mine if len(mine) == threads else cores)
        except OSError:  # a core outside this process's cpuset: keep the launcher's binding
            pass
    return affinity()


def affinity() -> list:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def restore(saved: list):
    """Give the calling thread back the cores `affinity()` returned before pin (a run inside a caller's process,
    a notebook or a test, must not leave it pinned)."""
    if saved and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, saved)


def machine_id() -> str:
    """Which physical machine a rank ran on (the kernel's boot id), so ranks of emulated nodes, whose host names
    differ, are still known to share one machine's cores."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()[:8]
    except OSError:
        import socket

        return socket.gethostname()


def shared_cores(ranks: list) -> Optional[str]:
    """One line naming ranks that ran more threads than they had cores, or ranks of one machine that ran on a
    common core (oversubscribed), from their records; None when every rank had cores of its own."""
    short = [r for r in ranks if r.get("cpu_affinity") and (r.get("threads") or 0) > len(r["cpu_affinity"])]
    if short:
        r = short[0]
        return (f"oversubscribed: rank {r['rank']} ran {r['threads']} threads on {len(r['cpu_affinity'])} core(s)"
                + (f" ({len(short)} ranks had fewer cores than threads)" if len(short) > 1 else ""))
    seen = {}  # (machine, core) -> first rank
    clashes = []
    for r in ranks:
        for core in r.get("cpu_affinity") or []:
            key = (r.get("machine"), core)
            if key in seen and seen[key] != r["rank"]:
                clashes.append((seen[key], r["rank"], core))
            seen.setdefault(key, r["rank"])
    if not clashes:
        return None
    a, b, core = clashes[0]
    pairs = len({(x, y) for x, y, _ in clashes})
    return (f"oversubscribed: ranks {a} and {b} shared core {core}" + (f" ({pairs} pairs of ranks shared cores)"
                                                                         if pairs > 1 else ""))


def span(cores: list) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out, start = [], None
    for i, c in enumerate(cores):
        if start is None:
            start = c
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)
