"""Where am I running? SLURM (srun, submitit), torchrun, or plain local processes.

Detection is Lightning's (`SLURMEnvironment`, `TorchElasticEnvironment`); this module only reads the sizes
they imply and refuses, in one line and before the model is built, what would go wrong later:

* `--devices`/`--num_nodes` that differ from SLURM's `--ntasks-per-node`/`--nodes`. Lightning 2.6 raises a
  ValueError for that too (from every rank, ~3 s in: measured on the local cluster, docs/10); the check here says
  it once, with the sbatch line to change.
* srun tasks in an allocation named `bash` or `interactive` (salloc's default name). Lightning treats such a job
  as "not SLURM" (`_is_slurm_interactive_mode`): each srun task would train alone, as a 1-rank run, and
  `srun -n 2` gives two unrelated results instead of one 2-rank run. Refused with the name to use.
* `srun -n N` without `--ntasks-per-node`: Lightning's SLURMEnvironment refuses it with a traceback per rank.
"""

import os
import platform
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from scalelab.entry import env_rank  # noqa: F401 (train/run.py and testing/faults.py read it here)
from scalelab.errors import UsageError
from scalelab.launch import link_env, slurm_env

if TYPE_CHECKING:  # the record is imported where a block is built: emulate.py runs this on a bare python
    from scalelab import record


@dataclass
class Launch:
    launcher: str  # "slurm", "torchrun", "external" (env set by submitit/others), or "local"
    devices: int  # processes per node (one per GPU, or per CPU share)
    num_nodes: int
    accelerator: str  # "gpu" or "cpu"

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes

    @property
    def backend(self) -> str:
        return "nccl" if self.accelerator == "gpu" else "gloo"

    def record(self, device_names, hostnames, **extra) -> "record.Launch":
        """The `launch` block of a result.json. One builder for every writer (training, benchmarks), so the
        report reads the same fields from each; `backend` is None where no process group ran (one rank); extra:
        the writer's other fields of the block (threads, oversubscribed, its own backend)."""
        from scalelab import record  # a writer's: this module is launch/emulate.py's too, on a bare python

        return record.Launch(**{
            "launcher": self.launcher, "world_size": self.world_size, "num_nodes": self.num_nodes,
            "devices": self.devices, "accelerator": self.accelerator,
            "backend": self.backend if self.world_size > 1 else None,
            "device_names": sorted(set(device_names)), "hostnames": sorted(set(hostnames)),
            "link": link_env.link_record(), **extra})


INTERACTIVE_NAMES = ("bash", "interactive")  # job names Lightning's SLURMEnvironment.detect() ignores


def slurm_step_problem(environ=None, script="src/train.py") -> Optional[str]:
    """What is wrong with this srun step for a multi-rank run, in one line; None when nothing is (or when this is no
    multi-task srun step: a batch script, a salloc shell and a 1-task step have no SLURM_STEP_ID or one task)."""
    try:
        ntasks, nnodes = slurm_env.sizes(environ)
    except ValueError:
        return None
    if ntasks <= 1 or not slurm_env.in_step(environ):
        return None
    given = slurm_env.ntasks_per_node_given(environ)
    per_node = given or str(max(1, ntasks // max(1, nnodes)))
    name = slurm_env.job_name(environ)
    if name in INTERACTIVE_NAMES:
        why = " (salloc's default)" if name == "interactive" else ""
        return (f"srun started {ntasks} tasks in a job named '{name}'{why}, which Lightning does not treat as SLURM: "
                f"each task would train alone as a 1-rank run; name the step, `srun --job-name=scalelab "
                f"--ntasks-per-node={per_node} python {script} ...`, or the allocation, `salloc --job-name=scalelab` "
                "(sbatch: any name but bash or interactive)")
    if given is None:
        return (f"srun started {ntasks} tasks with -n/--ntasks, which Lightning refuses: give the tasks per node "
                f"instead, `srun --ntasks-per-node={per_node} python {script} ...`")
    return None


def _check(flag: str, given, actual: int, source: str, fix: str):
    if given is not None and given != actual:
        raise UsageError(f"{flag} {given} does not match {source}={actual}: {fix}")


# What Lightning's SLURMEnvironment.detect() (SLURM_NTASKS, unless an interactive job name) and
# TorchElasticEnvironment.detect() (torch's is_torchelastic_launched: TORCHELASTIC_RUN_ID) need set to say yes.
LAUNCHER_SIGNS = ("SLURM_NTASKS", "TORCHELASTIC_RUN_ID")


def launchers() -> tuple:
    """(SLURM's, torchrun's) as Lightning detects them in this process's environment (the same detection runs again
    inside Fabric); without any of LAUNCHER_SIGNS both are no, and Lightning (seconds to import) is not asked."""
    if not any(name in os.environ for name in LAUNCHER_SIGNS):
        return False, False
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    return SLURMEnvironment.detect(), TorchElasticEnvironment.detect()


def detect(devices=None, num_nodes=None, accelerator="auto") -> Launch:
    """Sizes of this run, from the launcher when there is one, else from the flags."""
    # Lightning warns on every detection where `srun` exists and did not start the process: every local run on a
    # login node (or this laptop with slurm-wlm), here and again inside Fabric. The mistake it hints at, a
    # multi-task SLURM job outside srun, is refused below in one line.
    warnings.filterwarnings("ignore", message="The `srun` command is available on your system but is not used")
    problem = slurm_step_problem(script=_script())
    if problem:
        raise UsageError(problem)
    slurm, torchrun = launchers()
    external = "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ and "SCALELAB_LAUNCHER" in os.environ
    if not (slurm or torchrun or external) and (num_nodes or 1) > 1:  # before torch: a flag's mistake, said at once
        raise UsageError(f"--num_nodes {num_nodes} needs a launcher that starts the other nodes: use srun or torchrun")
    accel = resolve_accelerator(accelerator)
    if slurm:
        tasks, nodes = slurm_env.tasks_per_node(), slurm_env.nodes()
        if tasks * nodes > 1 and not slurm_env.in_step():
            raise UsageError(
                f"this SLURM job has {tasks * nodes} tasks but train.py runs outside srun; "
                "start it as `srun python src/train.py ...`"
            )
        _check("--devices", devices, tasks, "SLURM --ntasks-per-node", f"set --ntasks-per-node={devices} in the "
               f"sbatch header (one task per GPU) or drop --devices")
        _check("--num_nodes", num_nodes, nodes, "SLURM --nodes", f"set --nodes={num_nodes} or drop --num_nodes")
        if accel == "gpu":
            import torch

            check_visible_gpus(tasks, torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
        return Launch("slurm", tasks, nodes, accel)
    if torchrun:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        nodes = max(1, int(os.environ["WORLD_SIZE"]) // local)
        _check("--devices", devices, local, "torchrun --nproc_per_node", "make them equal or drop --devices")
        _check("--num_nodes", num_nodes, nodes, "torchrun --nnodes", "make them equal or drop --num_nodes")
        return Launch("torchrun", local, nodes, accel)
    if external:  # ranks created by someone else (submitit's local executor): sizes come from the environment
        world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        return Launch(os.environ["SCALELAB_LAUNCHER"], local, max(1, world // local), accel)
    return Launch("local", devices or 1, 1, accel)


def _script() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return f"src/{name}" if name.endswith(".py") else "src/train.py"


def check_visible_gpus(devices: int, visible: int, cuda_visible=None):
    """Lightning gives local rank k the node's GPU k, so every task must see all `devices` GPUs of its node. Where
    the site binds one GPU per srun task (--gpus-per-task, --gpu-bind=single), Lightning would fail after start-up
    with "You requested gpu: [0, 1, 2, 3] but your machine only has: [0]": say what to change first."""
    if 0 < visible < devices:
        shown = f" (CUDA_VISIBLE_DEVICES={cuda_visible})" if cuda_visible else ""
        raise UsageError(f"each task sees {visible} GPU(s){shown} but --devices {devices} needs every task to see "
                         f"the node's {devices}: run srun with --gpu-bind=none, or request --gres=gpu:{devices} per "
                         "node instead of --gpus-per-task")


def resolve_accelerator(accelerator: str) -> str:
    import torch

    has_gpu = torch.cuda.is_available()
    if accelerator == "gpu" and not has_gpu:
        raise UsageError("--accelerator gpu but torch sees no CUDA device; use --accelerator cpu (gloo)")
    return "gpu" if accelerator in ("gpu", "auto") and has_gpu else "cpu"


def hostname() -> str:
    return socket.gethostname()


def device_name(accelerator: str, device=0) -> str:
    """The GPU's name from the device the rank trains on (a torch.device or its index: with one GPU bound per
    task, or CUDA_VISIBLE_DEVICES, the local rank is not the index), or the CPU's model name."""
    if accelerator == "gpu":
        import torch

        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def process_start_time() -> float:
    """Wall-clock start of this process from the kernel, so interpreter start-up and imports count.

    /proc/self/stat gives the start in clock ticks since boot (10 ms); CLOCK_BOOTTIME gives "now" on the
    same clock, so the age is exact to a tick (btime in /proc/stat is whole seconds: too coarse).
    """
    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()
