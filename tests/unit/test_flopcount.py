"""Counted FLOPs (train/flopcount.py): the analytic figure where a workload has one, and nothing of the run
touched by the count."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers import ROOT
from scalelab import config, workloads
from scalelab.train import flopcount


def _built(*argv, batch=4):
    cfg = config.parse_config(list(argv))
    return workloads.build(cfg, batch, 1)


def test_the_count_of_a_gpt_step_is_its_analytic_figure_to_the_flop():
    """6 per matmul weight and the full T x T attention: what torch counts."""
    wl = _built("--model", "gpt", "--preset", "tiny")
    assert flopcount.count(wl.module, wl.train_set, 4) == (wl.flops_per_sample, flopcount.COUNTED)


def test_with_lora_the_count_leaves_out_the_first_adapted_layers_input_gradient_as_the_docstring_says():
    """LoRA's frozen weights cost 4 each, as counted; the analytic convention keeps the input gradient of block 0's
    qkv (d -> 3d) and its adapter (d -> r), which autograd skips: 2·d·3d + 2·d·r per token."""
    from scalelab.workloads.presets import PRESETS

    wl = _built("--model", "gpt", "--preset", "tiny", "--lora_rank", "4", "--seq_len", "64")
    counted, _ = flopcount.count(wl.module, wl.train_set, 4)
    d = PRESETS["tiny"].d_model
    assert wl.flops_per_sample - counted == 64 * (2 * d * 3 * d + 2 * d * 4)


def test_the_mlps_count_leaves_out_the_first_layers_input_gradient_as_its_docstring_says():
    wl = _built("--model", "mlp", "--hidden_dims", "64", "32")
    counted, _ = flopcount.count(wl.module, wl.train_set, 8)
    assert wl.flops_per_sample - counted == 2 * 2 * 64  # the spiral's 2 inputs x 64 units: no gradient wanted


class _Norm(nn.Module):
    """A module whose forward changes its state (running statistics) and draws random numbers (dropout)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.Dropout(0.5), nn.Linear(5, 2))

    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)


def test_counting_touches_nothing_of_the_run():
    """The run's module (weights, running statistics, gradients) and the random state are what they were."""
    torch.manual_seed(0)
    module = _Norm()
    data = torch.utils.data.TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,)))
    before = {k: v.clone() for k, v in module.state_dict().items()}
    rng = torch.random.get_rng_state()
    counted, how = flopcount.count(module, data, 8)
    assert counted == 6 * (3 * 5 + 5 * 2) - 2 * 3 * 5 and how == flopcount.COUNTED  # the input needs no gradient
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    assert all(p.grad is None and p.device.type == "cpu" for p in module.parameters())
    assert torch.equal(rng, torch.random.get_rng_state())


class _Host(_Norm):
    def training_step(self, batch, i):
        loss = super().training_step(batch, i)
        if loss.item() > 1e9:  # a value read on the host: a meta tensor has none
            raise RuntimeError("diverged")
        return loss


def test_a_step_meta_tensors_cannot_run_is_no_figure_and_says_why():
    data = torch.utils.data.TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,)))
    counted, how = flopcount.count(_Host(), data, 8)
    assert counted is None and how.startswith("not counted (a meta step failed: ")


def test_the_example_workload_is_counted_when_a_run_builds_it(monkeypatch):
    """A user's workload without FLOPs: the run's build counts them (train/prepare.py), and the result says how."""
    import importlib.util
    from types import SimpleNamespace

    from scalelab.train import prepare

    spec = importlib.util.spec_from_file_location("tiny_cnn", ROOT / "examples" / "tiny_cnn" / "tiny_cnn.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(workloads.REGISTRY, "mlp", module.SPEC)  # its spec, under a name config already knows
    cfg = config.parse_config(["--model", "mlp"])
    cfg.width, cfg.max_steps, cfg.num_samples = 8, 4, None
    ctx = SimpleNamespace(cfg=cfg, batch=4, launch=SimpleNamespace(world_size=1, backend="gloo"), workload=None)
    prepare.build_workload(SimpleNamespace(seed_everything=lambda *a, **k: None), ctx)
    assert ctx.workload.flops_from == flopcount.COUNTED and ctx.workload.flops_per_sample > 0
    again, _ = flopcount.count(ctx.workload.module, ctx.workload.train_set, 4)
    assert again == ctx.workload.flops_per_sample


class _Keyed(nn.Module):
    """A step whose batches are dicts, over a tied weight."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4, bias=False)
        self.b = nn.Linear(4, 4, bias=False)
        self.b.weight = self.a.weight

    def training_step(self, batch, i):
        return self.b(self.a(batch["x"])).square().mean()


class _Dicts(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"x": torch.full((4,), float(i))}


def test_a_batch_keeps_its_shape_and_no_weight_is_copied(monkeypatch):
    """A dict batch reaches the step as a dict; no parameter or buffer is deep-copied (a model of billions would be
    copied on every rank of a node): a tied weight stays one meta parameter."""
    def refuse(self, memo):
        raise AssertionError("a weight was copied")

    monkeypatch.setattr(torch.nn.Parameter, "__deepcopy__", refuse)
    module = _Keyed()
    counted, how = flopcount.count(module, _Dicts(), 2)
    assert how == flopcount.COUNTED and counted == 2 * 2 * 16 + 2 * 16 + 2 * 2 * 16  # b: in+weight grads; a: weight
    assert module.a.weight.device.type == "cpu" and module.a.weight is module.b.weight


LOSSES = st.one_of(
    st.tuples(st.lists(st.integers(0, 3), max_size=3),
              st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.int64]),
              st.sampled_from(["param", "detached", "no_grad", "constant"])),
    st.sampled_from([None, 1.5, "loss", [1.0], {"loss": 1.0}]))


def _loss(drawn):
    """A training_step's output: a tensor of the drawn shape and dtype, made from a parameter (or not), or another
    value a step might return."""
    if not isinstance(drawn, tuple):
        return drawn
    shape, dtype, how = drawn
    weight = nn.Parameter(torch.ones(()))
    if how == "constant":
        return torch.ones(shape, dtype=dtype)
    with torch.set_grad_enabled(how != "no_grad"):
        out = (weight * torch.ones(shape)).to(dtype)
    return out.detach() if how == "detached" else out


@settings(max_examples=150, deadline=None)
@given(drawn=LOSSES)
def test_a_loss_is_refused_exactly_when_the_loops_backward_would_fail_on_it(drawn):
    """The rule is torch's, not a list of cases: whatever a step returns, loss_problem says nothing where
    `loss.backward()` (what the loop calls) works, and says what it is where it does not."""
    loss = _loss(drawn)
    try:
        loss.backward()
        works = True
    except (AttributeError, RuntimeError):
        works = False
    problem = flopcount.loss_problem(loss)
    assert (problem is None) == works, (drawn, problem)


def test_a_step_that_returns_no_loss_is_refused_saying_what_it_returned():
    """Its meta copy runs the step: a per-sample loss is found before any rank meets, not as a failed run."""
    class PerSample(_Norm):
        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y, reduction="none")

    data = torch.utils.data.TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,)))
    with pytest.raises(flopcount.NoLoss, match=r"^a tensor of shape \(8,\), not one value"):
        flopcount.count(PerSample(), data, 8)
