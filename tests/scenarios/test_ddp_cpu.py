"""Real DDP on CPU: the entry script in real processes (rank 0 starting rank 1, and torchrun), checked via its files."""

import os
import shutil
import subprocess
import sys

import pytest

from helpers import FAKE_SECRETS, ROOT, SRC, load_results, run_script
from scalelab.report import frames

pytestmark = pytest.mark.slow
MLP = ["--model", "mlp", "--num_samples", "4096", "--max_epochs", "2", "--warmup_steps", "3", "--timeout", "60"]


@pytest.fixture(scope="module")
def mlp_runs(tmp_path_factory):
    """The same MLP job at 1 and 2 processes, with fake secrets in the environment."""
    out = tmp_path_factory.mktemp("outputs")
    for n in (1, 2):
        proc = run_script("train.py", *MLP, "--devices", n, "--output_dir", out, env=FAKE_SECRETS)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out, {r["launch"]["world_size"]: r for r in load_results(out)}


def test_two_process_result_has_every_rank_and_excludes_warmup(mlp_runs):
    _, by_world = mlp_runs
    r = by_world[2]
    assert r["status"] == "completed" and r["launch"]["world_size"] == 2 and r["launch"]["backend"] == "gloo"
    assert [k["rank"] for k in r["ranks"]] == [0, 1]
    steps_per_epoch = 4096 // 2 // 64
    t = r["timing"]
    probes = r["ranks"][0]["probe_steps"]  # every 5th step after warm-up: compute-only, never in throughput
    assert probes == list(range(3 + 4, t["steps"], 5)) and t["comm"]["probe_steps"] == len(probes)
    assert t["steps"] == 2 * steps_per_epoch and t["timed_steps"] == t["steps"] - 3 - len(probes)
    for rank in r["ranks"]:
        assert len(rank["step_times_s"]) == t["steps"] and all(s > 0 for s in rank["step_times_s"])
        assert rank["threads"] == 1  # one CPU device = one core, at 1 and at 2 devices
    # each rank pinned to a core of its own (where the machine has two), and the launch says none were shared
    cores = [tuple(k["cpu_affinity"]) for k in r["ranks"]]
    assert all(len(c) == 1 for c in cores) and (len(set(cores)) == 2 or len(os.sched_getaffinity(0)) < 2)
    assert r["launch"]["threads"] == 1 and r["launch"].get("oversubscribed") is None  # null: left out
    # train time = the ranks' mean step time, summed over the timed (post-warm-up, non-probe) steps only
    expected = sum(sum(k["step_times_s"][i] for k in r["ranks"]) / 2 for i in range(3, t["steps"]) if i not in probes)
    assert t["train_time_s"] == pytest.approx(expected)
    assert t["samples_per_s"] == pytest.approx(t["timed_steps"] * 128 / t["train_time_s"])
    assert 0 < t["first_step_s"] < t["whole_run_s"]
    assert len(t["epoch_times_s"]) == 2
    assert 0 <= r["metrics"]["val_acc"] <= 1 and r["metrics"]["train_loss"] > 0
    assert r["versions"]["torch"] and r["versions"]["lightning"]


def test_no_secret_reaches_any_file(mlp_runs):
    out, _ = mlp_runs
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            for name, value in FAKE_SECRETS.items():
                assert value not in text and name not in text, f"{name} leaked into {path}"


def test_report_on_real_runs(mlp_runs):
    out, by_world = mlp_runs
    runs = frames.runs_frame(load_results(out))
    scaling = frames.scaling_frame(runs)
    assert runs["group"].nunique() == 1  # 1 and 2 processes of the identical job form one group
    row = scaling.set_index("world_size").loc[2]
    thr = {n: by_world[n]["timing"]["samples_per_s"] for n in (1, 2)}
    assert row["speedup"] == pytest.approx(thr[2] / thr[1])
    assert row["efficiency"] == pytest.approx(row["speedup"] / 2)
    proc = run_script("benchmark.py", "--output_dir", out, "--details")  # the step table: --details
    assert proc.returncode == 0 and "Scaling (baseline: 1 device" in proc.stdout and "CPU rehearsal" in proc.stdout
    c = by_world[2]["timing"]["comm"]  # a real 2-process run measured its gradient all-reduce
    assert c["compute_s"] > 0 and c["allreduce_s"] > 0 and c["buckets"] >= 1 and c["ddp_busbw_GBps"] > 0
    assert c["grad_bytes"] == by_world[2]["workload"]["params"] * 4
    # the same buckets all-reduced alone in the probe steps, one figure per probe on every rank
    assert sum(c["bucket_bytes"]) >= c["grad_bytes"] and c["allreduce_alone_s"] > 0
    assert all(len(k["allreduce_alone_times_s"]) == len(k["probe_steps"]) for k in by_world[2]["ranks"])
    assert by_world[1]["timing"]["comm"].get("allreduce_alone_s") is None  # one process: nothing to all-reduce
    assert "alone ms" in proc.stdout
    assert "Where the step goes" in proc.stdout and "2 devices on 1 node: efficiency" in proc.stdout


@pytest.mark.skipif(shutil.which("torchrun") is None
                    and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "torchrun")),
                    reason="torchrun not installed")
def test_gpt_under_torchrun(tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [torchrun, "--nproc_per_node", "2", "--master_port", "29531", str(SRC / "train.py"), "--model", "gpt",
           "--max_steps", "6", "--warmup_steps", "2", "--output_dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r,) = load_results(tmp_path)
    assert r["launch"]["launcher"] == "torchrun" and r["launch"]["world_size"] == 2
    assert r["timing"]["tokens_per_s"] == pytest.approx(r["timing"]["samples_per_s"] * 128)
    assert r["workload"]["params"] == 3323392  # the tiny preset's analytic count matches the built model
