"""What the tests share, imported by name (`from helpers import run_script`): the repository's paths, running the
real entry scripts as a user would (in subprocesses), two gloo ranks, and constructed results. conftest.py keeps
only pytest's part (fixtures and hooks)."""

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
SLURM_CLUSTER = ROOT / "tests" / "slurm_cluster"
SLURM_STATE_DIR = os.environ.get("SCALELAB_SLURM_DIR", "/tmp/scalelab-slurm")
DOCS = ROOT / "docs"
sys.path.insert(0, str(SRC))

FAKE_SECRETS = {
    "WANDB_API_KEY": "wandb-fake-4f1c9e",
    "HF_TOKEN": "hf_fake_8d2b7a",
    "AWS_SECRET_ACCESS_KEY": "aws-fake-secret-77e1",
    "NCCL_FAKE_TOKEN": "nccl-fake-token-31aa",  # secret-looking even inside the NCCL_* allow-list
}


def run_script(script, *args, env=None, timeout=300, cwd=ROOT):
    """Run src/<script> with this interpreter; returns CompletedProcess (text)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, str(SRC / script), *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def two_reports_at_once(out, env=None) -> None:
    """benchmark.py twice over one folder at the same moment: both end well and print the same."""
    procs = [subprocess.Popen([sys.executable, str(SRC / "benchmark.py"), "--output_dir", str(out)], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
             for _ in range(2)]
    said = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs) and said[0][0] == said[1][0], said


def start(out, *args, env=None):
    """train.py running in the background (output_dir = out); read its pipes, or wait_for_banner()."""
    cmd = [sys.executable, str(SRC / "train.py"), *map(str, args), "--output_dir", str(out)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def wait_for_banner(proc, limit=120):
    """Until training is under way (the banner is printed just before fit)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("scalelab:"):
            return
        assert line, f"train.py ended before training started: {proc.communicate()[1][-2000:]}"
    raise AssertionError("no banner")


def two_gloo_ranks(target, timeout=180) -> list:
    """Run target(rank, queue) in two spawned processes joined by a gloo process group; [what each put]."""
    return gloo_ranks(target, 2, timeout)


def gloo_ranks(target, world: int, timeout=180) -> list:
    """two_gloo_ranks at `world` ranks: a rule that holds at 2 ranks may not at 3 (a part, a shift, a neighbour)."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_gloo_rank, args=(target, rank, port, out, world)) for rank in range(world)]
    for p in procs:
        p.start()
    got = [out.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return got


def _gloo_rank(target, rank, port, out, world=2):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        target(rank, out)
    finally:
        dist.destroy_process_group()


def load_results(folder, provisional=False):
    """Every result.json below folder, as JSON; without a run's provisional record (written as rank 0 claims its
    folder, replaced by whatever ends the run) unless asked: a test waiting for a run's record waits for its end."""
    found = [json.loads(p.read_text()) for p in sorted(Path(folder).rglob("result.json"))]
    return [r for r in found if provisional or r.get("provisional") is not True]


def make_result(run_id="r1", world=1, nodes=1, samples_per_s=100.0, model="mlp", status="completed", **workload):
    """A minimal valid training result, as the report reads it (the report's tests build on it)."""
    from scalelab import results

    data = results.envelope("training", run_id)
    data.update(
        status=status, error=None if status == "completed" else "boom",
        workload={"model": model, "batch_size": 64, "scaling": "weak", "precision": "32",
                  "describe": model, "params": 1000, "batch_per_device": 64, "global_batch": 64 * world,
                  **workload},
        launch={"launcher": "local", "world_size": world, "num_nodes": nodes, "devices": world // nodes,
                "accelerator": "cpu", "device_names": ["cpu"], "threads": 1},
        timing={"samples_per_s": samples_per_s, "tokens_per_s": None, "train_time_s": 1000 / samples_per_s,
                "step_s": {"median": 0.01}, "epoch_times_s": [1.0], "first_step_s": 3.0,
                "whole_run_s": 5.0},
        metrics={"train_loss": 0.5, "val_loss": 0.6, "val_acc": 0.9},
    )
    return data


# --- constructed pieces the report's tests share: a result's comm record, an all-reduce benchmark, a link ---
ROWS = [{"bytes": 1_000_000, "time_s": 0.002, "busbw_GBps": 0.5},
        {"bytes": 10_000_000, "time_s": 0.01, "busbw_GBps": 1.0}]


def _with_comm(result, compute_s, busy_s, exposed_s, step_s, grad_bytes=8_000_000, buckets=1):
    result["timing"]["step_s"] = {"median": step_s}
    result["timing"]["comm"] = {"compute_s": compute_s, "allreduce_s": busy_s, "waited_s": exposed_s,
                                "hidden_s": busy_s - exposed_s,
                                "hidden_fraction": (busy_s - exposed_s) / busy_s if busy_s else None,
                                "comm_share": exposed_s / step_s, "grad_bytes": grad_bytes, "buckets": buckets,
                                "ddp_busbw_GBps": None if not busy_s else grad_bytes / busy_s / 1e9}
    return result


def _bench(world, rows, nodes=1):
    from scalelab import results

    data = results.envelope("allreduce", f"ar{world}")
    data.update(status="completed", error=None, rows=rows, summary={"large_msg_busbw_GBps": rows[-1]["busbw_GBps"]},
                launch={"world_size": world, "num_nodes": nodes, "accelerator": "cpu", "backend": "gloo",
                        "device_names": ["cpu"]}, config={"dtype": "float32"})
    return data


def _emulated(result, gbit):
    result["launch"]["link"] = {"gbit": gbit, "emulated": True, "latency_ms": None, "latency_requested_ms": None}
    return result


def _bench_at(gbit, scale):
    from scalelab import results

    data = results.envelope("allreduce", f"ar-{gbit}")
    rows = [dict(r, time_s=r["time_s"] * scale, busbw_GBps=r["busbw_GBps"] / scale) for r in ROWS]
    data.update(status="completed", error=None, rows=rows, summary={"large_msg_busbw_GBps": rows[-1]["busbw_GBps"]},
                launch={"world_size": 2, "num_nodes": 2, "accelerator": "cpu", "backend": "gloo",
                        "device_names": ["cpu"], "link": {"gbit": gbit, "emulated": True, "latency_ms": None}},
                config={"dtype": "float32"})
    return data


def slurm_cannot_run_reason():
    """Why the local SLURM cluster cannot start on this machine (None: it can)."""
    if os.geteuid() != 0:
        return "the local SLURM cluster needs root (it installs slurm-wlm and starts daemons)"
    if not shutil.which("apt-get") and not shutil.which("slurmctld"):
        return "no apt-get and no slurmctld: not a Debian machine"
    return None


def slurm_cluster_running(state_dir=SLURM_STATE_DIR) -> bool:
    """The local cluster's slurmctld is up (its pid file names a live slurmctld)."""
    try:
        pid = int(open(os.path.join(state_dir, "slurmctld.pid")).read().strip())
        return open(f"/proc/{pid}/comm").read().strip() == "slurmctld"
    except (OSError, ValueError):
        return False


def sbatch_wait(env, script, *args, sbatch_args=(), timeout=600):
    """sbatch --wait from the repo root; returns (returncode, job id, job log text)."""
    log_dir = env["SCALELAB_TEST_LOGS"]
    cmd = ["sbatch", "--wait", "--parsable", f"--output={log_dir}/slurm-%j.out", *sbatch_args, str(script), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    job_id = proc.stdout.strip().split(";")[0].splitlines()[0] if proc.stdout.strip() else None
    log = ""
    if job_id and os.path.exists(f"{log_dir}/slurm-{job_id}.out"):
        log = open(f"{log_dir}/slurm-{job_id}.out").read()
    return proc.returncode, job_id, log + proc.stderr


def sacct_state(env, job_id, timeout=30):
    """The job's final state from accounting (sacct lags a little behind squeue: poll)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "--format=State"], env=env,
                             capture_output=True, text=True).stdout.strip()
        if out and out.split()[0] not in ("PENDING", "RUNNING", "COMPLETING"):
            return out.split()[0]
        time.sleep(1)
    return out


def _wait_for(what, check, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout} s")


# --- the chapters of docs/, run as a participant runs them (test_docs.py compares what they print; test_reframe.py
# reads what chapter 14's nightly ReFrame run left: one run for both, through conftest's `chapter_run`) ---
RUN_MARK = "<!-- docs-test: run -->"
SLURM_MARK = "<!-- docs-test: slurm -->"
LINKED = ("src", "slurm_jobs", "benchmarks", "tests", "reframe", "examples", "Makefile", "setup.cfg", "pyproject.toml")
# Variables a surrounding launcher may have set: a block must behave as on a participant's plain shell.
LAUNCHER_ENV = re.compile(r"^(SLURM_|SBATCH_|SCALELAB_|TORCHELASTIC_|PMI_|OMPI_)|^(RANK|LOCAL_RANK|WORLD_SIZE|"
                          r"LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|NODE_RANK|VIRTUAL_ENV)$")


def bash_blocks(path):
    """[(index, mark, first line number, text)] for every ```bash block of a chapter; mark is RUN_MARK,
    SLURM_MARK or None."""
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            prev = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, f"{path.name}:{i + 1}: ```bash block never closed"
            mark = prev if prev in (RUN_MARK, SLURM_MARK) else None
            blocks.append((len(blocks) + 1, mark, i + 1, "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return blocks


def workshop(folder) -> dict:
    """Make `folder` a participant's checkout after `make`: the repository's code, an empty outputs/, and this
    interpreter as `python` and as `.venv/bin/python`; returns the environment of a plain shell there."""
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    (folder / "outputs").mkdir()  # in git (its README): the job headers write slurm-<id>.out there
    venv_python = folder / ".venv" / "bin" / "python"  # as after `make`: site.sh and the jobs run it
    venv_python.parent.mkdir(parents=True)
    # A script, not a symlink: Python finds its venv from the path it is started by, and a link in a folder
    # without pyvenv.cfg would start the bare base interpreter (no torch) in every SLURM job.
    venv_python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    venv_python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not LAUNCHER_ENV.search(k)}
    env.update(PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""), PYTHONUNBUFFERED="1")
    return env


def run_chapter(chapter, mark, folder, env) -> list:
    """Run the chapter's blocks with that mark, in order, in one folder (a later block may read what an earlier one
    wrote), with `bash -euo pipefail`; [(index, first line number, text, CompletedProcess with stdout and stderr
    together)], up to the first block that exits non-zero."""
    ran = []
    for n, block_mark, line, text in bash_blocks(chapter):
        if block_mark != mark:
            continue
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=folder, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=420)
        ran.append((n, line, text, proc))
        if proc.returncode:
            break
    return ran


def squeue(env):
    return subprocess.run(["squeue", "-h", "-o", "%i %j %T"], env=env, capture_output=True, text=True).stdout


def drained(env, timeout=120) -> str:
    """Wait until the cluster's queue is empty (a block that left a job behind must not hand it to the next test);
    what is still queued after `timeout` s."""
    deadline = time.time() + timeout
    while squeue(env) and time.time() < deadline:
        time.sleep(2)
    return squeue(env)
