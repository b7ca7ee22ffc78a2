"""src/selfcheck.py: each claim's verdict on constructed results (what a GPU run would record), and the whole
check on real CPU runs."""

import json
import os
import subprocess

import pytest

from helpers import ROOT, load_results, make_result, run_script
from scalelab import selfcheck
from scalelab.launch import cores


def gpu_run(**launch):
    """A 2-node x 2-GPU training result as a GPU run records it."""
    r = make_result("g", 4, 2, model="gpt", precision="bf16-mixed")
    r["launch"].update(accelerator="gpu", backend="nccl", device_names=["NVIDIA A100-SXM4-40GB"], **launch)
    r["ranks"] = [{"rank": k, "host": f"n{k // 2}", "device": f"cuda:{k % 2}", "threads": 4, "machine": f"m{k // 2}",
                   "gpu_uuid": f"GPU-{k}a2f0c1e-0000-4000-8000-00000000000{k}", "backend": "nccl",
                   "cpu_affinity": [4 * (k % 2) + c for c in range(4)], "step_times_s": [0.5, 0.4, 0.4],
                   "allreduce_times_s": [0.2, 0.3, 0.3], "epoch_times_s": [1.3], "loop_wall_s": 1.32} for k in range(4)]
    r["timing"].update(mfu=0.41, peak_tflops=312.0)
    r["fingerprint"] = dict(BF16, same_on_ranks=True)
    return r


BF16 = {"matmul_dtypes": ["bfloat16"], "attention": ["_scaled_dot_product_flash_attention"], "optimizer": "fused",
        "param_dtypes": ["float32"], "grad_dtypes": ["float32"], "compiled_graphs": 0, "wire": {}}


def one_gpu(matmuls=("bfloat16",)):
    """The 1-GPU run of the same job (gpu_selfcheck.sh runs it before the N-GPU one)."""
    r = make_result("g1", 1, 1, model="gpt", precision="bf16-mixed")
    r["launch"].update(accelerator="gpu", backend=None, device_names=["NVIDIA A100-SXM4-40GB"])
    r["fingerprint"] = dict(BF16, matmul_dtypes=list(matmuls), same_on_ranks=True)
    return r


def verdicts(run, bench=None, expect=None, log=None, single="same"):
    single = one_gpu() if single == "same" else single
    both = [r for r in (single, run) if r is not None]
    return {v.claim: v for v in (selfcheck.each_rank_own_device(run), selfcheck.cores_per_rank(run),
                                 selfcheck.backend(run), selfcheck.nccl_transport(log, run),
                                 selfcheck.precision_ran(both), selfcheck.same_job(single, run),
                                 selfcheck.step_clocks_cover_the_loop(run), selfcheck.comm_on_one_clock(run),
                                 selfcheck.busbw(bench, expect), selfcheck.mfu(run))}


def test_a_healthy_gpu_run_passes_every_claim_it_can_show():
    bench = {"launch": {"world_size": 8, "num_nodes": 2}, "summary": {"large_msg_busbw_GBps": 21.3}}
    v = verdicts(gpu_run(), bench, expect=20, log="NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0")
    assert {k: x.status for k, x in v.items()} == {
        "each rank on its own GPU": "PASS", "cores per rank": "PASS", "process group backend": "PASS",
        "NCCL transport between nodes": "PASS", "precision as asked": "PASS", "same job at 1 and N devices": "PASS",
        "step clocks cover the loop": "PASS", "all-reduce time within its step": "PASS", "all-reduce busbw": "PASS",
        "model FLOPs utilisation": "INFO"}
    assert v["precision as asked"].figure == ("1 GPU: bfloat16 matmuls (bf16-mixed); 4 GPUs: bfloat16 matmuls "
                                              "(bf16-mixed)")
    assert v["same job at 1 and N devices"].figure == ("1 and 4 GPUs: bfloat16 matmuls, fused optimizer, attention "
                                                       "_scaled_dot_product_flash_attention")
    assert v["all-reduce busbw"].figure == "21.3 GB/s of 20 expected, 8 ranks on 2 node(s)"
    assert v["model FLOPs utilisation"].figure == "41.0 % of 312 TFLOP/s"


def test_each_broken_claim_fails_with_its_reason():
    run = gpu_run(oversubscribed="oversubscribed: rank 0 ran 4 threads on 1 core(s)")
    run["ranks"][1]["gpu_uuid"] = run["ranks"][0]["gpu_uuid"]  # ranks 0 and 1 on one GPU, though cuda:0 and cuda:1
    run["ranks"][2]["allreduce_times_s"][1] = 0.9  # busy longer than its 0.4 s step: intervals on two clocks
    run["ranks"][0]["loop_wall_s"] = 2.0  # the loop took 2 s on the host clock, the timed steps 1.3 s
    bench = {"launch": {"world_size": 8, "num_nodes": 2}, "summary": {"large_msg_busbw_GBps": 3.1}}
    v = verdicts(run, bench, expect=20, log="NCCL INFO Channel 00 : 0[0] -> 2[0] [send] via NET/Socket/0")
    failed = {k for k, x in v.items() if x.status == "FAIL"}
    assert failed == {"each rank on its own GPU", "cores per rank", "NCCL transport between nodes",
                      "step clocks cover the loop", "all-reduce time within its step", "all-reduce busbw"}
    assert v["each rank on its own GPU"].figure == ("4 rank(s) on 3 GPU(s): ranks 0, 1 on "
                                                    "GPU-0a2f0c1e-0000-4000-8000-000000000000")
    # |2.0 - (0.5 + 0.4 + 0.4)| / 2.0 = 35 %
    assert v["step clocks cover the loop"].figure == "rank 0: steps 1.30 s of 2.00 s on the host clock (35.0 % apart)"
    assert v["cores per rank"].note == "oversubscribed: rank 0 ran 4 threads on 1 core(s)"
    assert v["all-reduce time within its step"].figure == "at most 225 % of its step"
    assert "NCCL_IB_HCA" in v["NCCL transport between nodes"].note


def test_ranks_the_launcher_bound_across_the_socket_link_from_their_gpus_fail():
    """SLURM's default cyclic distribution deals tasks across the sockets: rank 1's cores on node 1, its GPU on 0."""
    run = gpu_run()
    for r in run["ranks"]:
        r.update(cpu_pin="launcher", numa_node=0, near_gpu=r["rank"] % 2 == 0)
    v = selfcheck.cores_per_rank(run)
    assert (v.status, v.figure) == ("FAIL", "≥ 4 core(s), 4 thread(s); rank 1 on cores 4-7, its GPU on NUMA node 0 "
                                            "(2 ranks off their GPU's node)")
    assert "--distribution=block:block" in v.note
    for r in run["ranks"]:
        r["near_gpu"] = None  # sysfs did not say: no verdict of its own
    assert selfcheck.cores_per_rank(run).status == "PASS"


def test_gpu_ranks_left_on_shared_cores_are_said_to_share_not_failed():
    """Unpinned GPU ranks (SCALELAB_NO_GPU_PIN=1, on a site whose srun binds nothing) each see their node's 16 cores;
    2 ranks x 4 threads fit in 16, so the result is not marked oversubscribed and the claim says they shared."""
    run = gpu_run()
    for r in run["ranks"]:
        r.update(cpu_affinity=list(range(16)), cpu_pin="off")
    run["launch"]["oversubscribed"] = cores.shared_cores(run["ranks"])  # as the result records it
    v = selfcheck.cores_per_rank(run)
    assert (v.status, v.figure) == ("INFO", "≥ 16 core(s), 4 thread(s); shared, not pinned: ranks 0 and 1 shared "
                                            "core 0")
    assert v.note == "SCALELAB_NO_GPU_PIN=1 left the ranks unpinned"
    for r in run["ranks"]:
        r.update(threads=12)  # 2 x 12 threads on 16 cores: contention after all
    run["launch"]["oversubscribed"] = cores.shared_cores(run["ranks"])
    v = selfcheck.cores_per_rank(run)
    assert (v.status, v.note) == ("FAIL", "oversubscribed: 2 ranks of one machine ran 24 threads on 16 core(s)")


def test_what_a_cpu_rehearsal_cannot_show_is_skipped_saying_why():
    run = make_result("c", 1) | {"ranks": [{"rank": 0, "host": "h", "device": "cpu", "threads": 1,
                                            "cpu_affinity": [0], "step_times_s": [0.1], "allreduce_times_s": [0.0],
                                            "epoch_times_s": [0.1], "gpu_uuid": None, "backend": None,
                                            "loop_wall_s": 0.1}]}
    v = verdicts(run)
    assert v["each rank on its own GPU"].status == "SKIP" and v["NCCL transport between nodes"].figure == "CPU run"
    assert v["all-reduce busbw"].note == "run src/allreduce_bench.py into the folder"
    assert v["model FLOPs utilisation"].status == "SKIP"
    assert v["model FLOPs utilisation"].note == "CPU, or a GPU without a known peak"
    run["timing"].update(peak_note="a MIG slice has a fraction of the card's peak")  # as a GPU run records it
    assert verdicts(run)["model FLOPs utilisation"].note == "a MIG slice has a fraction of the card's peak"


def test_no_training_result_is_one_line(tmp_path):
    proc = run_script("selfcheck.py", "--output_dir", tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"selfcheck.py: error: no completed training result in {tmp_path}: the self-check reads one")


@pytest.mark.slow
def test_selfcheck_on_real_cpu_runs(tmp_path):
    mlp = ["train.py", "--model", "mlp", "--num_samples", "4096", "--max_epochs", "2"]
    for cmd in ([*mlp, "--devices", 1], [*mlp, "--devices", 2],
                ["allreduce_bench.py", "--devices", 2, "--max_bytes", "2M", "--iters", 3]):
        proc = run_script(*cmd, "--output_dir", tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_script("selfcheck.py", "--output_dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    status = {line[6:].split("  ")[0]: line[:4].strip() for line in lines[:-1]}
    assert status == {"each rank on its own GPU": "SKIP", "cores per rank": "PASS", "process group backend": "PASS",
                      "NCCL transport between nodes": "SKIP", "precision as asked": "PASS",
                      "same job at 1 and N devices": "PASS", "memory estimate vs peak": "SKIP",
                      "step clocks cover the loop": "PASS", "all-reduce time within its step": "PASS",
                      "all-reduce busbw": "INFO", "one all-reduce algorithm": "SKIP",
                      "requeue checkpoint in SIGUSR1's lead": "PASS",
                      "model FLOPs utilisation": "SKIP", "device sampler": "SKIP"}
    assert lines[-1] == f"self-check: 0 FAIL, 7 PASS ({tmp_path})"
    saved = json.loads((tmp_path / "selfcheck.json").read_text())
    assert [v["status"] for v in saved] == [line[:4].strip() for line in lines[:-1]]
    assert len(load_results(tmp_path)) == 3  # the check adds no result.json the report would trip over
    (train,) = [r for r in load_results(tmp_path) if r["kind"] == "training" and r["launch"]["world_size"] == 2]
    for r in train["ranks"]:  # what the claims read: as torch ran it, and the loop on the host clock
        assert r["backend"] == "gloo" and r["gpu_uuid"] is None
        d = r["devices"]  # each rank's cores busy over the timed window, from the kernel's count of its CPU time
        assert d["source"] == "cpu" and 0.2 < d["cpu_cores_busy"] <= d["cpu_cores"] * 1.05 and d["window_s"] > 0
        assert d["energy_J"] is None and "RAPL" in d["note"]
        assert sum(r["step_times_s"]) <= r["loop_wall_s"] <= 1.05 * sum(r["step_times_s"]), r["loop_wall_s"]
    devices = train["timing"]["devices"]
    assert devices["cores_busy_min"] <= devices["cores_busy_max"] and devices.get("energy_per_1k_samples_J") is None


@pytest.mark.parametrize("peak, status", [(10.0e9, "PASS"), (8.8e9, "PASS"), (12.5e9, "FAIL"), (7.0e9, "FAIL")])
def test_the_memory_estimate_against_the_measured_peak(peak, status):
    run, single = gpu_run(), one_gpu()
    run["memory"] = {"estimate_bytes": 10.0e9, "peak_allocated_bytes": peak}
    single["memory"] = {"estimate_bytes": 6.0e9, "peak_allocated_bytes": 6.1e9}
    v = selfcheck.memory_estimate([single, run])
    assert v.status == status and v.figure == (f"1 GPU: estimate 6.00 GB, peak 6.10 GB allocated (-2 %); 4 GPUs: "
                                               f"estimate 10.00 GB, peak {peak / 1e9:.2f} GB allocated "
                                               f"({(10 / (peak / 1e9) - 1) * 100:+.0f} %)")
    single["memory"]["peak_allocated_bytes"] = 9.0e9  # the baseline's estimate off alone fails the claim too
    assert selfcheck.memory_estimate([single, run]).status == "FAIL"
    run["launch"]["accelerator"] = single["launch"]["accelerator"] = "cpu"
    assert selfcheck.memory_estimate([single, run]).status == "SKIP"


def test_a_1_gpu_fp32_baseline_beside_n_gpu_bf16_runs_fails_precision_and_same_job():
    """What the first GPU sweep would have met: the 1-GPU step ran without autocast (lightning#16857)."""
    v = verdicts(gpu_run(), single=one_gpu(["float32"]))
    assert v["precision as asked"].status == "FAIL" and v["same job at 1 and N devices"].status == "FAIL"
    assert v["precision as asked"].figure == "1 GPU: float32 matmuls under bf16-mixed"
    assert v["same job at 1 and N devices"].figure == "4 GPUs against 1: matmuls bfloat16, baseline float32"


def test_same_job_fails_without_a_baseline_or_a_fingerprint_or_with_ranks_that_disagree():
    assert verdicts(gpu_run(), single=None)["same job at 1 and N devices"].figure == (
        "no 1-device run of this workload beside the 4 GPUs one")
    old = one_gpu()
    del old["fingerprint"]
    v = verdicts(gpu_run(), single=old)
    assert (v["same job at 1 and N devices"].status, v["same job at 1 and N devices"].figure) == ("FAIL",
                                                                                                  "not recorded")
    assert v["precision as asked"].figure == "1 GPU: nothing observed (a result from an older scalelab)"
    split = gpu_run()
    split["fingerprint"]["same_on_ranks"] = False
    assert verdicts(split)["same job at 1 and N devices"].figure == (
        "4 GPUs against 1: the ranks of one run saw different steps")
    assert selfcheck.same_job(one_gpu(), one_gpu()).figure == "no multi-device run"
    lost = gpu_run()
    lost["metrics"]["train_loss"] = float("nan")
    assert verdicts(lost)["precision as asked"].figure == "4 GPUs: the final loss is nan"


def test_ranks_bound_to_one_gpu_each_all_say_cuda_0_and_pass_by_their_uuids():
    """Under CUDA_VISIBLE_DEVICES binding (--gpus-per-task) every rank sees its GPU as cuda:0: the slot names
    cannot tell one GPU from four, the UUIDs can."""
    run = gpu_run()
    for r in run["ranks"]:
        r["device"] = "cuda:0"
    v = selfcheck.each_rank_own_device(run)
    assert (v.status, v.figure) == ("PASS", "4 rank(s) on 4 GPU(s)")
    for r in run["ranks"]:
        r["gpu_uuid"] = "GPU-5e1d0c4b-1111-4000-8000-000000000001"  # one physical GPU for all four
    v = selfcheck.each_rank_own_device(run)
    assert v.status == "FAIL" and v.figure.endswith("ranks 0, 1, 2, 3 on GPU-5e1d0c4b-1111-4000-8000-000000000001")
    del run["ranks"][2]["gpu_uuid"]  # a result from before the UUID was recorded: no verdict, not a PASS
    assert selfcheck.each_rank_own_device(run).status == "SKIP"


@pytest.mark.parametrize("backends, status, figure", [
    (["nccl"] * 4, "PASS", "nccl on 4 ranks"),
    (["cpu:gloo,cuda:nccl"] * 4, "PASS", "cpu:gloo,cuda:nccl on 4 ranks"),  # torch's default for a CUDA group
    (["gloo"] * 4, "FAIL", "rank 0: gloo on cuda:0; rank 1: gloo on cuda:1; rank 2: gloo on cuda:0; "
                           "rank 3: gloo on cuda:1"),
    (["nccl", "nccl", "nccl", "gloo"], "FAIL", "rank 3: gloo on cuda:1"),
])
def test_the_backend_torch_ran_is_held_against_the_device_each_rank_used(backends, status, figure):
    """The launch says nccl whatever ran (it derives it from the accelerator): the ranks' own backends decide."""
    run = gpu_run()
    for r, b in zip(run["ranks"], backends):
        r["backend"] = b
    v = selfcheck.backend(run)
    assert (v.status, v.figure) == (status, figure) and run["launch"]["backend"] == "nccl"


@pytest.mark.parametrize("wall, status", [(1.3, "PASS"), (1.36, "PASS"), (1.38, "FAIL"), (2.6, "FAIL")])
def test_the_timed_steps_against_the_host_interval_around_the_loop(wall, status):
    """Steps sum to 1.3 s; the loop's own host interval 1.36 s is 4.4 % more (passes), 1.38 s 5.8 % (fails), and
    2.6 s is what unsynchronised marks (launch times, not work) would leave: half the loop unaccounted for."""
    run = gpu_run()
    run["ranks"][3]["loop_wall_s"] = wall
    v = selfcheck.step_clocks_cover_the_loop(run)
    assert v.status == status
    if status == "FAIL":
        assert v.figure.startswith("rank 3: steps 1.30 s of ")
    del run["ranks"][0]["loop_wall_s"]
    assert selfcheck.step_clocks_cover_the_loop(run).status == "SKIP"


# NCCL_DEBUG=INFO lines as NCCL and its plugins print them (one rank's share of each kind of log)
IB_LOG = """node1:12:12 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.1<0>
node1:12:12 [0] NCCL INFO Using network IB
node1:12:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0/GDRDMA
"""
SLINGSHOT_LOG = """nid001:88:88 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.9.2
nid001:88:88 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)
nid001:88:88 [0] NCCL INFO Using network AWS Libfabric
nid001:88:97 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/AWS Libfabric/0/GDRDMA
"""
EFA_LOG = """ip-10-0-0-1:7:7 [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)
ip-10-0-0-1:7:7 [0] NCCL INFO Using network Libfabric
ip-10-0-0-1:7:30 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/Libfabric/0/GDRDMA
"""
SOCKET_LOG = """node1:12:12 [0] NCCL INFO NET/IB : No device found.
node1:12:12 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
node1:12:12 [0] NCCL INFO Using network Socket
node1:12:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/Socket/0
"""


@pytest.mark.parametrize("log, status, figure", [
    (IB_LOG, "PASS", "NET/IB"),
    (SLINGSHOT_LOG, "PASS", "NET/OFI (provider cxi)"),
    (EFA_LOG, "PASS", "NET/OFI (provider efa)"),
    (SOCKET_LOG, "FAIL", "NET/Socket"),  # "NET/IB" is in it too: IB was tried and found nothing
    ("NCCL INFO NET/OFI Selected Provider is efa\nNCCL INFO NET/Socket : Using [0]eth0\n", "PASS",
     "NET/OFI (provider efa)"),  # no "Using network" line: what came up; sockets only when nothing else did
    ("NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n", "FAIL", "not found in the log"),
])
def test_nccl_transport_read_from_the_log(log, status, figure):
    v = selfcheck.nccl_transport(log, gpu_run())
    assert (v.status, v.figure) == (status, figure)


def _fake_tools(tmp_path, srun_rc):
    """srun, scontrol and a Python that only note their arguments (srun exits srun_rc): the job script's flow."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    for name, rc in (("srun", srun_rc), ("python", 0), ("scontrol", 0)):
        (bin_dir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {calls}\nexit {rc}\n')
        (bin_dir / name).chmod(0o755)
    # a cluster that binds tasks (scontrol show config's line; the local cluster's is task/none)
    (bin_dir / "scontrol").write_text(f'#!/bin/bash\necho "scontrol $*" >> {calls}\n[ "$1 $2" = "show config" ] && '
                                      'echo "TaskPlugin              = ${FAKE_TASK_PLUGIN:-task/affinity,task/cgroup}"'
                                      '\nexit 0\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCALELAB_"))}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", SLURM_SUBMIT_DIR=str(ROOT), SCALELAB_PYTHON=str(bin_dir / "python"),
               VIRTUAL_ENV=str(tmp_path), SCALELAB_PROFILE="cpu", OUTPUT_DIR=str(tmp_path), SLURM_JOB_ID="77")
    return env, calls


@pytest.mark.parametrize("srun_rc", [0, 1])
def test_gpu_selfcheck_job_runs_the_benchmark_first_and_every_step_after_a_failure(tmp_path, srun_rc):
    env, calls = _fake_tools(tmp_path, srun_rc)
    proc = subprocess.run(["bash", "slurm_jobs/gpu_selfcheck.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    ran = [line.split()[:1] + [w for w in line.split() if w.startswith("src/")] for line in
           calls.read_text().splitlines() if not line.startswith("scontrol")]
    assert ran == [["srun", "src/allreduce_bench.py"], ["srun", "src/train.py"], ["srun", "src/train.py"],
                   ["python", "src/selfcheck.py"]]
    one, every = [line.split() for line in calls.read_text().splitlines() if "src/train.py" in line]
    assert "--ntasks=1" in one and one[one.index("--devices") + 1] == "1" and "--ntasks=1" not in every
    # each rank's cores in order, beside its GPU: srun's default (block:cyclic) deals a node's tasks round its sockets
    # and, where the site binds tasks, the self-check's cores claim fails the shipped scripts
    for line in calls.read_text().splitlines():
        if line.startswith("srun"):
            assert {"--cpu-bind=cores", "--distribution=block:block"} <= set(line.split()), line
    calls.write_text("")  # a cluster that binds no task (task/none): srun would only complain, so nothing is asked
    subprocess.run(["bash", "slurm_jobs/gpu_selfcheck.sh"], cwd=ROOT, env={**env, "FAKE_TASK_PLUGIN": "task/none"},
                   capture_output=True, timeout=60)
    sruns = [line for line in calls.read_text().splitlines() if line.startswith("srun")]
    assert len(sruns) == 3 and not any("--cpu-bind" in line or "--distribution" in line for line in sruns)
    if srun_rc:
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines()[-1] == (
            "gpu_selfcheck: 3 step(s) failed: allreduce_bench (exit 1), train_1gpu (exit 1), train (exit 1)")
    else:
        assert proc.returncode == 0, proc.stderr


def test_on_gpus_the_self_checks_runs_are_long_enough_for_its_energy_claim_and_a_users_length_wins(tmp_path):
    """NVML's power is a 1-s average on Ampere and newer: the GPU runs get SELFCHECK_STEPS (400) steps, seconds on
    an H100, before the user's flags (argparse: the last --max_steps wins); a CPU rehearsal keeps its config's."""
    env, calls = _fake_tools(tmp_path, 0)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text('#!/bin/bash\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"\nexit 0\n')
    smi.chmod(0o755)
    env.update(SCALELAB_PROFILE="auto")
    for args, want in (([], "400"), (["--max_steps", "90"], "90")):
        calls.write_text("")
        proc = subprocess.run(["bash", "slurm_jobs/gpu_selfcheck.sh", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        trains = [line.split() for line in calls.read_text().splitlines() if "src/train.py" in line]
        assert proc.returncode == 0 and len(trains) == 2, proc.stderr
        for words in trains:
            last = len(words) - 1 - words[::-1].index("--max_steps")  # the one train.py keeps
            assert words[last + 1] == want, words
    env.update(SCALELAB_PROFILE="cpu")  # a CPU rehearsal: the config's own length
    calls.write_text("")
    subprocess.run(["bash", "slurm_jobs/gpu_selfcheck.sh"], cwd=ROOT, env=env, capture_output=True, timeout=60)
    assert "--max_steps" not in calls.read_text()


def test_the_requeue_checkpoint_against_what_sigusr1s_lead_leaves(tmp_path):
    """xl's 1.3 billion parameters: a 15.8 GB checkpoint. At 1 GB/s it takes 16 s of the 60 s the 90 s lead leaves;
    at 0.2 GB/s 79 s: the time limit cuts the save short and the requeue is lost."""
    from scalelab.train.guard import requeue

    xl = gpu_run()
    xl["workload"].update(params=1_315_823_616, trainable_params=1_315_823_616)
    v = selfcheck.requeue_checkpoint(xl, 1e9)
    assert (v.status, v.figure) == ("PASS", "15.8 GB at 1 GB/s: 15.8 s of the 60 s a 90 s lead leaves")
    v = selfcheck.requeue_checkpoint(xl, 0.2e9)
    assert v.status == "FAIL" and v.figure.startswith("15.8 GB at 0.2 GB/s: 78.9 s") and "SIGUSR1@N" in v.note
    xl["workload"]["trainable_params"] = 8_000_000  # LoRA: AdamW's moments for the adapters only
    assert requeue.checkpoint_bytes(1_315_823_616, 8_000_000) == 4 * 1_315_823_616 + 64_000_000
    assert selfcheck.requeue_checkpoint(xl, 0.2e9).status == "PASS"
    full = selfcheck.requeue_checkpoint(xl, "No space left on device")
    assert (full.status, full.figure) == ("FAIL", "cannot write to the output folder (No space left on device)")
    del xl["workload"]["params"]
    assert selfcheck.requeue_checkpoint(xl, 1e9).status == "SKIP"
    rate = selfcheck.write_rate(str(tmp_path), 16 * 2**20)  # the probe: a real write, fsync'd, then removed
    assert rate > 0 and list(tmp_path.iterdir()) == []
    assert requeue.LEAD_S == 90 and requeue.SAVE_BUDGET_S < requeue.LEAD_S
    for script in ("single_gpu.sh", "single_node_multi_gpu.sh", "multi_node_multi_gpu.sh"):  # the lead they ask
        assert f"#SBATCH --signal=SIGUSR1@{requeue.LEAD_S}\n" in (ROOT / "slurm_jobs" / script).read_text()
