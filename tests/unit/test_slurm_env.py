"""launch/slurm_env.py: every SLURM variable scalelab reads, and what each job shape makes of them."""

import pytest

from scalelab import record
from scalelab.launch import slurm_env


def test_the_job_record_names_the_job_step_and_restarts_the_job_step_and_restarts():
    env = {"SLURM_JOB_ID": "42", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2", "SLURM_JOB_NAME": "scalelab",
           "SLURM_NODELIST": "node[1-2]", "SLURM_JOB_PARTITION": "gpu", "SLURM_STEP_ID": "0",
           "SLURM_RESTART_COUNT": "3", "SLURM_CLUSTER_NAME": "alps"}
    assert record.plain(slurm_env.job_record(env)) == {
        "cluster": "alps", "job_id": "42", "array_job_id": "40", "array_task_id": "2", "job_name": "scalelab",
        "nodelist": "node[1-2]", "partition": "gpu", "step_id": "0", "restart_count": 3}  # exclusive: not known
    assert slurm_env.job_record({**env, "SLURM_JOB_NODELIST": "node[3-4]"}).nodelist == "node[3-4]"  # the job's
    assert record.plain(slurm_env.job_record({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": ""})) == {
        "job_id": "7", "restart_count": 0}  # what SLURM did not say is not recorded
    assert record.plain(slurm_env.job_record({"SLURM_NODELIST": "node1"})) == {}  # no job: not under SLURM
    assert slurm_env.job_record({"SLURM_JOB_ID": "7"}).restart_count == 0  # never requeued: no count at all


def test_an_array_task_is_labelled_as_squeue_shows_it_but_keeps_its_own_job_id():
    task = {"SLURM_JOB_ID": "125", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "5"}
    assert slurm_env.job_label(task) == "120_5" and slurm_env.job_id(task) == "125"
    assert slurm_env.job_label({"SLURM_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "1"}) == "9_1"  # array id unknown
    assert slurm_env.job_label({"SLURM_JOB_ID": "9"}) == "9" and slurm_env.job_label({}) is None


@pytest.mark.parametrize("env, per_node", [
    ({"SLURM_NTASKS_PER_NODE": "4", "SLURM_TASKS_PER_NODE": "4(x2)"}, 4),
    ({"SLURM_TASKS_PER_NODE": "4(x2)"}, 4),  # -n 8 -N 2: only the "4(x2)" form is set
    ({"SLURM_TASKS_PER_NODE": "3,2"}, 3),  # uneven: the first node's count
    ({}, 1),
    ({"SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "4(x2)"}, 2),  # --ntasks-per-node, as asked, wins
])
def test_tasks_per_node_reads_either_variable(env, per_node):
    assert slurm_env.tasks_per_node(env) == per_node


def test_the_step_the_sizes_and_the_cores_asked_for():
    step = {"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "8", "SLURM_NNODES": "2",
            "SLURM_CPUS_PER_TASK": "6", "SLURM_PROCID": "5"}
    assert slurm_env.in_job(step) and slurm_env.in_step(step) and slurm_env.sizes(step) == (8, 2)
    assert slurm_env.cpus_per_task(step) == 6 and slurm_env.procid(step) == "5" and slurm_env.nodes(step) == 2
    batch = {"SLURM_JOB_ID": "1"}  # the batch script itself: no step, no sizes, no cores asked
    assert not slurm_env.in_step(batch) and slurm_env.sizes(batch) == (1, 1) and slurm_env.cpus_per_task(batch) is None
    assert not slurm_env.in_job({}) and slurm_env.restart_count({"SLURM_RESTART_COUNT": "2"}) == 2
    with pytest.raises(ValueError):
        slurm_env.sizes({"SLURM_NTASKS": "many"})


@pytest.mark.parametrize("job, partition, exclusive", [
    ("NO", "NO", True),  # sbatch --exclusive (what scontrol show job says, measured on the local cluster)
    ("OK", "EXCLUSIVE", True),  # the partition gives whole nodes whatever the job asked
    ("OK", "NO", False),  # the default: other jobs may share the node
    ("YES", "FORCE:4", False),  # SBATCH_EXCLUSIVE=oversubscribe
    ("USER", "NO", False),  # shared with the user's own jobs only: still not the job's alone
    (None, None, None),  # nobody read it (a job that never sourced slurm_jobs/site.sh)
    ("unknown", "unknown", None),  # scontrol did not answer
])
def test_the_job_record_says_whether_the_nodes_were_the_jobs_alone(job, partition, exclusive):
    env = {"SLURM_JOB_ID": "42", "SCALELAB_JOB_OVERSUBSCRIBE": job, "SCALELAB_PARTITION_OVERSUBSCRIBE": partition}
    assert slurm_env.job_record({k: v for k, v in env.items() if v is not None}).exclusive is exclusive


def test_outside_a_job_the_defaults_are_one_node_and_no_name():
    """A process outside SLURM: one node, an empty job name (not None: cluster compares it with salloc's names)."""
    assert slurm_env.nodes({}) == 1 and slurm_env.job_name({}) == ""
    assert slurm_env.job_name({"SLURM_JOB_NAME": "x"}) == "x"


def test_each_job_script_is_told_apart_in_squeues_eight_character_name_column():
    # the dry run: every job showed as `scalelab` in squeue's NAME column (%.8j)
    from helpers import ROOT

    names = {}
    for script in sorted((ROOT / "slurm_jobs").glob("*.sh")):
        for line in script.read_text().splitlines():
            if line.startswith("#SBATCH --job-name="):
                names[script.name] = line.split("=", 1)[1]
    assert len(names) >= 6 and len({name[:8] for name in names.values()}) == len(names), names
    assert all(name not in ("bash", "interactive") for name in names.values())  # Lightning's two special names
