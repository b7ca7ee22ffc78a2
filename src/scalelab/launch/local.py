"""Start the ranks of a job on this machine, and read a started rank's place in the group.

Two kinds of job, two ways to start them:

* Training (`python src/train.py --devices N`): rank 0 is the process the user started, and it starts ranks
  1..N-1 itself (start_early, start_late), as Lightning's launcher would, but before torch is imported where it
  can: each rank's imports (seconds) run while rank 0's do, not after them. The ranks it started wait at their
  start (wait_for_go) until rank 0 has passed every check and launches, so nothing is said twice. Rank 0 is their
  parent: train/guard/watch.py knows which one ended and how. Fabric sees LOCAL_RANK and launches nothing.
* Tools that use torch.distributed alone (the all-reduce benchmark): spawn_local runs `python -m MODULE argv` once
  per rank with the rendezvous environment that cluster.detect reads as an external launch
  (SCALELAB_LAUNCHER=local, RANK/LOCAL_RANK/WORLD_SIZE, MASTER_ADDR/PORT), waits, stops the others when one fails
  and says why in one line (RunFailed).
"""

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from scalelab.errors import RunFailed, UsageError
from scalelab.launch import cores

_STARTED_ENV = ("SCALELAB_LAUNCHER", "LOCAL_RANK", "WORLD_SIZE", "RANK")


GO_FD_ENV = "_SCALELAB_GO_FD"  # no SCALELAB_ prefix: results never record it
# Variables of launchers and schedulers (torchrun, SLURM, LSF, MPI): where one is set, whether this process
# launches the others is Lightning's decision (cluster.detect, torch imported), and the ranks start after it
_LAUNCHER_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS",
                       "SLURM_JOB_ID", "LSB_JOBID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


class LocalRanks:
    """Ranks 1..N-1 of a training run on this machine, started by rank 0 (their parent) and waiting for its go."""

    def __init__(self, procs: list, go_fd: int):
        self.procs, self._go_fd = procs, go_fd

    def go(self) -> list:
        """Rank 0 launches (fabric.launch()): each waiting rank reads its byte and runs. Returns [(rank, exit code)]
        of the ranks that ended before it (killed, crashed in their imports): rank 0 says so now, not after
        --timeout at the rendezvous. Polled before the go: a rank that runs and ends at once after it (a busy
        machine, rank 0 waiting for a core) did not end before it."""
        ended = [(k + 1, proc.returncode) for k, proc in enumerate(self.procs) if proc.poll() is not None]
        if self._go_fd is not None:
            try:
                os.write(self._go_fd, b"g" * len(self.procs))
            except OSError:  # every waiting rank ended (EPIPE)
                pass
            os.close(self._go_fd)
            self._go_fd = None
        return ended


def start_early(devices, num_nodes, threads) -> "LocalRanks | None":
    """Rank 0 of `--devices N` on this machine, right after the flags are read and before torch is imported: start
    ranks 1..N-1 now. None where that cannot be decided without torch: a launcher's variables are set, or N
    devices of `threads` cores do not fit the cores here (cores.place refuses that in one line; --oversubscribe
    runs it), and start_late decides."""
    if (devices or 1) < 2 or (num_nodes or 1) > 1 or any(name in os.environ for name in _LAUNCHER_VARIABLES):
        return None
    if devices * (threads or cores.DEFAULT_THREADS) > len(cores.visible()):
        return None
    return start_ranks(devices)


def start_late(launch) -> "LocalRanks | None":
    """Rank 0 of a local launch that start_early left to cluster.detect (a salloc shell, --oversubscribe): start
    ranks 1..N-1 at launch, once Fabric and the workload are built (their refusals start no process). None for a
    rank someone started (LOCAL_RANK) and for one device."""
    if launch.launcher != "local" or launch.world_size < 2 or "LOCAL_RANK" in os.environ:
        return None
    return start_ranks(launch.devices)


def start_ranks(devices: int) -> LocalRanks:
    """Ranks 1..devices-1 run this process's command with LOCAL_RANK=RANK=k and the rendezvous variables that
    Lightning's launcher sets (this process becomes rank 0); each waits on a pipe for rank 0's go.

    RANK too: before the group forms a rank knows itself by entry.env_rank, which reads RANK before a scheduler's
    SLURM_PROCID; in a salloc shell's srun step every started rank inherits SLURM_PROCID=0, and without RANK each
    would take itself for rank 0 (its own run folder, logger and banner)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # the user's, as Lightning honours them
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ.update(NODE_RANK="0", WORLD_SIZE=str(devices), LOCAL_RANK="0", RANK="0")
    read, write = os.pipe()
    interruptible = int(signal.getsignal(signal.SIGINT) is signal.default_int_handler)  # not a background `&` job
    try:
        procs = [subprocess.Popen(rank_command(), env={**os.environ, "LOCAL_RANK": str(k), "RANK": str(k),
                                                       GO_FD_ENV: f"{read},{interruptible}"},
                                  pass_fds=(read,), preexec_fn=_waiting_rank) for k in range(1, devices)]
    finally:
        os.close(read)
    return LocalRanks(procs, write)


def rank_command() -> list:
    """This process's command line, as Lightning's launcher rebuilds it: `python script.py ...` or `python -m ...`."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    if spec is None:
        return [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
    return [sys.executable, "-m", spec.name, *sys.argv[1:]]


def _waiting_rank():
    """In a started rank, before it runs: it dies with rank 0 (die_with_parent), and until rank 0's go it ignores
    Ctrl-C, which reaches the whole process group: rank 0 alone decides (it may end and say "interrupted", or an
    import may swallow the interrupt and the run go on), never a waiting rank on its own (an ignored SIGINT stays
    ignored across exec, and Python keeps it so at start-up)."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_for_go() -> None:
    """In a rank that start_ranks started, first thing: import what every rank imports (torch, Lightning: seconds)
    while rank 0 does the same, then wait for rank 0's go. Rank 0 ended before it launched: it said why (a refused
    flag, Ctrl-C), so this rank ends without a word. Ctrl-C counts again from the go on."""
    given = os.environ.pop(GO_FD_ENV, None)
    if given is None:
        return
    fd, interruptible = (int(n) for n in given.split(","))
    failed = None
    try:
        import lightning.fabric  # noqa: F401 - torch with it
    except BaseException as exc:  # noqa: BLE001 - said after the go only: rank 0 may have ended, saying why
        failed = exc
    go = os.read(fd, 1)
    os.close(fd)
    if not go:
        os._exit(0)
    if interruptible:  # as rank 0 (a background job's ranks keep ignoring it, as rank 0 does)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if failed is not None:
        raise failed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_started_rank() -> bool:
    """A rank someone already started (spawn_local too): cluster.detect's "external" launch. It never spawns."""
    return all(k in os.environ for k in _STARTED_ENV)


def spawned_world():
    """WORLD_SIZE when spawn_local started this process, else None: such a rank can build its Launch
    ("local", world ranks on one node) from the environment, without cluster.detect's Lightning import
    (seconds per rank on a small machine)."""
    if os.environ.get("SCALELAB_LAUNCHER") != "local" or not is_started_rank():
        return None
    return int(os.environ["WORLD_SIZE"])


def spawn_local(module: str, argv, world: int, grace_s: float = 5.0) -> int:
    """Start `world` ranks of `python -m module argv` on this machine and wait for them.

    When a rank fails the others get grace_s to end on their own (a correctness failure ends every rank,
    rank 0 last, after writing the result), then are killed. Returns the ranks' common exit code when every
    rank ended the run itself; otherwise raises RunFailed naming the rank that failed first.
    """
    port = free_port()
    # src/, so `python -m module` in each rank imports this checkout even when scalelab is not installed
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world), "NODE_RANK": "0", "SCALELAB_LAUNCHER": "local",
            "PYTHONPATH": os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH")) if p)}
    procs = [subprocess.Popen([sys.executable, "-m", module, *argv], env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
                              preexec_fn=die_with_parent) for r in range(world)]
    return supervise(procs, grace_s, lambda r, how, stopped: f"rank {r} of {world} {how}"
                     + ("; stopped the other ranks" if stopped else ""))


def die_with_parent():
    """In a child, before it runs: SIGTERM to it when the launcher dies without its cleanup (kill -9), so no rank
    outlives its launcher (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def supervise(procs, grace_s: float, who) -> int:
    """Wait for processes that run one job together (local ranks, emulated nodes). When one fails the others
    get grace_s to end on their own, then are stopped; they are stopped on Ctrl-C or SIGTERM too. Returns their
    common exit code when each ended the run itself (the job said why in its own one line); otherwise raises
    RunFailed with who(index, how it ended, whether others were stopped) for the one that failed first."""
    first_bad, killed = None, False
    restore = exit_on_sigterm()
    try:
        first_bad, killed = _wait(procs, grace_s)
    finally:
        killed = _stop(procs) or killed  # never leave a process of the job behind
        restore()
    codes = [p.wait() for p in procs]
    if not any(codes):
        return 0
    if not killed and all(c == codes[0] for c in codes):
        return codes[0]
    i, code = first_bad or next((i, c) for i, c in enumerate(codes) if c)
    how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
    raise RunFailed(who(i, how, killed))


def _wait(procs, grace_s: float):
    """Poll until every rank ended, or grace_s after the first failure; (first failed (rank, code), killed)."""
    first_bad, deadline = None, None
    while None in [p.poll() for p in procs]:  # poll every rank: any() would stop at the first one running
        if _terminated:  # a SIGTERM whose SystemExit an ignoring hook swallowed (exit_on_sigterm)
            sys.exit(SIGTERM_EXIT)
        bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
        if bad and first_bad is None:  # a rank killed by a signal is the likelier cause than its peers
            first_bad, deadline = min(bad, key=lambda rc: (rc[1] > 0, rc[0])), time.time() + grace_s
        if deadline is not None and time.time() > deadline:
            return first_bad, _stop(procs)
        time.sleep(0.05)
    return first_bad, False


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


SIGTERM_EXIT = 128 + signal.SIGTERM
_terminated = []  # the SIGTERMs exit_on_sigterm's handler saw: what the wait loop checks, should its exit be lost


def exit_on_sigterm():
    """Let SIGTERM (scancel, a CI timeout) unwind the parent like Ctrl-C, so its ranks are stopped too.
    Returns the function that puts the previous handler back. The handler's SystemExit is lost when Python runs
    the handler inside a hook whose exceptions it ignores (logging's at-fork hook while Popen starts a node:
    "Exception ignored in: _releaseLock"; a fresh clone's CI saw the run go on to exit 0), so it also leaves a
    mark that supervise's wait loop acts on."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # handlers can only be set from the main thread

    def on_sigterm(*_):
        _terminated.append(signal.SIGTERM)
        sys.exit(SIGTERM_EXIT)

    previous = signal.signal(signal.SIGTERM, on_sigterm)

    def restore():
        signal.signal(signal.SIGTERM, previous)
        _terminated.clear()  # a later launch in this process starts unmarked

    return restore


def _stop(procs) -> bool:
    """Terminate, then kill, ranks still running; True when there were any."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        p.terminate()
    for p in alive:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return bool(alive)


def rank_info(launch):
    """(rank, local_rank, world_size, main address, main port) as this launch's launcher announces them."""
    if launch.launcher == "slurm":
        from lightning.fabric.plugins.environments import SLURMEnvironment

        env = SLURMEnvironment()
        return env.global_rank(), env.local_rank(), env.world_size(), env.main_address, env.main_port
    world = int(os.environ.get("WORLD_SIZE", "1"))
    port = os.environ.get("MASTER_PORT") or (free_port() if world == 1 else None)
    if port is None:
        raise UsageError("WORLD_SIZE > 1 but MASTER_PORT is not set: start the ranks with srun or torchrun")
    return (int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")), world,
            os.environ.get("MASTER_ADDR", "127.0.0.1"), int(port))
