"""SLURM's requeue signal is handled at a batch boundary every rank agrees on, never inside the signal handler."""

import signal

import torch

from conftest import two_gloo_ranks
from scalelab.train.signals import REQUEUE_CHECK_EVERY, RunSignals


def _rank(rank: int, out):
    sig, ran = RunSignals(), []
    sig.requeue = lambda signum, frame: ran.append(batch)
    for batch in range(1, 3 * REQUEUE_CHECK_EVERY):
        if rank == 1 and batch == 3:
            sig.requeue_due = True  # what the SIGUSR1 handler sets: only on rank 1, mid-run
        sig.requeue_if_due(batch, 2, torch.device("cpu"))
    out.put((rank, ran, sig.sigusr1))


def test_ranks_run_the_requeue_handler_at_the_same_batch():
    got = sorted(two_gloo_ranks(_rank, timeout=120))
    # rank 0 never got the signal, yet both ran the handler once, at the first check after it arrived
    assert got == [(0, [REQUEUE_CHECK_EVERY], "requeue"), (1, [REQUEUE_CHECK_EVERY], "requeue")]


def test_one_rank_runs_it_at_the_next_batch_and_not_in_the_handler():
    sig, ran = RunSignals(), []
    sig.requeue = lambda signum, frame: ran.append(signum)
    assert not sig.requeue_if_due(1, 1, torch.device("cpu"))
    sig.requeue_due = True
    assert ran == []  # the signal only marks it
    assert sig.requeue_if_due(2, 1, torch.device("cpu")) and ran == [signal.SIGUSR1] and sig.sigusr1 == "requeue"
    assert not sig.requeue_if_due(3, 1, torch.device("cpu")) and len(ran) == 1
