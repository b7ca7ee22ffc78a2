"""Shared helpers: run the real entry scripts as a user would, in subprocesses."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
SLURM_CLUSTER = ROOT / "tests" / "slurm_cluster"
SLURM_STATE_DIR = os.environ.get("SCALELAB_SLURM_DIR", "/tmp/scalelab-slurm")
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
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_gloo_rank, args=(target, rank, port, out)) for rank in range(2)]
    for p in procs:
        p.start()
    got = [out.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return got


def _gloo_rank(target, rank, port, out):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        target(rank, out)
    finally:
        dist.destroy_process_group()


def load_results(folder):
    return [json.loads(p.read_text()) for p in sorted(Path(folder).rglob("result.json"))]


@pytest.fixture
def run(tmp_path):
    return run_script


class _NoProcess:
    def __init__(self, *args, **kwargs):
        pytest.skip("starts a process: left out of a mutation run (SCALELAB_MUTATION)")


@pytest.fixture(autouse=True)
def _unit_tests_only_under_mutation(monkeypatch):
    """`make mutation` sets SCALELAB_MUTATION=1: a test that starts a process (a script, a training run, bash) is
    skipped where it would start it. Each costs seconds, for every mutant that reaches it; a mutant only such a test
    catches is a missing unit test (pyproject.toml's [tool.mutmut])."""
    if os.environ.get("SCALELAB_MUTATION") == "1":
        monkeypatch.setattr(subprocess, "Popen", _NoProcess)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI (CI=true) a skipped test fails: CI must run everything the README promises, and a skip there
    (torchrun missing, no SLURM, a script renamed) would otherwise pass silently."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must run every test: {reason}"


# --- the local SLURM cluster (tests/slurm_cluster/): one fixture, shared by every module that submits jobs ---
def _cannot_run_reason():
    if os.geteuid() != 0:
        return "the local SLURM cluster needs root (it installs slurm-wlm and starts daemons)"
    if not shutil.which("apt-get") and not shutil.which("slurmctld"):
        return "no apt-get and no slurmctld: not a Debian machine"
    return None


@pytest.fixture(scope="session")
def slurm_env():
    reason = _cannot_run_reason()
    if reason:
        pytest.skip(reason)  # under CI=true conftest turns this skip into a failure: CI must run these
    already_up = _cluster_running()  # someone else's cluster (another session): use it, never stop it
    started = time.time()
    proc = subprocess.run(["bash", str(SLURM_CLUSTER / "start.sh"), SLURM_STATE_DIR], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"start.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    conf = proc.stdout.strip().splitlines()[-1].split("=", 1)[1]
    print(f"\nlocal SLURM cluster up in {time.time() - started:.1f} s ({conf})")
    env = {**os.environ, "SLURM_CONF": conf, "SCALELAB_PROFILE": "cpu"}
    yield env
    if not already_up:
        subprocess.run(["bash", str(SLURM_CLUSTER / "stop.sh"), SLURM_STATE_DIR], capture_output=True, text=True,
                       timeout=120)


def _cluster_running(state_dir=SLURM_STATE_DIR) -> bool:
    try:
        pid = int(open(os.path.join(state_dir, "slurmctld.pid")).read().strip())
        return open(f"/proc/{pid}/comm").read().strip() == "slurmctld"
    except (OSError, ValueError):
        return False
