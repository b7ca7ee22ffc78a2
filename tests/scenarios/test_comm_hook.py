"""The timed all-reduce hook hands DDP the reduced bucket: with it (a sum of gradients the loss divided by the ranks,
comm.attach) the gradients, and so the update, are exactly those of DDP's own average, with gradient_as_bucket_view
off and on; FSDP's reduce-scatter, made a plain sum the same way, gives DDP's average too. Two real gloo processes.
(Under Adam a gradient off by the world size trains almost alike: the gradients themselves are compared.)"""

from unittest import mock

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

    timed_hook = comm.timed_allreduce_hook

    def checked(state, bucket):  # DDP's contract: the future holds the reduced bucket, of the bucket's size
        def record(f):
            shapes.append((tuple(f.value().shape), tuple(bucket.buffer().shape)))
            return f.value()
        return timed_hook(state, bucket).then(record)

    if hooked:  # the run's hook as comm.attach registers it, checked; and what the loop divides the loss by
        with mock.patch.object(comm, "timed_allreduce_hook", checked):
            comm.attach(ddp, clock)
    torch.manual_seed(1 + rank)  # each rank its own data: the average differs from either rank's gradient
    (ddp(torch.randn(16, 32)).square().mean() / clock.average_over).backward()
    timed = comm.CommTimer.resolve(clock.cut())[1]
    return [p.grad.tolist() for p in net.parameters()], timed, shapes, clock.average_over  # lists: no shared memory


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


def _fsdp_against_ddp(rank):
    """One backward of a small GPT, FSDP2-sharded over both ranks with comm.attach (a summing reduce-scatter, the loss
    divided by average_over), and of the same GPT under DDP's own average: each rank's gradients as lists, and the
    reduce op the observer saw the reduce-scatter take."""
    from torch.distributed.device_mesh import init_device_mesh

    from scalelab.train.observe import StepObserver
    from scalelab.workloads.nets.transformer import GPTModule
    from scalelab.workloads.presets import TransformerShape

    shape = TransformerShape(2, 2, 32, 16, 64)
    torch.manual_seed(0)
    plain = DDP(GPTModule(shape, 1e-3).model)
    torch.manual_seed(0)
    module = GPTModule(shape, 1e-3).shard(init_device_mesh("cpu", (2,)), "32")
    timer = comm.CommTimer()
    comm.attach(module, timer)
    torch.manual_seed(1 + rank)
    idx = torch.randint(0, shape.vocab_size, (4, shape.seq_len))
    plain(idx).float().square().mean().backward()
    seen = StepObserver(at=0)
    with seen.watching(0, torch.optim.SGD(module.parameters())):
        (module.model(idx).float().square().mean() / timer.average_over).backward()
    sharded = [p.grad.full_tensor().tolist() for p in module.model.parameters()]
    return [p.grad.tolist() for p in plain.module.parameters()], sharded, seen.wire, timer.average_over


def _cases(rank, out):
    got = {case: _grads(*case, rank) for case in CASES}
    got["divisions"] = {hook: _divisions(hook, rank) for hook in ("timed", "pytorch")}
    got["fsdp"] = _fsdp_against_ddp(rank)
    if rank == 0:
        out.put(got)
    else:
        out.put(None)


@pytest.fixture(scope="module")
def by_case():
    return next(got for got in two_gloo_ranks(_cases) if got is not None)


@pytest.mark.parametrize("bucket_view", [False, True])
def test_hooked_gradients_equal_ddps_own(by_case, bucket_view):
    plain, _, _, one = by_case[(bucket_view, False)]
    hooked, buckets, shapes, divided = by_case[(bucket_view, True)]
    assert buckets >= 1 and len(shapes) == buckets  # the hook ran (and timed) every bucket's all-reduce
    assert all(got == bucket for got, bucket in shapes), shapes  # the whole bucket, not a 0-d view of it
    assert (one, divided) == (1, 2)  # DDP's own hook divides itself; the run's sums what the loss divided
    assert hooked == plain  # exactly: a division by 2 is exact, before or after the sum


def test_the_timed_hook_sums_with_no_pass_of_its_own(by_case):
    """A registered hook turns off DDP's divide-while-copying; PyTorch's allreduce_hook then divides the bucket
    before its all-reduce, one more pass over every gradient. The timed hook sums gradients the loss was divided for
    (one scalar op, not counted here): no pass over a bucket of its own, as DDP without a hook."""
    assert by_case["divisions"] == {"timed": 0, "pytorch": 1}


def test_fsdps_summing_reduce_scatter_gives_ddps_average(by_case):
    """FSDP2 averages with ReduceOp.AVG unless told otherwise; the run makes it a plain sum of gradients the loss
    divided by the ranks (comm.attach): every gradient equals DDP's average, to float32 rounding (another order of
    additions), and the observed reduce-scatter says SUM."""
    plain, sharded, wire, divided = by_case["fsdp"]
    assert divided == 2 and wire["_reduce_scatter_base_"]["op"] == "SUM"
    flat = [(a, b) for p, q in zip(plain, sharded) for a, b in zip(torch.tensor(p).flatten().tolist(),
                                                                   torch.tensor(q).flatten().tolist())]
    assert len(flat) > 1000 and max(abs(a - b) for a, b in flat) < 1e-6 * max(abs(a) for a, _ in flat)
