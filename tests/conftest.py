"""pytest's part of the shared test code: fixtures (the local SLURM cluster, `run`) and hooks (a skip under CI
fails; a mutation run skips what starts a process). Helpers to import are in helpers.py."""

import atexit
import os
import shutil
import subprocess
import tempfile
import time

import pytest

# A user's own workloads (docs/16) are not the suite's: the registry the tests see is scalelab's alone (an installed
# entry point still joins; the tests that need one set their own environment).
os.environ.pop("SCALELAB_WORKLOADS", None)
# Nor is the user's cache (~/.cache/scalelab: the key that seals index rows, the readings each report keeps for the
# next): the suite's hundreds of small reports pushed a developer's own folders' readings out of it. A process the
# suite started or forked (xdist's workers; mutmut's, one a mutant, which end without atexit: 100 folders were left
# in /tmp) makes its own inside its maker's, removed with it: none reads what another kept (a mutant, the clean
# run's readings of the same code's digest) nor races another making its key.
_CACHE_PREFIX = "scalelab-test-cache-"
_MAKERS = os.environ.get("XDG_CACHE_HOME", "")
if os.path.basename(_MAKERS).startswith(_CACHE_PREFIX) and os.path.isdir(_MAKERS):
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix=_CACHE_PREFIX, dir=_MAKERS)
else:
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix=_CACHE_PREFIX)
    atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

import helpers  # noqa: E402 - after the environment it reads is set
from helpers import SLURM_CLUSTER, SLURM_STATE_DIR, run_script, slurm_cannot_run_reason, slurm_cluster_running  # noqa: E402


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


SERIAL = ("slow", "slurm", "alone")


def pytest_collection_modifyitems(items):
    """tests/unit's tests that are neither slow, slurm nor alone are marked `parallel`: make test and make test-quick
    run them on 2 workers (pytest-xdist), then the rest one at a time, so that no train.py run, SLURM job, chapter or
    contention check shares the cores with another test. A parallel test reads no timing of its own: at most it
    starts two gloo ranks to check a collective's values or a rule of the step, or bounds a wait loosely."""
    for item in items:
        if item.path.parent.name == "unit" and not any(item.get_closest_marker(m) for m in SERIAL):
            item.add_marker(pytest.mark.parallel)


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
@pytest.fixture(scope="session")
def slurm_env():
    reason = slurm_cannot_run_reason()
    if reason:
        pytest.skip(reason)  # under CI=true conftest turns this skip into a failure: CI must run these
    already_up = slurm_cluster_running()  # someone else's cluster (another session): use it, never stop it
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


@pytest.fixture(scope="session")
def chapter_run(tmp_path_factory):
    """chapter_run(chapter, mark, **env) -> (folder, [(index, line, text, CompletedProcess)], left): the
    chapter's blocks of that mark, run once a session in a participant's checkout of their own (helpers.run_chapter).
    test_docs.py compares what they print; test_reframe.py reads what chapter 14's nightly run left, instead of
    running it again. After a SLURM chapter's blocks (env SLURM_CONF=...) the queue is drained; `left`: the jobs
    still queued 120 s after them."""
    done = {}

    def run(chapter, mark, **extra):
        if (chapter, mark) not in done:
            folder = tmp_path_factory.mktemp(chapter.stem)
            env = {**helpers.workshop(folder), **extra}
            try:
                ran = helpers.run_chapter(chapter, mark, folder, env)
            finally:  # a job a block left behind must not reach the next test
                left = helpers.drained(env) if "SLURM_CONF" in extra else ""
            done[chapter, mark] = folder, ran, left
        return done[chapter, mark]

    return run
