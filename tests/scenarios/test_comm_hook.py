"""The timed all-reduce hook hands DDP the reduced bucket: with it the gradients (and so the update) are exactly
those of DDP's own all-reduce, with gradient_as_bucket_view off and on. Two real gloo processes."""

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers import two_gloo_ranks
from scalelab.train import comm

pytestmark = pytest.mark.slow
CASES = [(view, hooked) for view in (False, True) for hooked in (False, True)]


def _grads(bucket_view, hooked, rank):
    """One backward of a small DDP net: (gradients as lists, buckets timed, (result, bucket) shapes per bucket)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ddp = DDP(net, gradient_as_bucket_view=bucket_view)
    clock, shapes = comm.BucketClock(), []

    def checked(state, bucket):  # DDP's contract: the future holds the reduced bucket, of the bucket's size
        def record(f):
            shapes.append((tuple(f.value().shape), tuple(bucket.buffer().shape)))
            return f.value()
        return comm.timed_allreduce_hook(state, bucket).then(record)

    if hooked:
        ddp.register_comm_hook(clock, checked)
    torch.manual_seed(1 + rank)  # each rank its own data: the average differs from either rank's gradient
    ddp(torch.randn(16, 32)).square().mean().backward()
    timed = comm.BucketClock.resolve(clock.cut())[1]
    return [p.grad.tolist() for p in net.parameters()], timed, shapes  # lists: no shared memory


def _cases(rank, out):
    got = {case: _grads(*case, rank) for case in CASES}
    if rank == 0:
        out.put(got)
    else:
        out.put(None)


@pytest.fixture(scope="module")
def by_case():
    return next(got for got in two_gloo_ranks(_cases) if got is not None)


@pytest.mark.parametrize("bucket_view", [False, True])
def test_hooked_gradients_equal_ddps_own(by_case, bucket_view):
    plain, _, _ = by_case[(bucket_view, False)]
    hooked, buckets, shapes = by_case[(bucket_view, True)]
    assert buckets >= 1 and len(shapes) == buckets  # the hook ran (and timed) every bucket's all-reduce
    assert all(got == bucket for got, bucket in shapes), shapes  # the whole bucket, not a 0-d view of it
    assert hooked == plain
