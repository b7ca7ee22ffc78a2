"""On CPU a device is a fixed share of cores: the same share at every scale, each rank pinned to its own.

Why: a 1-process baseline that uses every core against 2 processes of half the cores shows ≤ 50 % efficiency
whatever the network does, and 8 ranks on 2 cores "scale" only core contention. So a CPU device is
`--threads` cores (default 1), a rank runs on its own cores where the OS lets it, asking for more cores than
the node has is refused (or, with --oversubscribe, recorded and flagged), and every rank records the cores it
had, so the report can say what a device was and catch ranks that shared cores after the fact.
A GPU rank that no launcher bound gets cores of its own near its GPU instead (pin_gpu).
Torch-free: the launchers and the report import it.
"""

import os
from typing import NamedTuple, Optional

from scalelab.errors import UsageError
from scalelab.launch import slurm_env
from scalelab.measure.cpushare import span

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


ENV_NO_GPU_PIN = "SCALELAB_NO_GPU_PIN"  # "1": leave a GPU rank on the cores its launcher gave it
SYSFS = "/sys"


def parse_cpulist(text: str) -> list:
    """A sysfs CPU list, "0-3,8,10-11", as sorted CPU numbers (an empty file: none)."""
    out = set()
    for part in text.strip().split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-")
            out.update(range(int(lo), int(hi) + 1))
        elif part:
            out.add(int(part))
    return sorted(out)


def pci_name(domain: int, bus: int, device: int) -> str:
    """A GPU's PCI address as sysfs names it, from torch's device properties: (0, 0x3b, 0) -> "0000:3b:00.0"."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def gpu_numa_node(address: Optional[str], sysfs: str = SYSFS) -> Optional[int]:
    """The NUMA node a PCI device hangs off, or None where the kernel does not say (-1: one node, or no firmware
    table) or the address is unknown."""
    text = _read(os.path.join(sysfs, "bus/pci/devices", address, "numa_node")) if address else None
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def numa_cpus(node: int, sysfs: str = SYSFS) -> list:
    text = _read(os.path.join(sysfs, f"devices/system/node/node{node}/cpulist"))
    return parse_cpulist(text) if text else []


def split(cpus: list, parts: int, sysfs: str = SYSFS) -> Optional[list]:
    """`cpus` in `parts` contiguous, disjoint slices, the first ones one core larger where they do not divide;
    whole physical cores where sysfs names a CPU's hyperthread siblings (two ranks on the two threads of one core
    would share it). None when there are fewer CPUs than parts."""
    if parts < 1 or len(cpus) < parts:
        return None
    here = set(cpus)
    units = {}  # the first CPU of a physical core -> its CPUs among `cpus`
    for c in cpus:
        text = _read(os.path.join(sysfs, f"devices/system/cpu/cpu{c}/topology/thread_siblings_list"))
        mates = [m for m in parse_cpulist(text) if m in here] if text else [c]
        units.setdefault(min(mates or [c]), set()).update(mates or [c])
    if len(units) < parts:  # fewer physical cores than ranks: share-free slices of threads are the best there is
        units = {c: {c} for c in cpus}
    ordered = [sorted(units[k]) for k in sorted(units)]
    size, extra = divmod(len(ordered), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(sorted(c for unit in ordered[start:end] for c in unit))
        start = end
    return out


def gpu_slices(gpu_nodes: list, cores: list, sysfs: str = SYSFS) -> tuple:
    """(slices, by_numa): each local rank's cores (index: local rank, whose GPU is cuda:<local rank>), disjoint.
    By NUMA: the cores of a GPU's node among `cores`, split among the local ranks whose GPUs are on that node, in
    local rank order. Where any GPU's node is unknown, or a node has fewer of `cores` than GPUs, `cores` split
    evenly instead (by_numa False). Every local rank computes the same plan from the same inputs."""
    if gpu_nodes and None not in gpu_nodes:
        groups = {}
        for local_rank, node in enumerate(gpu_nodes):
            groups.setdefault(node, []).append(local_rank)
        slices = [None] * len(gpu_nodes)
        mine = set(cores)
        for node, members in groups.items():
            parts = split([c for c in numa_cpus(node, sysfs) if c in mine], len(members), sysfs)
            if parts is None:
                break
            for local_rank, part in zip(members, parts):
                slices[local_rank] = part
        else:
            return slices, True
    return split(cores, len(gpu_nodes), sysfs), False


def launcher_bound(cores: list, local_ranks: int, threads: Optional[int]) -> bool:
    """Whether the launcher already gave this rank its own share: its cores could not hold every local rank's
    (threads, else 1 core, each), or it is the node's only rank and has no more than its threads. srun with
    --cpus-per-task under task/affinity binds each task to that many cores; a site that does not bind, torchrun
    and a local launch leave every rank on all of the node's (or the job's) cores."""
    share = threads or 1
    return len(cores) < max(local_ranks * share, share + 1)


def pin_gpu(local_rank: int, local_ranks: int, addresses: list, threads: Optional[int] = None,
            sysfs: Optional[str] = None, environ=None) -> dict:
    """Pin a GPU rank (the calling thread and those it starts later) to cores near its GPU, where its launcher
    did not bind it: a disjoint slice of the cores of its GPU's NUMA node (torchrun's --numa-binding=exclusive,
    NVIDIA's advice), else an even slice of its cores. Left alone where the launcher bound it, or with
    SCALELAB_NO_GPU_PIN=1. `addresses`: the PCI addresses of cuda:0.. as this rank sees them.

    Why: unbound, every rank's threads roam the whole node, across the socket link from their GPU, and the ranks'
    records share every core. Returns what the rank's record keeps: {"cpu_pin": "numa" | "split" | "launcher" |
    "off" | "refused", "numa_node": its GPU's node or None}; where the launcher bound it, also "near_gpu": whether
    those cores are on its GPU's node (SLURM's default cyclic distribution deals tasks across the sockets, so task
    1's cores can sit on the other socket from GPU 1; None where sysfs does not say)."""
    environ, sysfs = os.environ if environ is None else environ, sysfs or SYSFS
    nodes = [gpu_numa_node(a, sysfs) for a in addresses[:local_ranks]]
    nodes += [None] * (local_ranks - len(nodes))  # fewer GPUs visible than local ranks: no plan by NUMA
    record = {"numa_node": nodes[local_rank] if local_rank < len(nodes) else None}
    if environ.get(ENV_NO_GPU_PIN) == "1":
        return {**record, "cpu_pin": "off"}
    have = affinity()
    if not have or local_rank >= local_ranks or launcher_bound(have, local_ranks, threads):
        near = numa_cpus(record["numa_node"], sysfs) if record["numa_node"] is not None else []
        return {**record, "cpu_pin": "launcher", "near_gpu": set(have) <= set(near) if have and near else None}
    slices, by_numa = gpu_slices(nodes, have, sysfs)
    try:
        os.sched_setaffinity(0, slices[local_rank])
    except OSError:  # a core outside this process's cpuset: keep the launcher's binding
        return {**record, "cpu_pin": "refused"}
    return {**record, "cpu_pin": "numa" if by_numa else "split"}


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
    common core (oversubscribed), from their records; None when every rank had cores of its own.

    GPU ranks left on common cores (scalelab's pinning off, a launcher that binds nothing) are flagged only where
    their threads outnumber those cores: their compute is on the GPU, and the OS spreads host threads that fit.
    sharing() says that they shared."""
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
    if all(str(r.get("device", "")).startswith("cuda") for r in ranks):
        return crowded(ranks)
    a, b, core = clashes[0]
    pairs = len({(x, y) for x, y, _ in clashes})
    return (f"oversubscribed: ranks {a} and {b} shared core {core}" + (f" ({pairs} pairs of ranks shared cores)"
                                                                         if pairs > 1 else ""))


def crowded(ranks: list) -> Optional[str]:
    """The first machine whose ranks ran more threads than the cores they had among them, in one line; else None."""
    machines = {}  # machine -> (cores, threads, ranks)
    for r in ranks:
        have, threads, count = machines.get(r.get("machine"), (set(), 0, 0))
        machines[r.get("machine")] = (have | set(r.get("cpu_affinity") or []), threads + (r.get("threads") or 1),
                                      count + 1)
    for have, threads, count in machines.values():
        if have and threads > len(have):
            return f"oversubscribed: {count} ranks of one machine ran {threads} threads on {len(have)} core(s)"
    return None


def sharing(ranks: list) -> Optional[str]:
    """"ranks 0 and 1 shared core 0" for the first two ranks of one machine that had a core in common; None when
    each had cores of its own."""
    seen = {}
    for r in ranks:
        for core in r.get("cpu_affinity") or []:
            first = seen.setdefault((r.get("machine"), core), r["rank"])
            if first != r["rank"]:
                return f"ranks {first} and {r['rank']} shared core {core}"
    return None
