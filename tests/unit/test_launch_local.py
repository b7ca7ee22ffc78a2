"""The local launcher (launch/local.py) stops the other ranks soon after any one of them fails."""

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import SRC
from scalelab.errors import RunFailed
from scalelab.launch import local
from scalelab.launch.cluster import Launch
from scalelab.launch.local import spawn_local

RANK_SCRIPT = """
import os, sys, time
rank = int(os.environ["RANK"])
if rank == int(os.environ["FAILING_RANK"]):
    sys.exit(3)
time.sleep(60)
"""


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_a_failed_rank_stops_the_others_within_the_grace_period(tmp_path, monkeypatch, failing):
    (tmp_path / "fake_rank.py").write_text(RANK_SCRIPT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FAILING_RANK", str(failing))
    start = time.monotonic()
    with pytest.raises(RunFailed) as err:
        spawn_local("fake_rank", [], 3, grace_s=1.0)
    # a rank behind a running lower rank must be seen too: not the 60 s the others sleep
    assert time.monotonic() - start < 20
    assert str(err.value) == f"rank {failing} of 3 exited with code 3; stopped the other ranks"


SWALLOWED_SIGTERM = """
import os, signal, subprocess, sys
from scalelab.launch.local import exit_on_sigterm, supervise

class Hook:  # a hook whose exceptions Python ignores, as logging's at-fork hook is while Popen forks
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # the handler runs here, inside the hook, and its SystemExit is "ignored"

restore = exit_on_sigterm()
Hook()
rank = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                        stdout=subprocess.PIPE, text=True)
rank.stdout.readline()
print("supervising", flush=True)
supervise([rank], 1.0, lambda r, how, stopped: how)
"""


def test_a_sigterm_whose_exit_a_hook_swallowed_still_stops_the_launcher_and_its_ranks(tmp_path):
    # a fresh clone's CI: emulate.py got SIGTERM while Popen started a node, the handler's SystemExit was lost in
    # logging's at-fork hook, and the run went on to exit 0 with the link still up for its whole length
    script = tmp_path / "launcher.py"
    script.write_text(SWALLOWED_SIGTERM)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=50)
    assert "Exception ignored" in proc.stderr  # the exit was swallowed, as in CI
    assert "supervising" in proc.stdout
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert time.monotonic() - start < 30  # not the rank's 60 s


# A training script as launch/local.py starts it: rank 0 starts ranks 1 and 2 (start_early), which import
# "lightning" (a stand-in that says so) and wait for rank 0's go.
# Every line is one write (atomic on a pipe): print under PYTHONUNBUFFERED writes a line and its end apart, and
# two ranks' lines interleaved ("importedimported").
TRAINING = """
import os, signal, sys, time
from scalelab.launch import local

def say(*words):
    os.write(1, (" ".join(map(str, words)) + "\\n").encode())

local.wait_for_go()
rank = os.environ.get("LOCAL_RANK")
if rank not in (None, "0"):
    ctrl_c = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    say("rank", rank, "of", os.environ["WORLD_SIZE"], "port", os.environ["MASTER_PORT"], "ctrl-c", ctrl_c)
    sys.exit(0)
ranks = local.start_early(3, None, 1)
say("rank", os.environ["LOCAL_RANK"], "of", os.environ["WORLD_SIZE"], "port", os.environ["MASTER_PORT"])
time.sleep(1.5)  # the ranks started, imported and wait
if sys.argv[1:] == ["ctrl-c"]:  # what a terminal's Ctrl-C sends each process of the group
    for p in ranks.procs:
        os.kill(p.pid, signal.SIGINT)
    time.sleep(0.5)
if sys.argv[1:] == ["killed"]:
    ranks.procs[1].kill()
    ranks.procs[1].wait()
say("go")
if sys.argv[1:]:
    say("ended before the go", ranks.go())
    say("codes", [p.wait() for p in ranks.procs])
"""


def training(tmp_path, *argv):
    (tmp_path / "train_like.py").write_text(TRAINING)
    (tmp_path / "lightning" / "fabric").mkdir(parents=True)
    (tmp_path / "lightning" / "__init__.py").write_text("import os\nos.write(1, b'imported\\n')\n")
    (tmp_path / "lightning" / "fabric" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in local._LAUNCHER_VARIABLES}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), str(SRC)]), SCALELAB_NODE_CORES="0,1,2")
    start = time.monotonic()
    # SIGINT as in a terminal: a test run in the background (`make test &`) inherits it ignored, and so would the
    # ranks (they take rank 0's Ctrl-C handling after the go)
    proc = subprocess.run([sys.executable, str(tmp_path / "train_like.py"), *argv], capture_output=True, text=True,
                          env=env, timeout=30, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # run returned once every rank closed its stdout: none is left
    return proc, proc.stdout.splitlines(), time.monotonic() - start


def test_the_started_ranks_import_first_then_wait_for_rank_0s_go(tmp_path):
    proc, lines, _ = training(tmp_path, "go")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    go = lines.index("go")
    assert lines[:go].count("imported") == 2  # both imported before rank 0 went on: beside its own imports
    port = lines[0].split()[-1]
    assert lines[0] == f"rank 0 of 3 port {port}"  # rank 0 becomes LOCAL_RANK 0 of the same world
    assert sorted(lines[go + 1:-1]) == ["ended before the go []", f"rank 1 of 3 port {port} ctrl-c True",
                                        f"rank 2 of 3 port {port} ctrl-c True"]  # only after go; Ctrl-C acts again
    assert lines[-1] == "codes [0, 0]"


def test_a_waiting_rank_leaves_ctrl_c_to_rank_0(tmp_path):
    proc, lines, _ = training(tmp_path, "ctrl-c")  # rank 0 went on (an import swallowed its interrupt)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr  # no KeyboardInterrupt from a waiting rank
    assert lines[-1] == "codes [0, 0]" and "ended before the go []" in lines


def test_a_rank_that_ends_right_after_the_go_did_not_end_before_it(monkeypatch):
    """A busy machine: rank 0 writes the go, loses its core, and its ranks run and end before it polls them (CI, once:
    "ended before the go" named a rank that had run). Each rank is polled before the go is written."""
    written = []

    class Rank:
        returncode = None

        def poll(self):
            self.returncode = 0 if written else None
            return self.returncode

    read, write = os.pipe()
    real = os.write
    monkeypatch.setattr(local.os, "write", lambda fd, data: written.append(data) or real(fd, data))
    try:
        assert local.LocalRanks([Rank(), Rank()], write).go() == [] and written == [b"gg"]
    finally:
        os.close(read)


def test_a_rank_that_ended_before_the_go_is_said_at_the_go(tmp_path):
    proc, lines, _ = training(tmp_path, "killed")
    assert "ended before the go [(2, -9)]" in lines and lines[-1] == "codes [0, -9]", lines


def test_a_rank_0_that_ends_before_its_go_leaves_no_rank_and_no_word(tmp_path):
    proc, lines, took = training(tmp_path)  # a refused flag: rank 0 ends, says why (here: nothing)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert lines[-1] == "go" and not [line for line in lines if line.startswith(("rank 1", "rank 2"))]
    assert took < 15


@pytest.mark.parametrize("devices, nodes, threads, env, why", [
    (2, None, None, {}, None),  # 2 local devices on 4 cores, no launcher: rank 0 starts rank 1 now
    (1, None, None, {}, "one device: nothing to start"),
    (2, 2, None, {}, "several nodes: a launcher starts them"),
    (2, None, 2, {}, None),
    (3, None, 2, {}, "3 x 2 cores on 4: cores.place refuses, or --oversubscribe runs it, after its check"),
    (2, None, None, {"SLURM_NTASKS": "1"}, "a batch script or salloc: Lightning decides what it is"),
    (2, None, None, {"LOCAL_RANK": "1"}, "a rank someone started"),
    (2, None, None, {"RANK": "0"}, "torchrun or another launcher"),
])
def test_ranks_start_early_only_where_torch_has_nothing_to_decide(monkeypatch, devices, nodes, threads, env, why):
    for name in local._LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SCALELAB_NODE_CORES", "0,1,2,3")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(local, "start_ranks", lambda n: f"started {n}")  # no process started from pytest
    assert local.start_early(devices, nodes, threads) == (f"started {devices}" if why is None else None), why


@pytest.mark.parametrize("launch, env, started", [
    (Launch("local", 3, 1, "cpu"), {}, "started 3"),  # a salloc shell, --oversubscribe: after the checks
    (Launch("local", 1, 1, "cpu"), {}, None),
    (Launch("slurm", 2, 1, "cpu"), {}, None),
    (Launch("torchrun", 2, 1, "cpu"), {}, None),
    (Launch("local", 2, 1, "cpu"), {"LOCAL_RANK": "0"}, None),  # rank 0 started them early already, or a started rank
])
def test_ranks_start_late_only_for_a_local_launch_that_has_not_started_them(monkeypatch, launch, env, started):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(local, "start_ranks", lambda n: f"started {n}")
    assert local.start_late(launch) == started


def test_each_started_rank_knows_itself_before_the_group_forms_under_a_schedulers_rank_0(monkeypatch):
    """A salloc shell's srun step (SLURM_PROCID=0 inherited by every process it starts): the ranks rank 0 starts
    must not each read themselves as rank 0 (N run folders, N loggers, N banners: seen with --devices 2)."""
    from scalelab.entry import env_rank

    # start_ranks sets rank 0's own variables: a copy of the environment takes them, and goes with the test
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in (
        *local._LAUNCHER_VARIABLES, "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")})
    monkeypatch.setenv("SLURM_PROCID", "0")
    envs = []

    class Started:
        def __init__(self, cmd, env, **kw):
            envs.append(env)

    monkeypatch.setattr(local.subprocess, "Popen", Started)
    ranks = local.start_ranks(3)
    os.close(ranks._go_fd)
    assert [env_rank(env) for env in envs] == [1, 2] and env_rank() == 0
    assert all(env["WORLD_SIZE"] == "3" and env["SLURM_PROCID"] == "0" for env in envs)
