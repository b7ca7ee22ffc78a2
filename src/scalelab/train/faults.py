"""When a rank fails: say which one and how, leave a record, leave nothing running, never hang.

`RankWatch` (a callback every run registers) answers rank 0's question "why did my collective fail?", from
what rank 0 can *know* rather than from gloo's "Connection closed by peer [127.0.0.1]:port" (that port is a
gloo pair's, not mappable to a rank):

* Ranks Lightning launched from this process (`python src/train.py --devices N`): rank 0 is their parent and
  holds their `Popen` objects, so it knows which child ended, with which exit code or signal. Lightning's own
  child observer would SIGKILL rank 0 within 5 s of a child's death, before rank 0 could write anything
  (measured: exit -9, no record, nothing on stderr); RankWatch takes its place (same polling), lets rank 0
  record the failure first, and kills everything itself only if rank 0 has not ended `--timeout` + 30 s
  after the death. Ranks it launched die with rank 0 (PR_SET_PDEATHSIG): no orphans.
* A rank that fails with an exception (any launcher: torchrun, srun, several nodes) posts its one-line error
  in the process group's key-value store (served by a thread of rank 0's process, so also while rank 0 is
  blocked in a collective) before it exits; rank 0 reads it when its own collective breaks. A rank that only
  saw a broken collective posts nothing: it is a victim, not the cause.
* Ranks started by torchrun or srun on rank 0's host are found gone by their pid (posted at start-up).
* A collective that timed out (`--timeout`) names the launched ranks that are alive but silent, with their
  process state (stopped, running, waiting on I/O).
* A rendezvous that timed out (torch's "1/2 clients joined") says how many ranks arrived of how many.

Signals. SIGTERM during start-up (before Lightning installs its handler) would end the run without a record:
it raises Lightning's SIGTERMException instead, recorded as "timeout". SIGUSR1: under SLURM with Lightning's
auto-requeue, Lightning's handler checkpoints and calls `scontrol requeue`; RankWatch only notes that it
fired, and whatever then ends this attempt (SLURM's SIGTERM) makes it "preempted": the job comes back and
`results.latest_attempts` lets the new attempt's record supersede this one. SLURM_RESTART_COUNT is not used
for the status: it says an earlier attempt was requeued, nothing about why this one stopped (the result keeps
it as slurm.restart_count). Anywhere else SIGUSR1 would kill the process silently (its default action), so it
is handled like SIGTERM: stop after the current step, status "timeout".

`from_env()` is a test hook, inert unless SCALELAB_FAULT is set, and never recorded in a result:

    SCALELAB_FAULT="raise@step=5,rank=1"   rank 1 raises RuntimeError("injected fault ...") in step 5
    SCALELAB_FAULT="exit@step=5,rank=1"    rank 1 dies with os._exit(3) in step 5 (a crashed rank)
    SCALELAB_FAULT="sleep@start=30,rank=1" rank 1 sleeps 30 s before it joins (a late joiner)
"""

import os
import signal
import socket
import sys
import threading
import time

import lightning.pytorch as pl

STORE_PREFIX = "scalelab/error/"
WHERE_PREFIX = "scalelab/where/"
MARK_SIGNAL, MARK_PEER = "~stopped by a signal", "~saw another rank fail"  # posted by ranks that are not the cause
PARENT_ENV = "_SCALELAB_LAUNCHER_PID"  # no SCALELAB_ prefix: results never record it
PEER_WAIT_S = 3.0  # how long rank 0 waits for a failed peer to be seen dead (or to post its error)
LAST_RESORT_GRACE_S = 30.0


class RankWatch(pl.Callback):
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.children = []  # (global rank, Popen) of the ranks Lightning launched from this process
        self.world_size = 1
        self.rank = 0
        self.sigusr1 = None  # "requeue" (SLURM auto-requeue fired) or "stop" (handled like SIGTERM)
        self.sigterm_seen = False  # SIGTERM arrived during training (Lightning's own flag is set only at its end)
        self._ending = False  # rank 0 is recording the failure: the watch stands back
        self._killed_by_us = set()
        self._training = False
        self._take_over_lightning_observer()
        _die_with_launcher()
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
                signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, self._sigterm_at_startup)

    def _sigterm_at_startup(self, signum, frame):
        """Until Lightning installs its own SIGTERM handler (just before the first step), SIGTERM would end the
        process without a record (measured: exit -15 during a 2-process start-up, nothing written): raise
        Lightning's SIGTERMException instead, which the run records as status "timeout"."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if signal.getsignal(signal.SIGTERM) != self._sigterm_at_startup:
            return  # Lightning's handler is in charge (it calls this one too): it stops after the current step
        if self._ending:
            return  # the run is failing and being recorded (torchrun sends SIGTERM once a rank died): finish that
        if not self._training:
            raise SIGTERMException()
        # Training is over and Lightning has handed SIGTERM back: its default action, as before scalelab.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    # --- launched children --------------------------------------------------------------------------
    def _take_over_lightning_observer(self):
        try:
            from lightning.pytorch.strategies.launchers import subprocess_script
        except ImportError:
            return
        if hasattr(subprocess_script, "_launch_process_observer"):  # else: Lightning's behaviour stays
            subprocess_script._launch_process_observer = self._watch_children

    def _watch_children(self, procs):
        os.environ.pop(PARENT_ENV, None)  # only the ranks just launched carry it
        node_rank, per_node = int(os.environ.get("NODE_RANK", "0")), len(procs) + 1
        self.children = [(node_rank * per_node + i + 1, proc) for i, proc in enumerate(procs)]
        threading.Thread(target=self._poll, name="scalelab-rank-watch", daemon=True).start()

    def _poll(self):
        first_death = None
        while True:
            time.sleep(0.25)
            codes = [proc.poll() for _, proc in self.children]
            if all(code == 0 for code in codes):
                return
            if first_death is None and any(code not in (None, 0) for code in codes):
                first_death = time.monotonic()
            if (first_death is not None and not self._ending
                    and time.monotonic() - first_death > self.timeout_s + LAST_RESORT_GRACE_S):
                dead = self.dead_children()
                print(f"scalelab: {describe_dead(dead)}; rank 0 did not end within --timeout + "
                      f"{LAST_RESORT_GRACE_S:.0f} s: stopping all ranks", file=sys.stderr, flush=True)
                self.stop_children()
                os.kill(os.getpid(), signal.SIGKILL)
                return

    def dead_children(self) -> list:
        """[(rank, returncode)] of launched ranks that ended badly (not counting the ones we stopped, nor the
        ones that said why they stopped: a signal, or a peer's failure)."""
        posted = self._posts()
        return [(rank, proc.poll()) for rank, proc in self.children
                if proc.poll() not in (None, 0) and rank not in self._killed_by_us and rank not in posted]

    def stop_children(self):
        """SIGKILL every launched rank still running (rank 0 is ending; they cannot finish without it)."""
        for rank, proc in self.children:
            if proc.poll() is None:
                self._killed_by_us.add(rank)
                proc.kill()
        for _, proc in self.children:
            try:
                proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - a zombie we cannot reap is not worth a second error
                pass

    # --- Lightning hooks --------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage):
        os.environ.pop(PARENT_ENV, None)  # launched nothing (torchrun, srun, one process): nothing to mark
        self.world_size, self.rank = trainer.world_size, trainer.global_rank
        store = _store()
        if store is not None and self.world_size > 1:  # so rank 0 can tell a vanished peer on its own host
            try:
                store.set(f"{WHERE_PREFIX}{self.rank}", f"{socket.gethostname()} {os.getpid()}")
            except Exception:  # noqa: BLE001 - best effort: only sharpens a message
                pass

    def on_train_start(self, trainer, pl_module):
        self._training = True
        # Lightning registers its signal handlers just before training starts; wrap them after it did.
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
            return
        lightning_sigterm = signal.getsignal(signal.SIGTERM)
        if callable(lightning_sigterm):
            def sigterm(signum, frame):
                self.sigterm_seen = True  # before Lightning's handler, whose broadcast may raise (see classify)
                lightning_sigterm(signum, frame)

            signal.signal(signal.SIGTERM, sigterm)
        current = signal.getsignal(signal.SIGUSR1)
        if _is_lightning_requeue(current):  # Lightning's SLURM auto-requeue handler: note that it fired, run it
            def requeue(signum, frame):
                self.sigusr1 = "requeue"
                current(signum, frame)

            signal.signal(signal.SIGUSR1, requeue)
        elif current in (signal.SIG_DFL, None):  # default action: die without a word; stop like SIGTERM
            def stop(signum, frame):
                self.sigusr1 = "stop"
                handler = signal.getsignal(signal.SIGTERM)
                if callable(handler):
                    handler(signum, frame)

            signal.signal(signal.SIGUSR1, stop)

    def on_exception(self, trainer, pl_module, exception):
        self._ending = True  # Lightning tears down next (and hands SIGTERM back to us): the run is ending

    # --- when the run fails -----------------------------------------------------------------------------
    def begin_failure(self):
        self._ending = True
        os.environ.pop(PARENT_ENV, None)

    def post_error(self, line: str):
        """A non-zero rank leaves its one-line error for rank 0 (best effort, never blocks for long): its own
        exception, or a marker (MARK_SIGNAL, MARK_PEER) that says it is not the cause."""
        store = _store()
        if store is not None:
            try:
                store.set(f"{STORE_PREFIX}{self.rank}", line[:300])
            except Exception:  # noqa: BLE001 - rank 0 may be gone already; its own error says enough
                pass

    def culprit(self, exc, steps_done: int, wait_s: float = PEER_WAIT_S, silent: bool = True):
        """One line naming the rank that failed first, or None when this rank's own error is the cause.

        A closed connection means a peer is dying: wait up to `wait_s` to see its exit (or its posted error).
        A timed-out collective means a peer is alive but silent: name launched ranks that are still running.
        exc=None: only what is known already (a posted error, a rank gone without saying why).
        silent=False: leave out the alive-but-silent ranks (they may be stuck because of this rank).
        """
        if exc is not None and not is_peer_failure(exc):
            return None
        where = f" during step {steps_done + 1}" if steps_done else " before the first step"
        timed_out = exc is not None and any(word in str(exc).lower() for word in ("timed out", "timeout"))
        deadline = time.monotonic() + (0 if timed_out else wait_s)
        while True:
            posted = self._posted_errors()
            if posted:
                rank, line = posted[0]
                return f"rank {rank} failed{where}: {line}"
            dead = self.dead_children() or self._gone_on_this_host()
            if dead:
                # A rank posts before it exits, but the store serves the post asynchronously: look once more.
                time.sleep(0.3)
                posts = self._posts()
                dead = [(rank, code) for rank, code in dead if rank not in posts]
                if dead and not self._posted_errors():
                    return f"{describe_dead(dead)}{where}"
                continue
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        silent = silent and [(rank, _state(proc.pid)) for rank, proc in self.children if proc.poll() is None]
        silent = silent and [(rank, state) for rank, state in silent if state != "state Z"]  # Z: just ended
        if timed_out and silent:
            return "; ".join(f"rank {rank} did not answer within {self.timeout_s:g} s (--timeout){where}; its "
                             f"process is alive ({state})" for rank, state in silent)
        return None

    def not_joined(self, arrived: int, expected: int) -> str:
        line = (f"rank(s) did not join within {self.timeout_s:g} s (--timeout): waited for {expected} processes, "
                f"{arrived} arrived")
        dead = self.dead_children()
        late = [rank for rank, proc in self.children if proc.poll() is None]
        if dead:
            line += f"; {describe_dead(dead)} before joining"
        if late:
            line += f"; rank {', '.join(map(str, late))} started but never joined"
        return line

    def _gone_on_this_host(self) -> list:
        """[(rank, None)] of ranks on this host whose process is gone without saying why (started by torchrun or
        srun, not by us)."""
        store, here, gone = _store(), socket.gethostname(), []
        if store is None:
            return gone
        posted = self._posts()
        for rank in range(1, self.world_size):
            if rank in posted:
                continue
            try:
                if not store.check([f"{WHERE_PREFIX}{rank}"]):
                    continue
                host, pid = store.get(f"{WHERE_PREFIX}{rank}").decode().rsplit(" ", 1)
            except Exception:  # noqa: BLE001
                return gone
            if host == here and not _alive(int(pid)):
                gone.append((rank, None))
        return gone

    def _posts(self) -> dict:
        """{rank: what it posted}: errors and markers."""
        store = _store()
        if store is None:
            return {}
        out = {}
        for rank in range(1, self.world_size):
            key = f"{STORE_PREFIX}{rank}"
            try:
                if store.check([key]):
                    out[rank] = store.get(key).decode(errors="replace")
            except Exception:  # noqa: BLE001 - store unusable: fall back to what else we know
                return out
        return out

    def _posted_errors(self) -> list:
        """[(rank, error line)] of ranks that failed with their own exception, lowest rank first."""
        return [(rank, text) for rank, text in sorted(self._posts().items()) if not text.startswith("~")]

    def signal_line(self) -> str:
        if self.sigusr1 == "requeue":
            return ("received SLURM's requeue signal (time limit near): Lightning saved a checkpoint and asked SLURM "
                    "to requeue the job, which stopped this attempt")
        return "received SIGUSR1 (no SLURM auto-requeue here: handled like SIGTERM) and stopped after the current step"


def _die_with_launcher():
    """A rank that Lightning launched from rank 0 dies with rank 0 (Linux: prctl PR_SET_PDEATHSIG = SIGKILL).

    However rank 0 ends (SIGKILL, the OOM killer, SIGTERM while it was still spawning this rank), no orphan is
    left holding a core, the terminal and the port until its own timeout. Rank 0 puts its pid in the environment
    only while Lightning spawns its ranks (RankWatch sets it, the spawn hook removes it), so the variable exists
    exactly in the ranks it launched: a rank that has it and whose parent is another pid is an orphan already.
    """
    if "LOCAL_RANK" not in os.environ:  # may become the launching rank 0
        os.environ[PARENT_ENV] = str(os.getpid())
        return
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None or parent == str(os.getpid()):
        return
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if str(os.getppid()) != parent:  # rank 0 is gone already: nobody to train with
        print(f"scalelab: rank {os.environ['LOCAL_RANK']}: the rank 0 that launched it (pid {parent}) is gone; "
              "stopping", file=sys.stderr, flush=True)
        os._exit(1)


def _is_lightning_requeue(handler) -> bool:
    """Lightning's SLURM auto-requeue handler (a _HandlersCompose holding _slurm_sigusr_handler_fn)."""
    return any(getattr(h, "__name__", "") == "_slurm_sigusr_handler_fn"
               for h in getattr(handler, "signal_handlers", None) or [])


def watch_of(trainer):
    return next((cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, RankWatch)), None)


def classify(exc, trainer, steps_done: int, own_line: str):
    """(status, one-line error) of a run that ended with `exc` on this rank.

    Rank 0 names the rank that failed first when a collective broke; another rank posts its own error for
    rank 0 (unless it only saw a broken collective itself: then it is a victim, not the cause).
    """
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    watch = watch_of(trainer)
    by_signal = isinstance(exc, (SIGTERMException, KeyboardInterrupt)) or (
        isinstance(exc, SystemExit) and isinstance(exc.__context__, KeyboardInterrupt))  # Lightning's Ctrl+C exit
    if watch is not None:
        watch.begin_failure()
        if watch.rank != 0 and (by_signal or watch.sigterm_seen):
            watch.post_error(MARK_SIGNAL)
    if watch is not None and watch.sigusr1 == "requeue":  # the job comes back: whatever ended this attempt
        cause = "" if isinstance(exc, SIGTERMException) else f"; then {own_line}"
        return "preempted", watch.signal_line() + cause
    if by_signal:
        if watch is not None and watch.sigusr1 == "stop" and isinstance(exc, SIGTERMException):
            return "timeout", watch.signal_line()
        if watch is not None and watch.rank == 0 and watch.world_size > 1 and isinstance(exc, SIGTERMException):
            # torchrun (and srun) send SIGTERM to every rank once one failed: then that rank is the story
            peer = watch.culprit(None, steps_done, wait_s=0)
            if peer:
                return "failed", peer
        if isinstance(exc, SIGTERMException):
            return "timeout", ("received SIGTERM (job time limit, preemption or scancel) " +
                               ("and stopped after the current step" if steps_done else "before the first step"))
        return "timeout", "interrupted (Ctrl+C)"
    if watch is None:
        return "failed", own_line
    if getattr(trainer, "global_rank", 0) != 0:
        if not watch.sigterm_seen:  # else it posted MARK_SIGNAL above
            watch.post_error(MARK_PEER if is_peer_failure(exc) else own_line)
        return "failed", own_line
    joined = _rendezvous_timeout(exc)
    if joined is not None:
        return "failed", watch.not_joined(*joined)
    peer = watch.culprit(exc, steps_done, silent=False)
    if peer:
        return "failed", peer
    if watch.sigterm_seen:
        # Lightning (2.5+) broadcasts inside its SIGTERM handler on every rank; when that lands between the
        # collectives of a step, the ranks fall out of step and a collective times out (--timeout).
        return "timeout", ("received SIGTERM (job time limit, preemption or scancel), then the ranks did not stop "
                           f"together: {watch.culprit(exc, steps_done, wait_s=0) or own_line}")
    return "failed", watch.culprit(exc, steps_done, wait_s=0) or own_line


def _rendezvous_timeout(exc):
    """(arrived, expected) when the process group never formed: torch's "1/2 clients joined"."""
    import re

    match = re.search(r"(\d+)/(\d+) clients joined", str(exc))
    return (int(match.group(1)), int(match.group(2))) if match else None


def stop_children(trainer):
    watch = watch_of(trainer)
    if watch is not None:
        watch.stop_children()


def describe_dead(dead) -> str:
    parts = []
    for rank, code in dead:
        if code is None:
            how = "its process is gone"
        elif code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        parts.append(f"rank {rank} stopped responding ({how})")
    return "; ".join(parts) if parts else "a rank stopped responding"


def is_peer_failure(exc) -> bool:
    """A collective or rendezvous broke: the cause may be another rank."""
    try:
        import torch.distributed as dist

        if isinstance(exc, dist.DistError):
            return True
    except (ImportError, AttributeError):
        pass
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        marker in text for marker in ("gloo", "Gloo", "Connection closed", "Connection reset", "Broken pipe",
                                      "NCCL", "timed out", "Timed out", "timeout", "ProcessGroup"))


_STATES = {"R": "running", "S": "sleeping", "D": "waiting on I/O", "T": "stopped, e.g. by SIGSTOP",
           "t": "stopped by a debugger"}


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            code = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "state unknown"
    return _STATES.get(code, f"state {code}")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has ended
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True


def _store():
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - private API: without it we still name dead launched children
        pass
    return None


# --- test hook ------------------------------------------------------------------------------------------

class InjectFault(pl.Callback):
    def __init__(self, kind: str, step: int):
        self.kind, self.step = kind, step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step + 1 != self.step:
            return
        if self.kind == "raise":
            raise RuntimeError(f"injected fault (SCALELAB_FAULT, rank {trainer.global_rank}, step {self.step})")
        if self.kind == "exit":
            os._exit(3)


def parse_fault(text: str) -> dict:
    """'raise@step=5,rank=1' -> {'kind': 'raise', 'step': 5, 'rank': 1}."""
    kind, _, rest = text.strip().partition("@")
    spec = {"kind": kind, "rank": 0}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            spec[key.strip()] = float(value) if key.strip() == "start" else int(value)
        except ValueError:
            spec["kind"] = None  # reported below
    if spec["kind"] not in ("raise", "exit", "sleep") or (kind == "sleep") != ("start" in spec) or \
            (kind != "sleep" and "step" not in spec):
        raise ValueError(f"SCALELAB_FAULT={text!r}: expected raise@step=N,rank=R, exit@step=N,rank=R "
                         "or sleep@start=S,rank=R")
    return spec


def from_env(environ=None) -> list:
    """Callbacks for SCALELAB_FAULT (tests only); [] when it is unset. A `sleep` fault sleeps right here,
    before the process group forms, so the rank joins late."""
    from scalelab.errors import UsageError
    from scalelab.launch import cluster

    environ = os.environ if environ is None else environ
    if not environ.get("SCALELAB_FAULT"):
        return []
    try:
        spec = parse_fault(environ["SCALELAB_FAULT"])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if spec["rank"] != cluster.env_rank():
        return []
    if spec["kind"] == "sleep":
        time.sleep(spec["start"])
        return []
    return [InjectFault(spec["kind"], spec["step"])]
