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


def fake_sysfs(root, nodes: dict, gpus: dict):
    """A /sys with NUMA nodes {node: cpulist} and GPUs {pci address: numa_node as the kernel writes it}."""
    for node, cpulist in nodes.items():
        (root / f"devices/system/node/node{node}").mkdir(parents=True)
        (root / f"devices/system/node/node{node}/cpulist").write_text(cpulist + "\n")
    for address, node in gpus.items():
        (root / "bus/pci/devices" / address).mkdir(parents=True)
        (root / "bus/pci/devices" / address / "numa_node").write_text(f"{node}\n")
    return str(root)


GPUS = ["0000:1b:00.0", "0000:3b:00.0", "0000:9a:00.0", "0000:bc:00.0"]  # 2 on node 0, 2 on node 1


def pin_each(monkeypatch, sysfs, affinity, threads=None, environ=None, addresses=GPUS):
    """pin_gpu for local ranks 0..3 of one node, each starting from `affinity`: (what each got, what each recorded)."""
    got = {}
    monkeypatch.setattr(cores, "affinity", lambda: sorted(got.get("now", affinity)))
    monkeypatch.setattr(cores.os, "sched_setaffinity", lambda pid, cpus: got.__setitem__("now", sorted(cpus)),
                        raising=False)
    cpus, records = [], []
    for local_rank in range(4):
        got.clear()
        records.append(cores.pin_gpu(local_rank, 4, addresses, threads, sysfs, environ or {}))
        cpus.append(got.get("now", affinity))
    return cpus, records


def test_cpulist_and_pci_names_read_as_sysfs_writes_them():
    assert cores.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert cores.parse_cpulist("") == []
    assert cores.pci_name(0, 0x3B, 0) == "0000:3b:00.0"


def test_unbound_gpu_ranks_get_disjoint_cores_of_their_gpus_numa_node(tmp_path, monkeypatch):
    sysfs = fake_sysfs(tmp_path, {0: "0-7", 1: "8-15"}, dict(zip(GPUS, (0, 0, 1, 1))))
    cpus, records = pin_each(monkeypatch, sysfs, list(range(16)))
    assert cpus == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert [(r["cpu_pin"], r["numa_node"]) for r in records] == [("numa", 0), ("numa", 0), ("numa", 1), ("numa", 1)]


def test_only_the_cores_a_rank_may_use_are_split(tmp_path, monkeypatch):
    """A job's cgroup of cores 2-7 and 8-11 (SLURM gave the job 10 cores, srun bound no task): node 0 offers 6,
    node 1 offers 4; 2 GPUs each."""
    sysfs = fake_sysfs(tmp_path, {0: "0-7", 1: "8-15"}, dict(zip(GPUS, (0, 0, 1, 1))))
    cpus, _ = pin_each(monkeypatch, sysfs, [2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    assert cpus == [[2, 3, 4], [5, 6, 7], [8, 9], [10, 11]]


def test_unknown_numa_nodes_split_the_cores_evenly(tmp_path, monkeypatch):
    sysfs = fake_sysfs(tmp_path, {0: "0-15"}, dict.fromkeys(GPUS, -1))  # one node: the kernel writes -1
    cpus, records = pin_each(monkeypatch, sysfs, list(range(16)))
    assert cpus == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert {(r["cpu_pin"], r["numa_node"]) for r in records} == {("split", None)}
    # 3 of 4 GPUs visible (a per-task GPU binding): no plan by node; 10 cores: 3, 3, 2, 2
    sysfs = fake_sysfs(tmp_path / "b", {0: "0-7", 1: "8-15"}, dict(zip(GPUS, (0, 0, 1, 1))))
    cpus, records = pin_each(monkeypatch, sysfs, list(range(10)), addresses=GPUS[:3])
    assert cpus == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert [r["cpu_pin"] for r in records] == ["split"] * 4 and records[0]["numa_node"] == 0


def test_hyperthreads_of_one_core_stay_with_one_rank(tmp_path, monkeypatch):
    """Node 0's cpulist "0-3,16-19": CPU k and k+16 are the two threads of one core; 2 GPUs there. An even split
    of the list would give one rank 0-3 and the other their siblings 16-19."""
    sysfs = fake_sysfs(tmp_path, {0: "0-3,16-19", 1: "4-7,20-23"}, dict(zip(GPUS, (0, 0, 1, 1))))
    for cpu in list(range(8)):
        for c in (cpu, cpu + 16):
            topology = tmp_path / f"devices/system/cpu/cpu{c}/topology"
            topology.mkdir(parents=True, exist_ok=True)
            (topology / "thread_siblings_list").write_text(f"{cpu},{cpu + 16}\n")
    cpus, _ = pin_each(monkeypatch, sysfs, [*range(8), *range(16, 24)])
    assert cpus == [[0, 1, 16, 17], [2, 3, 18, 19], [4, 5, 20, 21], [6, 7, 22, 23]]


def test_a_rank_the_launcher_bound_or_a_user_opted_out_is_left_alone(tmp_path, monkeypatch):
    sysfs = fake_sysfs(tmp_path, {0: "0-7", 1: "8-15"}, dict(zip(GPUS, (0, 0, 1, 1))))
    # srun --cpus-per-task=4 under task/affinity: each task sees its own 4 cores (here: all see 4-7)
    cpus, records = pin_each(monkeypatch, sysfs, [4, 5, 6, 7], threads=4)
    assert cpus == [[4, 5, 6, 7]] * 4 and [r["cpu_pin"] for r in records] == ["launcher"] * 4
    assert [r["numa_node"] for r in records] == [0, 0, 1, 1]  # recorded all the same
    # cores 4-7 are node 0's: near GPUs 0 and 1, across the socket link from GPUs 2 and 3 (srun's cyclic default)
    assert [r["near_gpu"] for r in records] == [True, True, False, False]
    _, records = pin_each(monkeypatch, sysfs, [7, 8], threads=2)  # straddling both nodes: near neither
    assert [r["near_gpu"] for r in records] == [False] * 4
    unknown = fake_sysfs(tmp_path / "u", {0: "0-15"}, dict.fromkeys(GPUS, -1))
    _, records = pin_each(monkeypatch, unknown, [4, 5, 6, 7], threads=4)
    assert [r["near_gpu"] for r in records] == [None] * 4  # sysfs does not say: no verdict
    cpus, records = pin_each(monkeypatch, sysfs, list(range(16)), environ={cores.ENV_NO_GPU_PIN: "1"})
    assert cpus == [list(range(16))] * 4 and [r["cpu_pin"] for r in records] == ["off"] * 4


def test_the_launcher_bound_a_rank_when_its_cores_hold_no_other_ranks_share():
    assert cores.launcher_bound([0, 1, 2, 3], 4, 4)  # --cpus-per-task=4, bound
    assert not cores.launcher_bound(list(range(16)), 4, 4)  # 4 ranks x 4 fit: nobody bound them
    assert cores.launcher_bound([0], 4, None)  # one core each, threads left to torch
    assert not cores.launcher_bound([0, 1, 2, 3], 4, None)
    assert cores.launcher_bound([0, 1, 2, 3], 1, 4) and not cores.launcher_bound(list(range(8)), 1, 4)


def test_gpu_ranks_sharing_cores_are_oversubscribed_only_when_their_threads_outnumber_them():
    def gpu(rank, affinity, threads):
        return {"rank": rank, "machine": "m", "device": f"cuda:{rank}", "cpu_affinity": affinity,
                "threads": threads}

    assert cores.shared_cores([gpu(0, [0, 1, 2, 3], 2), gpu(1, [0, 1, 2, 3], 2)]) is None  # 4 threads, 4 cores
    assert cores.sharing([gpu(0, [0, 1, 2, 3], 2), gpu(1, [0, 1, 2, 3], 2)]) == "ranks 0 and 1 shared core 0"
    assert cores.shared_cores([gpu(0, [0, 1, 2, 3], 3), gpu(1, [2, 3], 2)]) == (
        "oversubscribed: 2 ranks of one machine ran 5 threads on 4 core(s)")
    assert cores.sharing([gpu(0, [0, 1], 1), gpu(1, [2, 3], 1)]) is None
    cpu = [{**gpu(0, [0, 1], 1), "device": "cpu"}, {**gpu(1, [0, 1], 1), "device": "cpu"}]  # as before on CPU
    assert cores.shared_cores(cpu) == "oversubscribed: ranks 0 and 1 shared core 0"


def test_a_gpu_rank_finds_its_gpus_by_torchs_pci_ids_and_runs_no_more_threads_than_its_cores(tmp_path, monkeypatch):
    """train/prepare.py's side, torch's CUDA faked: 4 GPUs at buses 0x1b, 0x3b, 0x9a, 0xbc; local rank 2 on a 16-core
    node is given 8-11, and the 8 torch threads Lightning gave it before (16 cores // 2 ranks, say) drop to 4."""
    import types

    import torch

    from scalelab.train import prepare

    monkeypatch.setattr(cores, "SYSFS", fake_sysfs(tmp_path, {0: "0-7", 1: "8-15"}, dict(zip(GPUS, (0, 0, 1, 1)))))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(
        pci_domain_id=0, pci_bus_id=(0x1B, 0x3B, 0x9A, 0xBC)[i], pci_device_id=0))
    assert prepare.gpu_addresses(4) == GPUS
    monkeypatch.delenv(cores.ENV_NO_GPU_PIN, raising=False)
    threads = {"n": 8}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: threads.update(n=n))
    monkeypatch.setattr(cores, "affinity", lambda: list(range(16)))
    monkeypatch.setattr(cores.os, "sched_setaffinity", lambda pid, cpus: monkeypatch.setattr(
        cores, "affinity", lambda: sorted(cpus)), raising=False)
    assert prepare.pin_near_gpu(2, 4, None) == {"numa_node": 1, "cpu_pin": "numa"}
    assert cores.affinity() == [8, 9, 10, 11] and threads["n"] == 4
