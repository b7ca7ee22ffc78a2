"""What SLURM tells a process, read in one place: every `SLURM_*` variable scalelab reads is named here.

submitit keeps one environment class per launcher (`core/job_environment.py`) for the same reason: a launcher's
variables, their quirks (SLURM_NTASKS_PER_NODE only with --ntasks-per-node, SLURM_TASKS_PER_NODE as "4(x2)", array
jobs' two ids) and what they mean live beside each other, and the rest of the package asks by meaning. Every
function takes `environ` (default: this process's) so a test can hand it the variables of any job shape.
"""

import os
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the record is imported where a block is built: emulate.py runs this on a bare python
    from scalelab import record


def _env(environ):
    return os.environ if environ is None else environ


def in_job(environ=None) -> bool:
    """Inside a SLURM allocation (a batch script, an srun task, a salloc shell)."""
    return "SLURM_JOB_ID" in _env(environ)


def in_step(environ=None) -> bool:
    """Started by srun (a job step), not by the batch script or a salloc shell itself."""
    return "SLURM_STEP_ID" in _env(environ)


def job_id(environ=None) -> Optional[str]:
    """This job's own id: each task of an array has one of its own."""
    return _env(environ).get("SLURM_JOB_ID")


def job_label(environ=None) -> Optional[str]:
    """The id a person recognises: `ARRAYJOB_TASK` (what squeue shows) for a task of an array, else the job id."""
    environ = _env(environ)
    job = environ.get("SLURM_JOB_ID")
    if job and environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{environ.get('SLURM_ARRAY_JOB_ID', job)}_{environ['SLURM_ARRAY_TASK_ID']}"
    return job


def job_name(environ=None) -> str:
    return _env(environ).get("SLURM_JOB_NAME", "")


def procid(environ=None) -> Optional[str]:
    """This task's global rank as srun numbered it (None outside an srun step); entry.env_rank reads it too, below
    launch/, for config's once-per-run warnings."""
    return _env(environ).get("SLURM_PROCID")


def restart_count(environ=None) -> int:
    """How often SLURM requeued this job (0: the first attempt)."""
    return int(_env(environ).get("SLURM_RESTART_COUNT") or 0)


def cpus_per_task(environ=None) -> Optional[int]:
    """--cpus-per-task as the job asked it; None where it did not."""
    raw = _env(environ).get("SLURM_CPUS_PER_TASK", "")
    return int(raw) if raw.isdigit() else None


def tasks_per_node(environ=None) -> int:
    """SLURM_NTASKS_PER_NODE is set by --ntasks-per-node only; SLURM_TASKS_PER_NODE ("4(x2)") always is."""
    environ = _env(environ)
    raw = environ.get("SLURM_NTASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE", "1")
    return int(raw.split("(")[0].split(",")[0])


def ntasks_per_node_given(environ=None) -> Optional[str]:
    """--ntasks-per-node as given (None when the tasks were asked with -n/--ntasks, which Lightning refuses)."""
    return _env(environ).get("SLURM_NTASKS_PER_NODE")


def sizes(environ=None) -> tuple:
    """(tasks, nodes) of this job or step; ValueError where SLURM's figures are not numbers."""
    environ = _env(environ)
    return int(environ.get("SLURM_NTASKS", "1")), int(environ.get("SLURM_NNODES", "1"))


def nodes(environ=None) -> int:
    return int(_env(environ).get("SLURM_NNODES", "1"))


def job_record(environ=None) -> "record.Slurm":
    """The result file's `slurm` block: which job, array task, nodes, partition, step and attempt; empty outside
    SLURM."""
    from scalelab import record  # a writer's: this module is launch/emulate.py's too, on a bare python
    environ = _env(environ)
    if "SLURM_JOB_ID" not in environ:
        return record.Slurm()
    return record.Slurm(
        cluster=environ.get("SLURM_CLUSTER_NAME"),  # a job id is unique on one cluster only
        job_id=environ.get("SLURM_JOB_ID"),
        array_job_id=environ.get("SLURM_ARRAY_JOB_ID"),
        array_task_id=environ.get("SLURM_ARRAY_TASK_ID"),
        job_name=environ.get("SLURM_JOB_NAME"),
        nodelist=environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST"),
        partition=environ.get("SLURM_JOB_PARTITION"),
        step_id=environ.get("SLURM_STEP_ID"),
        restart_count=restart_count(environ),
        exclusive=nodes_exclusive(environ),
    )


def rendezvous_port(job_id: str) -> int:
    """The main rank's port, the same in every task of a job: Fabric's SLURM convention, 15000 + the last four
    digits of SLURM_JOB_ID (the port the sbatch scripts' runs use). Below Linux's ephemeral range (32768-60999),
    where gloo's and slurmd's own connections take ports: submitit's draw from 20000-60000 can land on one and fail
    EADDRINUSE."""
    return 15000 + int(job_id[-4:])


def nodes_exclusive(environ=None) -> Optional[bool]:
    """Whether the job had its nodes to itself (--exclusive, or a partition with OverSubscribe=EXCLUSIVE), from the
    OverSubscribe values slurm_jobs/site.sh read in the job (scontrol); None where nobody read them. A neighbour's
    job shares the node's PCIe, memory bandwidth and network card: its timings are not the hardware's alone."""
    environ = _env(environ)
    job = environ.get("SCALELAB_JOB_OVERSUBSCRIBE", "unknown")
    partition = environ.get("SCALELAB_PARTITION_OVERSUBSCRIBE", "unknown")
    if job == "NO" or partition.startswith("EXCLUSIVE"):
        return True
    return None if job == "unknown" else False


def time_limit_s(environ=None) -> Optional[int]:
    """The job's time limit in seconds, from scontrol's TimeLimit ([D-]HH:MM:SS) that slurm_jobs/site.sh exports as
    SCALELAB_JOB_TIME_LIMIT; None where unknown or UNLIMITED."""
    days, _, clock = _env(environ).get("SCALELAB_JOB_TIME_LIMIT", "").rpartition("-")
    parts = clock.split(":")
    if days and not days.isdigit() or len(parts) > 3 or not all(p.isdigit() for p in parts):
        return None
    hours, minutes, seconds = [0] * (3 - len(parts)) + [int(p) for p in parts]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def end_cause(job_text: str) -> Optional[str]:
    """Why SLURM is ending a job, from `scontrol show job` read as its tasks get SIGTERM (JobState is COMPLETING by
    then, Reason says why): the job's time limit, preemption, a failed node, or a cancel; None where it does not say.
    (sacct would say too, but only where the site keeps accounting, and a little later.)"""
    fields = dict(word.split("=", 1) for word in job_text.split() if "=" in word)
    state, reason = fields.get("JobState", ""), fields.get("Reason", "")
    if reason == "TimeLimit" or state == "TIMEOUT":
        return "SLURM ended the job at its time limit"
    if state == "PREEMPTED" or reason.startswith("Preempt"):
        return "SLURM preempted the job"
    if state == "NODE_FAIL" or reason in ("NodeDown", "NodeFail", "NodeNotResponding"):
        return "SLURM ended the job: one of its nodes failed"
    if state in ("CANCELLED", "COMPLETING") and reason == "None":
        return "the job was cancelled (scancel)"
    return None
