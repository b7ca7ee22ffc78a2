"""What a step ran, observed inside it (train/observe.py): the ops a TorchDispatchMode sees, on real tensors."""

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
