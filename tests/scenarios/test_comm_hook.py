"""The timed all-reduce hook hands DDP the reduced bucket: with it the gradients (and so the update) are exactly
those of DDP's own all-reduce, with gradient_as_bucket_view off and on. Two real gloo processes."""

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
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
    clock, shapes = comm.CommTimer(), []

    def checked(state, bucket):  # DDP's contract: the future holds the reduced bucket, of the bucket's size
        def record(f):
            shapes.append((tuple(f.value().shape), tuple(bucket.buffer().shape)))
            return f.value()
        return comm.timed_allreduce_hook(state, bucket).then(record)

    if hooked:
        ddp.register_comm_hook(clock, checked)
    torch.manual_seed(1 + rank)  # each rank its own data: the average differs from either rank's gradient
    ddp(torch.randn(16, 32)).square().mean().backward()
    timed = comm.CommTimer.resolve(clock.cut())[1]
    return [p.grad.tolist() for p in net.parameters()], timed, shapes  # lists: no shared memory


def _divisions(hook, rank):
    """Passes over a whole bucket that divide it, in one hooked backward (torch's own ops, seen as they run)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Divisions(TorchDispatchMode):
        seen = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in ("div", "div_", "mul", "mul_") and args[0].numel() >= 64 * 32:
                Divisions.seen += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    ddp = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 8)), gradient_as_bucket_view=True)
    if hook == "timed":
        ddp.register_comm_hook(comm.CommTimer(), comm.timed_allreduce_hook)
    else:
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    loss = ddp(torch.randn(16, 32)).square().mean()
    with Divisions():
        loss.backward()
    return Divisions.seen


def _cases(rank, out):
    got = {case: _grads(*case, rank) for case in CASES}
    got["divisions"] = {hook: _divisions(hook, rank) for hook in ("timed", "pytorch")}
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


def test_the_timed_hook_averages_inside_the_collective_with_no_pass_of_its_own(by_case):
    """A registered hook turns off DDP's divide-while-copying; PyTorch's allreduce_hook then divides the bucket
    before its all-reduce, one more pass over every gradient. The timed hook asks the collective for the average
    (ReduceOp.AVG) instead: no division of its own, as DDP without a hook."""
    assert by_case["divisions"] == {"timed": 0, "pytorch": 1}
