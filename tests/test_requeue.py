"""SLURM's requeue signal is handled at a batch boundary every rank agrees on, never inside the signal handler."""

import signal

import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from conftest import two_gloo_ranks
from scalelab.train.signals import REQUEUE_CHECK_EVERY, RunSignals


def _rank(rank: int, out):
    sig, ran = RunSignals(), []
    sig.requeue = lambda signum, frame: ran.append(batch)
    for batch in range(1, 3 * REQUEUE_CHECK_EVERY):
        if rank == 1 and batch == 3:
            sig.requeue_due = True  # what the SIGUSR1 handler sets: only on rank 1, mid-run
        try:
            sig.requeue_if_due(batch, 2, torch.device("cpu"))
        except SIGTERMException:  # the attempt ends at the batch where the handler ran
            break
    out.put((rank, ran, sig.sigusr1, batch))


def test_ranks_run_the_requeue_handler_at_the_same_batch():
    got = sorted(two_gloo_ranks(_rank, timeout=120))
    # rank 0 never got the signal, yet both ran the handler once, at the first check after it arrived
    assert got == [(r, [REQUEUE_CHECK_EVERY], "requeue", REQUEUE_CHECK_EVERY) for r in (0, 1)]


def test_one_rank_runs_it_at_the_next_batch_and_not_in_the_handler():
    sig, ran = RunSignals(), []
    sig.requeue = lambda signum, frame: ran.append(signum)
    sig.requeue_if_due(1, 1, torch.device("cpu"))
    sig.requeue_due = True
    assert ran == []  # the signal only marks it
    with pytest.raises(SIGTERMException):  # it ran, and this attempt ends here
        sig.requeue_if_due(2, 1, torch.device("cpu"))
    assert ran == [signal.SIGUSR1] and sig.sigusr1 == "requeue" and sig.ending
    assert signal.getsignal(signal.SIGTERM) == sig._sigterm_at_startup  # the requeue's SIGTERM is ignored
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
