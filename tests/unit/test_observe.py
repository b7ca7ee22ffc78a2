"""What a step ran, observed inside it (train/observe.py): the ops a TorchDispatchMode sees, on real tensors."""

import sys

import pytest
import torch

from scalelab.train import observe


def step(seen, model, optimizer, at=0, autocast=False, x=None):
    x = torch.randn(4, 8) if x is None else x
    with seen.watching(at, optimizer), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(x).float().pow(2).mean()
    with seen.watching(at, optimizer):
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("kind,kwargs", [("for-loop", {"foreach": False}), ("foreach", {"foreach": True})])
def test_the_update_path_is_read_from_the_kernels_that_ran(kind, kwargs):
    if "torch._dynamo.utils" in sys.modules:  # a graph another test of this process compiled is counted process-wide
        sys.modules["torch._dynamo.utils"].counters.clear()
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters(), **kwargs)
    seen = observe.StepObserver(at=0)
    step(seen, model, optimizer)
    got = seen.record()
    assert got["optimizer"] == kind and got["param_dtypes"] == ["float32"] and got["grad_dtypes"] == ["float32"]
    assert got["matmul_dtypes"] == ["float32"] and got["wire"] == {} and got["compiled_graphs"] in (0, None)


def test_a_fused_update_is_named_fused():
    seen = observe.StepObserver(at=0)
    seen.optimizer_stepped, seen.optimizer_ops = True, {"_fused_adamw_", "_foreach_add_"}
    assert seen.optimizer_kind() == "fused"
    seen.optimizer_ops = {"_foreach_lerp_", "addcdiv_"}
    assert seen.optimizer_kind() == "foreach"
    seen.optimizer_stepped = False  # a step that never updated (a probe) says nothing of the optimizer
    assert seen.optimizer_kind() is None


def test_only_the_watched_step_is_seen_and_its_hooks_go_with_it():
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
    seen = observe.StepObserver(at=1)
    step(seen, model, optimizer, at=0, autocast=True)  # not the watched step: nothing
    assert seen.record() is None
    step(seen, model, optimizer, at=1, autocast=True)
    assert seen.record()["matmul_dtypes"] == ["bfloat16"] and seen.done
    assert not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks
    seen.matmul_dtypes.clear()
    step(seen, model, optimizer, at=1)  # observed once: a resumed loop at the same index adds nothing
    assert seen.matmul_dtypes == set()


def test_the_forwards_matmuls_and_attention_are_told_from_the_backwards():
    q = torch.randn(2, 2, 8, 4, requires_grad=True)
    seen = observe.StepObserver(at=0)
    with seen.watching(0, torch.optim.SGD([q])):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        y.float().sum().backward()
    assert seen.attention and all(not a.endswith("_backward") for a in seen.attention)
    assert all(a.startswith("_scaled_dot_product") for a in seen.attention)


def test_a_collective_records_its_dtype_bytes_and_calls():
    seen = observe.StepObserver(at=0)
    tensors = [torch.zeros(10, dtype=torch.bfloat16), torch.zeros(5, dtype=torch.bfloat16)]
    fake = type("Op", (), {"namespace": "c10d", "__name__": "allreduce_.default"})()
    seen.op(fake, (tensors, None), None)
    seen.op(fake, ([torch.zeros(4)], None), None)
    assert seen.wire == {"allreduce_": {"dtype": "bfloat16,float32", "bytes": 30 + 16, "calls": 2}}


@pytest.fixture
def counted(monkeypatch):
    """The run's compile backend with a light inner compiler (the graph as Dynamo traced it: no Inductor build), its
    count fresh; Dynamo's caches cleared after (a frame Dynamo gave up on stays given up in this process)."""
    import torch._dynamo

    from scalelab.train import compiled

    backend = compiled.Counted(inner=lambda gm, example_inputs: gm.forward)
    monkeypatch.setattr(compiled, "BACKEND", backend)
    torch._dynamo.reset()
    yield backend
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # its count of graphs is the process's: the next test starts at none


class Stepped(torch.nn.Module):
    """A workload's module as --compile sees it: a training_step that calls its network (`step` calls the module)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def training_step(self, x):
        return self.net(x)

    def forward(self, x):
        return self.training_step(x)


def test_a_compiled_model_still_runs_its_graph_after_the_observed_step(counted):
    """The observer's mode must leave compiled regions alone: a mode Dynamo must respect makes it give up the model's
    frame while it is active, for good (torch 2.13), and every timed step after the observed one ran eager."""
    from scalelab.train import compiled

    holder = Stepped(torch.nn.Linear(8, 4))
    compiled.apply(holder)
    optimizer = torch.optim.SGD(holder.parameters(), lr=0.1)
    seen = observe.StepObserver(at=1)
    for at in range(4):
        before = counted.runs
        step(seen, holder, optimizer, at=at)
        assert counted.runs > before, f"step {at} ran no compiled graph"
    got = seen.record()
    assert got["compiled_steps"] == got["steps_after_warmup"] == 2
    assert got["matmul_dtypes"] == ["float32"]  # the compiled graph's matmul, seen as it ran


def test_an_eager_step_after_warm_up_is_counted_as_eager(counted):
    """A step that ran no compiled graph (Dynamo fell back, or nothing was compiled) is not a compiled step."""
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = observe.StepObserver(at=0)
    for at in range(3):
        step(seen, model, optimizer, at=at)
    got = seen.record()
    assert got["compiled_steps"] == 0 and got["steps_after_warmup"] == 2


def test_a_compiled_graphs_forward_matmuls_are_told_from_its_backwards(counted):
    """Inside an AOT-compiled graph the forward runs with grad mode off (its autograd.Function): the forward is
    told by the autograd engine, not by grad mode; bf16 autocast shows as bfloat16 matmuls."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    from scalelab.train import compiled

    counted.inner = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm.forward))
    holder = Stepped(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)))
    compiled.apply(holder)
    optimizer = torch.optim.SGD(holder.parameters(), lr=0.1)
    seen = observe.StepObserver(at=1)
    for at in range(3):
        step(seen, holder, optimizer, at=at, autocast=True)
    got = seen.record()
    assert got["matmul_dtypes"] == ["bfloat16"] and got["compiled_steps"] == 1
