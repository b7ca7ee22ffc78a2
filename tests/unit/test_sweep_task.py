"""What a submitit task sets up before train.py runs (launch/sweep.py: TrainTask), and what its jobs ask of srun."""

import argparse
import os

import pytest

from scalelab.launch import slurm_env, sweep

SLURM_TASK = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "61", "SLURM_JOB_NODELIST": "node[1-2]",
              "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2",
              "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "node[1-2]"}


DISTRIBUTED = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def _run_task(monkeypatch, environ):
    """TrainTask's set-up in a task with these variables; train.py's main replaced by a look at what it would read."""
    seen = {}
    for name in DISTRIBUTED:  # the task exports these straight into os.environ: put back as they were afterwards
        monkeypatch.setenv(name, "stale")
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("scalelab.train.run.main", lambda argv: seen.update(
        {name: os.environ.get(name) for name in DISTRIBUTED}) or 0)
    sweep.TrainTask(["--max_steps", "1"], "cpu")()
    return seen


def test_every_task_of_a_job_rendezvous_on_one_port_below_the_ephemeral_range(monkeypatch):
    # CI met it: submitit drew 52330 for job 61, inside 32768-60999, and a connection of the machine held it
    seen = _run_task(monkeypatch, SLURM_TASK)
    assert seen == {"MASTER_ADDR": "node1", "MASTER_PORT": "15061", "RANK": "1", "WORLD_SIZE": "2",
                    "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    other_rank = _run_task(monkeypatch, {**SLURM_TASK, "SLURM_PROCID": "0", "SLURM_NODEID": "0"})
    assert (other_rank["MASTER_PORT"], other_rank["RANK"]) == ("15061", "0")


def test_a_port_the_user_set_is_kept_and_a_submitting_shells_ranks_are_not(monkeypatch):
    # sbatch passes the submitting shell's environment on: a torchrun shell's RANK=3 must not reach the job
    seen = _run_task(monkeypatch, {**SLURM_TASK, "MASTER_PORT": "29400", "RANK": "3", "WORLD_SIZE": "8"})
    assert (seen["MASTER_PORT"], seen["RANK"], seen["WORLD_SIZE"]) == ("29400", "1", "2")


def test_an_array_task_takes_its_own_job_ids_port_as_fabric_would(monkeypatch):
    # submit.py's repeats are one array: task 1 of array 60 is job 63 to SLURM (SLURM_JOB_ID), "60_1" to submitit
    array_task = {**SLURM_TASK, "SLURM_JOB_ID": "63", "SLURM_ARRAY_JOB_ID": "60", "SLURM_ARRAY_TASK_ID": "1"}
    assert _run_task(monkeypatch, array_task)["MASTER_PORT"] == "15063"


def test_every_job_id_gives_a_port_below_the_ephemeral_range():
    ports = {slurm_env.rendezvous_port(str(job_id)) for job_id in range(0, 200_000, 7)}
    assert min(ports) == 15000 and max(ports) == 24999  # 32768 and up: Linux's ephemeral ports


@pytest.mark.parametrize("job_id, port", [("61", 15061), ("1234567", 19567), ("9999", 24999), ("10000", 15000)])
def test_the_port_is_fabrics_slurm_convention(monkeypatch, job_id, port):
    assert slurm_env.rendezvous_port(job_id) == port
    from lightning.fabric.plugins.environments import SLURMEnvironment  # the port the sbatch scripts' runs take

    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", job_id)
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert SLURMEnvironment().main_port == port


def test_a_failed_rank_ends_its_peers_at_once(tmp_path, monkeypatch):
    import submitit

    # submitit's executor refuses to be built where no srun is on PATH (a fresh machine before the test cluster is
    # installed): the job's parameters are what this test reads; tests/scenarios/test_slurm_sweep.py submits them
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    args = argparse.Namespace(cluster="slurm", gres_type=None, time_min=10, cpus_per_task=2, partition=None,
                              account=None, constraint=None, profile="auto", output_dir=str(tmp_path))
    executor = sweep.Submitter(args, {}, str(tmp_path), "cpu", []).executor(2, 1)
    assert executor.parameters["srun_args"] == ["--cpus-per-task=2", "--kill-on-bad-exit=1"]
