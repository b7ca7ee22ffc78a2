"""src/selfcheck.py: each claim's verdict on constructed results (what a GPU run would record), and the whole
check on real CPU runs."""

import json

import pytest

from conftest import load_results, run_script
from scalelab import selfcheck
from test_results import make_result


def gpu_run(**launch):
    """A 2-node x 2-GPU training result as a GPU run records it."""
    r = make_result("g", 4, 2, model="transformer", precision="bf16-mixed")
    r["launch"].update(accelerator="gpu", backend="nccl", device_names=["NVIDIA A100-SXM4-40GB"], **launch)
    r["ranks"] = [{"rank": k, "host": f"n{k // 2}", "device": f"cuda:{k % 2}", "threads": 4, "machine": f"m{k // 2}",
                   "cpu_affinity": [4 * (k % 2) + c for c in range(4)], "step_times_s": [0.5, 0.4, 0.4],
                   "allreduce_s": [0.2, 0.3, 0.3], "epoch_times_s": [1.32]} for k in range(4)]
    r["timing"].update(mfu=0.41, peak_tflops=312.0)
    return r


def verdicts(run, bench=None, expect=None, log=None):
    return {v.claim: v for v in (selfcheck.each_rank_own_device(run), selfcheck.cores_per_rank(run),
                                 selfcheck.backend(run), selfcheck.nccl_transport(log, run),
                                 selfcheck.precision_ran(run), selfcheck.step_clocks_cover_the_loop(run),
                                 selfcheck.comm_on_one_clock(run), selfcheck.busbw(bench, expect),
                                 selfcheck.mfu(run))}


def test_a_healthy_gpu_run_passes_every_claim_it_can_show():
    bench = {"launch": {"world_size": 8, "num_nodes": 2}, "summary": {"large_msg_busbw_GBps": 21.3}}
    v = verdicts(gpu_run(), bench, expect=20, log="NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0")
    assert {k: x.status for k, x in v.items()} == {
        "each rank on its own GPU": "PASS", "cores per rank": "PASS", "process group backend": "PASS",
        "NCCL transport between nodes": "PASS", "bf16 training": "PASS", "step clocks cover the loop": "PASS",
        "all-reduce time within its step": "PASS", "all-reduce busbw": "PASS", "model FLOPs utilisation": "INFO"}
    assert v["all-reduce busbw"].figure == "21.3 GB/s of 20 expected, 8 ranks on 2 node(s)"
    assert v["model FLOPs utilisation"].figure == "41.0 % of 312 TFLOP/s"


def test_each_broken_claim_fails_with_its_reason():
    run = gpu_run(oversubscribed="oversubscribed: rank 0 ran 4 threads on 1 core(s)")
    run["ranks"][1]["device"] = "cuda:0"  # two ranks of node n0 on one GPU
    run["ranks"][2]["allreduce_s"][1] = 0.9  # busy longer than its 0.4 s step: intervals on two clocks
    run["ranks"][0]["epoch_times_s"] = [2.0]  # the loop took 2 s, the timed steps 1.3 s: a clock missed a sync
    bench = {"launch": {"world_size": 8, "num_nodes": 2}, "summary": {"large_msg_busbw_GBps": 3.1}}
    v = verdicts(run, bench, expect=20, log="NCCL INFO Channel 00 : 0[0] -> 2[0] [send] via NET/Socket/0")
    failed = {k for k, x in v.items() if x.status == "FAIL"}
    assert failed == {"each rank on its own GPU", "cores per rank", "NCCL transport between nodes",
                      "step clocks cover the loop", "all-reduce time within its step", "all-reduce busbw"}
    assert v["cores per rank"].note == "oversubscribed: rank 0 ran 4 threads on 1 core(s)"
    assert v["all-reduce time within its step"].figure == "at most 225 % of its step"
    assert "NCCL_IB_HCA" in v["NCCL transport between nodes"].note


def test_what_a_cpu_rehearsal_cannot_show_is_skipped_saying_why():
    run = make_result("c", 1) | {"ranks": [{"rank": 0, "host": "h", "device": "cpu", "threads": 1,
                                            "cpu_affinity": [0], "step_times_s": [0.1], "allreduce_s": [0.0],
                                            "epoch_times_s": [0.1]}]}
    v = verdicts(run)
    assert v["each rank on its own GPU"].status == "SKIP" and v["NCCL transport between nodes"].figure == "CPU run"
    assert v["all-reduce busbw"].note == "run src/allreduce_bench.py into the folder"
    assert v["bf16 training"].status == "SKIP" and v["model FLOPs utilisation"].status == "SKIP"
    assert v["model FLOPs utilisation"].note == "CPU, or a GPU without a known peak"
    run["timing"].update(peak_note="a MIG slice has a fraction of the card's peak")  # as a GPU run records it
    assert verdicts(run)["model FLOPs utilisation"].note == "a MIG slice has a fraction of the card's peak"


def test_no_training_result_is_one_line(tmp_path):
    proc = run_script("selfcheck.py", "--output_dir", tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"selfcheck.py: error: no completed training result in {tmp_path}: the self-check reads one")


@pytest.mark.slow
def test_selfcheck_on_real_cpu_runs(tmp_path):
    for cmd in (["train.py", "--model", "mlp", "--num_samples", "4096", "--max_epochs", "2", "--devices", 2],
                ["allreduce_bench.py", "--devices", 2, "--max_bytes", "2M", "--iters", 3]):
        proc = run_script(*cmd, "--output_dir", tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_script("selfcheck.py", "--output_dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    status = {line[6:].split("  ")[0]: line[:4].strip() for line in lines[:-1]}
    assert status == {"each rank on its own GPU": "SKIP", "cores per rank": "PASS", "process group backend": "PASS",
                      "NCCL transport between nodes": "SKIP", "bf16 training": "SKIP",
                      "memory estimate vs peak": "SKIP", "step clocks cover the loop": "PASS",
                      "all-reduce time within its step": "PASS", "all-reduce busbw": "INFO",
                      "model FLOPs utilisation": "SKIP"}
    assert lines[-1] == f"self-check: 0 FAIL, 4 PASS ({tmp_path})"
    saved = json.loads((tmp_path / "selfcheck.json").read_text())
    assert [v["status"] for v in saved] == [line[:4].strip() for line in lines[:-1]]
    assert len(load_results(tmp_path)) == 2  # the check adds no result.json the report would trip over


@pytest.mark.parametrize("peak, status", [(10.0e9, "PASS"), (8.8e9, "PASS"), (12.5e9, "FAIL"), (7.0e9, "FAIL")])
def test_the_memory_estimate_against_the_measured_peak(peak, status):
    run = gpu_run()
    run["memory"] = {"estimate_bytes": 10.0e9, "peak_allocated_bytes": peak}
    v = selfcheck.memory_estimate(run)
    assert v.status == status and v.figure.startswith(f"estimate 10.00 GB, peak {peak / 1e9:.2f} GB allocated")
    run["launch"]["accelerator"] = "cpu"
    assert selfcheck.memory_estimate(run).status == "SKIP"
