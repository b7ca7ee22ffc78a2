"""SLURM's requeue, done at a step every rank agreed on: save, ask SLURM to requeue the job, resume from the save.

`#SBATCH --signal=SIGUSR1@90` warns the job 90 s before its time limit; with `#SBATCH --requeue` SLURM may run it
again. The loop stops at its next sync point (signals.py), every rank calls `save` (Fabric writes rank 0's copy;
DDP's replicas are identical), rank 0 calls `ask_slurm`, and the attempt is recorded "preempted". The next attempt
(SLURM_RESTART_COUNT 1 and up) finds the checkpoint under the same job id and resumes at the saved step.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import asdict, fields
from typing import Optional

from scalelab.launch import slurm_env

CHECKPOINT_DIR = "checkpoints"  # under --output_dir: outputs/checkpoints/<job id>/requeue.ckpt
LEAD_S = 90  # the job scripts' `#SBATCH --signal=SIGUSR1@90`: from the warning to the time limit
# of the lead, what the save may take: the loop reaches its next sync point (about loop.SYNC_SECONDS), then after
# the save `scontrol requeue` and the result's record, with room to spare (the self-check holds a save against it)
SAVE_BUDGET_S = 60
MAX_REQUEUES = 3  # attempts after the first: a job that still has not finished is not going to by requeueing


def refusal(environ=None) -> Optional[str]:
    """Why SLURM's warning (SIGUSR1) ends this job's run at its time limit instead of requeueing it; None: requeue.
    An attempt must have time to train before the warning: a requeued job gets the same limit (a dry run's
    --time=1 cycled REQUEUED every ~2.5 min until cancelled). And requeues are bounded."""
    limit = slurm_env.time_limit_s(environ)
    if limit is not None and limit < 2 * LEAD_S:
        return (f"its time limit ({limit} s) leaves an attempt less than {LEAD_S} s before SLURM's warning, "
                f"{LEAD_S} s ahead (--signal=SIGUSR1@{LEAD_S}): each requeued attempt would end the same way")
    restarts = slurm_env.restart_count(environ)
    if restarts >= MAX_REQUEUES:
        return f"SLURM requeued the job {restarts} times already (at most {MAX_REQUEUES})"
    return None


def checkpoint_bytes(params: int, trainable: Optional[int] = None) -> int:
    """What `save` writes, about: fp32 weights (4 bytes a parameter) and AdamW's two fp32 moments of the trainable
    ones (8 bytes each); xl's 1.3 billion: 15.8 GB."""
    return 4 * params + 8 * (params if trainable is None else trainable)


def checkpoint_path(output_dir: str, environ=None) -> Optional[str]:
    """Where this SLURM job's requeue checkpoint lives (None outside a SLURM job)."""
    job = slurm_env.job_id(environ)  # each task of an array has its own
    return os.path.join(output_dir, CHECKPOINT_DIR, job, "requeue.ckpt") if job else None


def resume(fabric, model, optimizer, plan, path: Optional[str], environ=None) -> bool:
    """A requeued attempt (SLURM_RESTART_COUNT > 0) with its job's checkpoint: load it and move `plan` to the saved
    step. A first attempt never loads (job ids restart after a cluster is wiped: a stale file is not this job's).
    Rank 0 looks for the file and tells the others: every rank must take the same branch (loading waits for all)."""
    if not path or slurm_env.restart_count(environ) < 1:
        return False
    if not fabric.broadcast(os.path.exists(path) if fabric.global_rank == 0 else None, src=0):
        return False
    state = {"model": model, "optimizer": optimizer, "plan": {}}
    fabric.load(path, state)
    for f in fields(plan):
        if f.name in ("step", "epoch", "batch"):
            setattr(plan, f.name, state["plan"][f.name])
    return True


def save(fabric, model, optimizer, plan, path: str) -> tuple:
    """Every rank calls it at the same step (Fabric writes rank 0's copy and waits for all). Written beside the
    checkpoint, then moved over it: a save cut short (SIGKILL at KillWait) never leaves half a file. Returns
    (bytes written, seconds it took): the record says both, against SIGUSR1's lead (bytes: rank 0's, else None)."""
    started = time.perf_counter()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fabric.save(path + ".part", {"model": model, "optimizer": optimizer, "plan": asdict(plan)})
    if fabric.global_rank == 0:
        os.replace(path + ".part", path)
        return os.path.getsize(path), time.perf_counter() - started
    return None, time.perf_counter() - started


def done_with(path: Optional[str]) -> None:
    """A resumed job completed: its checkpoint (16 GB and more for xl) has served its purpose."""
    if path and os.path.exists(path):
        os.remove(path)


def ask_slurm(environ=None) -> Optional[str]:
    """`scontrol requeue JOB`; None when SLURM took it, else why not (one line)."""
    job = slurm_env.job_id(environ)
    try:
        proc = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scontrol requeue {job} did not run: {exc}"
    if proc.returncode:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        return f"scontrol requeue {job} failed: {said[-1] if said else f'exit {proc.returncode}'}"
    return None


def end_cause(environ=None) -> Optional[str]:
    """Why SLURM sent SIGTERM, as `scontrol show job` says while the job ends (slurm_env.end_cause); None where it
    cannot say (no scontrol, no answer within 5 s)."""
    job = slurm_env.job_id(environ)
    try:
        proc = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return slurm_env.end_cause(proc.stdout) if proc.returncode == 0 else None
