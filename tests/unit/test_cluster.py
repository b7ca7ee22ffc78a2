"""cluster.py's checks of an srun step, from the variables SLURM sets (measured on the local cluster, docs/05):
salloc names its job `interactive`, which Lightning does not treat as SLURM, so `srun -n 2 python src/train.py`
there would give two unrelated 1-rank runs; `srun -n N` without --ntasks-per-node Lightning refuses with a
traceback. Both are one line here, with the srun line that works."""

import os
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import run_script
from scalelab.launch import cluster

# what `salloc -N2` then `srun -n 2 ...` gives each task (printed by the tasks on the local cluster)
SALLOC_SRUN = {"SLURM_JOB_NAME": "interactive", "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_PROCID": "0",
               "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "16"}


def test_srun_tasks_in_a_salloc_allocation_are_refused_with_the_name_to_use():
    line = cluster.slurm_step_problem(SALLOC_SRUN)
    assert line.startswith("srun started 2 tasks in a job named 'interactive'")
    assert "each task would train alone as a 1-rank run" in line
    assert "`srun --job-name=scalelab --ntasks-per-node=1 python src/train.py ...`" in line
    assert "\n" not in line


@pytest.mark.parametrize("name", ["bash", "interactive"])
def test_both_names_lightning_ignores(name):
    env = {**SALLOC_SRUN, "SLURM_JOB_NAME": name, "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4"}
    line = cluster.slurm_step_problem(env, script="src/allreduce_bench.py")
    assert f"job named '{name}'" in line and "--ntasks-per-node=4 python src/allreduce_bench.py" in line


@pytest.mark.parametrize("env", [
    {},  # no SLURM at all
    {**SALLOC_SRUN, "SLURM_NTASKS": "1"},  # `srun -n 1` in the allocation: one rank, nothing to join
    {k: v for k, v in SALLOC_SRUN.items() if k not in ("SLURM_STEP_ID", "SLURM_PROCID")},  # the salloc shell
    # the batch script of `sbatch --job-name=bash` (SLURM_PROCID=0 there, but no step): the outside-srun check's case
    {**SALLOC_SRUN, "SLURM_JOB_NAME": "bash", "SLURM_NTASKS_PER_NODE": "1", "SLURM_STEP_ID": None},
    {**SALLOC_SRUN, "SLURM_JOB_NAME": "scalelab", "SLURM_NTASKS_PER_NODE": "1"},  # named: SLURM as usual
    {**SALLOC_SRUN, "SLURM_NTASKS": "two"},
], ids=["no-slurm", "one-task", "salloc-shell", "batch-script", "named-job", "garbage"])
def test_what_is_not_refused(env):
    assert cluster.slurm_step_problem({k: v for k, v in env.items() if v is not None}) is None


def test_a_two_task_job_script_that_runs_train_py_outside_srun_is_refused_with_the_srun_line(monkeypatch):
    """The batch script of `sbatch -N2 --ntasks-per-node=1` running `python src/train.py` itself (no srun: no step):
    one process would wait for a second rank that never starts."""
    for name in [k for k in os.environ if k.startswith(("SLURM_", "TORCHELASTIC_"))] + ["WORLD_SIZE", "RANK"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in {"SLURM_JOB_ID": "16", "SLURM_JOB_NAME": "scalelab", "SLURM_NTASKS": "2", "SLURM_NNODES": "2",
                        "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(cluster.UsageError) as err:
        cluster.detect(accelerator="cpu")
    assert str(err.value) == ("this SLURM job has 2 tasks but train.py runs outside srun; start it as "
                              "`srun python src/train.py ...`")


def test_ntasks_without_tasks_per_node_is_one_line_with_the_per_node_count():
    env = {**SALLOC_SRUN, "SLURM_JOB_NAME": "scalelab", "SLURM_NTASKS": "8"}
    line = cluster.slurm_step_problem(env)
    assert line == ("srun started 8 tasks with -n/--ntasks, which Lightning refuses: give the tasks per node "
                    "instead, `srun --ntasks-per-node=4 python src/train.py ...`")


def test_train_py_says_it_in_one_line_and_exit_code_2(tmp_path):
    proc = run_script("train.py", "--model", "mlp", "--output_dir", tmp_path, env=SALLOC_SRUN, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("train.py: error: srun started 2 tasks in a job named 'interactive'")
    assert not list(tmp_path.rglob("result.json"))


@pytest.mark.slow
def test_a_local_run_where_srun_exists_prints_no_lightning_hint(tmp_path):
    """On a login node (or a laptop with slurm-wlm) `srun` is on PATH: Lightning's detection would warn on every local
    run that srun "is available but not used"; the mistake it means is refused by the checks above, in one line."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    proc = run_script("train.py", "--model", "mlp", "--max_steps", "8", "--output_dir", tmp_path / "out",
                      env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


_ENV_NAMES = ("SLURM_NTASKS", "SLURM_JOB_NAME", "SLURM_NNODES", "SLURM_PROCID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID",
              "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "SCALELAB_LAUNCHER")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(_ENV_NAMES), st.sampled_from(["1", "4", "bash", "interactive", "job", ""])))
def test_launchers_is_lightnings_detection_and_skips_it_only_where_it_says_no(env):
    """cluster.launchers asks Lightning (SLURMEnvironment, TorchElasticEnvironment) unless none of the variables
    those need is set: on any environment of launcher-like variables, it says what Lightning says (before, a
    one-line refusal of a local run's flags waited seconds for Lightning's import)."""
    from unittest import mock

    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    with mock.patch.dict(os.environ, env, clear=True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cluster.launchers() == (SLURMEnvironment.detect(), TorchElasticEnvironment.detect())
