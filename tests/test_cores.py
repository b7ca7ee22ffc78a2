"""One CPU device = a fixed share of cores (launch.cores): the fit check, the pinning, and the after-the-fact
check that ranks did not share cores."""

import os
import subprocess
import sys

import pytest

from helpers import SRC, run_script
from scalelab.errors import UsageError
from scalelab.launch import cores
from scalelab.launch.cluster import Launch


def test_more_devices_than_cores_is_refused_in_one_line_or_recorded_when_insisted():
    with pytest.raises(UsageError, match=r"^4 device\(s\) x 1 core\(s\) need 4 cores but this node has 2 "
                                         r"\(cores 0-1\): .*--oversubscribe"):
        cores.check_fit(4, 1, [0, 1], oversubscribe=False)
    assert cores.check_fit(4, 1, [0, 1], oversubscribe=True).startswith("oversubscribed: 4 device(s) x 1 core(s)")
    assert cores.check_fit(2, 2, [0, 1, 2, 3], oversubscribe=False) is None


def test_threads_default_to_one_core_per_cpu_device_and_follow_slurm(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert cores.threads_per_device(None, "local", "cpu") == 1
    assert cores.threads_per_device(3, "local", "cpu") == 3
    assert cores.threads_per_device(None, "local", "gpu") is None  # torch's default feeds a GPU
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    assert cores.threads_per_device(None, "slurm", "cpu") == 4
    assert cores.threads_per_device(None, "torchrun", "cpu") == 1


def test_span_and_shared_cores():
    assert cores.span([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    disjoint = [{"rank": 0, "machine": "m", "cpu_affinity": [0]}, {"rank": 1, "machine": "m", "cpu_affinity": [1]}]
    assert cores.shared_cores(disjoint) is None
    other_machine = [{"rank": 0, "machine": "a", "cpu_affinity": [0]}, {"rank": 1, "machine": "b", "cpu_affinity": [0]}]
    assert cores.shared_cores(other_machine) is None
    shared = [*disjoint, {"rank": 2, "machine": "m", "cpu_affinity": [0, 1]}]
    assert cores.shared_cores(shared) == "oversubscribed: ranks 0 and 2 shared core 0 (2 pairs of ranks shared cores)"
    # srun gave a rank 1 core for --cpus-per-task 4 (Slurm >= 22.05 without SRUN_CPUS_PER_TASK)
    starved = [{"rank": 0, "machine": "m", "cpu_affinity": [0], "threads": 4},
               {"rank": 1, "machine": "m", "cpu_affinity": [1], "threads": 4}]
    assert cores.shared_cores(starved) == ("oversubscribed: rank 0 ran 4 threads on 1 core(s) (2 ranks had fewer "
                                           "cores than threads)")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to give two ranks one each")
def test_each_local_rank_pins_itself_to_its_own_slice_of_the_node():
    """place() and pin() in fresh processes (pin() pins the calling thread): local ranks 0 and 1 get different
    cores, a rank with no slice of its own (oversubscribed) runs on all of the node's, and a thread started
    before pinning (gloo's transport) keeps the whole node."""
    code = ("import os, sys, threading; from scalelab.launch import cores; from scalelab.launch.cluster import Launch; "
            "d = cores.place(Launch('torchrun', int(sys.argv[2]), 1, 'cpu'), None, True); "
            "before = sorted(os.sched_getaffinity(0)); seen = []; go = threading.Event(); "
            "t = threading.Thread(target=lambda: (go.wait(), seen.append(sorted(os.sched_getaffinity(0))))); "
            "t.start(); mine = cores.pin(int(sys.argv[1]), d.threads, d.node_cores); go.set(); t.join(); "
            "print(d.threads, mine, d.warning, seen[0] == before)")
    node = sorted(os.sched_getaffinity(0))[:2]
    env = {**os.environ, "PYTHONPATH": str(SRC), cores.ENV_NODE_CORES: ",".join(map(str, node))}
    got = [subprocess.run([sys.executable, "-c", code, str(r), str(n)], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() for r, n in ((0, 2), (1, 2), (2, 3))]
    assert got[0] == f"1 [{node[0]}] None True" and got[1] == f"1 [{node[1]}] None True"
    assert got[2].startswith(f"1 {node} oversubscribed: 3 device(s) x 1 core(s) need 3 cores but this node has 2")


def test_train_refuses_more_devices_than_cores_before_starting_a_rank(tmp_path):
    n = len(os.sched_getaffinity(0)) + 1
    proc = run_script("train.py", "--model", "mlp", "--devices", n, "--output_dir", tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"train.py: error: {n} device(s) x 1 core(s) need {n} cores but this node has {n - 1} "
        f"(cores {cores.span(sorted(os.sched_getaffinity(0)))}): ranks would share cores and the table would show "
        "contention, not scaling; use fewer --devices or --threads, or --oversubscribe to run anyway (flagged in "
        "the result and the report)"]
    assert not any(tmp_path.iterdir())


def test_gpu_launch_leaves_threads_to_torch():
    assert cores.place(Launch("slurm", 4, 2, "gpu")) == (None, None, [])


def test_the_banner_says_whether_each_thread_has_a_core():
    assert cores.describe(1, 2, [0, 1], "local") == "1 device = 1 core(s), each rank pinned"
    assert cores.describe(4, 1, [0, 1], "slurm") == ("1 device = 4 core(s), but only 2 core(s) (cores 0-1) here: its 4 "
                                                     "threads share them")
    # srun may bind each of 4 ranks to its own 2 cores: a rank compares its own threads with the cores it sees
    assert cores.describe(2, 4, [4, 5], "slurm") == "1 device = 2 core(s), each rank pinned"
    assert cores.describe(1, 3, [0, 1], "local") == ("1 device = 1 core(s), but 3 devices need 3 and the node has 2 "
                                                     "core(s) (cores 0-1): ranks share cores (oversubscribed)")


def test_a_slurm_job_asking_more_cores_per_task_than_the_node_has_says_so_in_its_banner(tmp_path):
    """--cpus-per-task 2 granted on a 1-core node (SLURM's environment faked, the node's cores too): the banner says
    the 2 threads share 1 core instead of claiming 2 cores, each rank pinned."""
    env = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1", "SLURM_NNODES": "1", "SLURM_TASKS_PER_NODE": "1",
           "SLURM_JOB_NAME": "scalelab-cores-test", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
           "SLURM_CPUS_PER_TASK": "2", cores.ENV_NODE_CORES: str(sorted(os.sched_getaffinity(0))[0])}
    proc = run_script("train.py", "--model", "mlp", "--max_steps", "8", "--warmup_steps", "2", "--logger", "none",
                      "--output_dir", tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    banner = proc.stdout.splitlines()[0]
    assert (f"1 device = 2 core(s), but only 1 core(s) (cores {env[cores.ENV_NODE_CORES]}) here: its 2 threads share "
            "them | launcher: slurm") in banner
