"""Analytic training FLOPs (Workload.flops_per_sample) against torch's FlopCounterMode on a real step.

The counter counts matmuls only (mm, addmm without the bias add, bmm, SDPA), which is exactly what the
analytic figures count, so every check is exact: where the two conventions differ, the test names the
difference (a skipped input gradient, attention recomputation) and adds it, rather than hiding it in
a tolerance.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from scalelab import config, record
from scalelab.workloads import build, data
from scalelab.workloads.gpt import lora_params
from scalelab.workloads.presets import TransformerShape

BATCH = 3
aten = torch.ops.aten
CPU_SDPA = aten._scaled_dot_product_flash_attention_for_cpu
CPU_SDPA_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward


@pytest.fixture(autouse=True)
def cpu_sdpa_formulas():
    """torch has SDPA formulas for the CUDA kernels only and counts the CPU one as 0: lend it the same ones.

    The backward formula is torch's own, which includes recomputing the T x T scores (flash kernels do).
    """
    added = []
    formulas = {
        CPU_SDPA: lambda q, k, v, *args, out_shape=None, **kw: flop_counter.sdpa_flop_count(q, k, v),
        CPU_SDPA_BACKWARD: lambda g, q, k, v, *args, out_shape=None, **kw:
            flop_counter.sdpa_backward_flop_count(g, q, k, v),
    }
    for op, formula in formulas.items():
        if op not in flop_counter.flop_registry:  # a later torch may bring its own
            flop_counter.register_flop_formula(op)(formula)
            added.append(op)
    yield
    for op in added:
        del flop_counter.flop_registry[op]


def workload(*argv):
    return build(config.parse_config(list(argv)), BATCH, 1)


def counted_per_sample(wl):
    """FLOPs of one forward + backward over a batch, per sample, and the counts by op."""
    batch = next(iter(data.train_loader(wl.train_set, BATCH, rank=0, world_size=1, seed=0)))
    counter = FlopCounterMode(display=False)
    with counter:
        wl.module.training_step(batch, 0).backward()
    by_op = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    return counter.get_total_flops() / BATCH, by_op


def shape_of(wl):
    return wl.module.model.shape


def attention_recompute_per_sample(shape):
    """Flash backward recomputes the scores q @ k^T: 2·Q·T² per head and layer, not in the 12·L·H·Q·T term."""
    return 2 * shape.n_layer * shape.n_head * shape.head_dim * shape.seq_len ** 2


@pytest.mark.parametrize("hidden", [["64", "32", "16"], ["128", "7"]])
def test_mlp_flops_are_6n_less_the_first_input_gradient(hidden):
    wl = workload("--model", "mlp", "--hidden_dims", *hidden)
    weights = [m.weight for m in wl.module.modules() if isinstance(m, torch.nn.Linear)]
    assert wl.flops_per_sample == 6 * sum(w.numel() for w in weights)
    counted, _ = counted_per_sample(wl)
    # 6N counts an input gradient for the first layer too; autograd skips it (the data needs none).
    assert counted == wl.flops_per_sample - 2 * weights[0].numel()
    assert wl.trainable_params == wl.n_params == sum(p.numel() for p in wl.module.parameters())


def test_tiny_transformer_flops_by_hand():
    # L=4, H=4, d=256 (Q=64), T=128, V=512: matmul weights 4·12·256² + 256·512 (the tied LM head) = 3,276,800
    wl = workload("--model", "transformer", "--preset", "tiny")
    assert shape_of(wl).matmul_params() == 3_276_800
    attention = 12 * 4 * 4 * 64 * 128
    assert wl.flops_per_sample == 128 * (6 * 3_276_800 + attention) == 2_717_908_992
    assert wl.trainable_params == wl.n_params == shape_of(wl).total_params() == 3_323_392


@pytest.mark.parametrize("argv", [[], ["--seq_len", "64"], ["--seq_len", "96", "--vocab_size", "1000"]])
def test_transformer_flops_match_the_counter(argv):
    wl = workload("--model", "transformer", "--preset", "tiny", *argv)
    counted, by_op = counted_per_sample(wl)
    assert by_op[str(CPU_SDPA)] > 0 and by_op[str(CPU_SDPA_BACKWARD)] > 0  # the fused kernel ran and was counted
    recompute = attention_recompute_per_sample(shape_of(wl))
    assert counted == wl.flops_per_sample + recompute
    assert recompute / counted < 0.015  # 1.2 % at seq_len 128: model FLOPs leave it out


def test_attention_term_is_the_explicit_matmuls(monkeypatch):
    """With q @ k^T, softmax, @ v spelled out (no recomputation), analytic and counted agree exactly."""
    def explicit(q, k, v, is_causal=False):
        t = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v

    monkeypatch.setattr(F, "scaled_dot_product_attention", explicit)
    wl = workload("--model", "transformer", "--preset", "tiny", "--seq_len", "64")
    counted, by_op = counted_per_sample(wl)
    assert str(CPU_SDPA) not in by_op
    assert counted == wl.flops_per_sample


def test_lora_flops_skip_the_frozen_weight_gradients():
    r = 4
    wl = workload("--model", "transformer", "--preset", "tiny", "--lora_rank", str(r))
    shape = shape_of(wl)
    d, t = shape.d_model, shape.seq_len
    attention = 12 * shape.n_layer * shape.n_head * shape.head_dim * t
    assert wl.flops_per_sample == t * (4 * shape.matmul_params() + 6 * lora_params(shape, r) + attention)
    assert wl.trainable_params == lora_params(shape, r) == 65_536
    counted, _ = counted_per_sample(wl)
    # Nothing before block 0's qkv needs a gradient (embeddings frozen): autograd skips its input gradients,
    # base (d -> 3d) and adapter A (d -> r), which the 4N + 6N_lora convention counts.
    skipped = t * (2 * d * 3 * d + 2 * d * r)
    assert counted == wl.flops_per_sample - skipped + attention_recompute_per_sample(shape)
    full = workload("--model", "transformer", "--preset", "tiny").flops_per_sample
    assert 0.6 < wl.flops_per_sample / full < 0.75  # no weight-gradient matmuls: about 2/3 of the compute


def test_a_multi_rank_result_records_tflops_per_device_and_its_mfu():
    """samples_per_s is the whole run's (every rank's samples): per device it is divided by the world size.
    8 A100s at 40,000 samples/s of a 1.2 GFLOP sample: 48 TFLOP/s over 8 = 6 TFLOP/s each; bf16 peak 312."""
    from types import SimpleNamespace

    from scalelab.train.payload import throughput

    ctx = SimpleNamespace(workload=SimpleNamespace(flops_per_sample=1.2e9, flops_from="analytic"),
                          cfg=SimpleNamespace(precision="bf16-mixed"), launch=SimpleNamespace(world_size=8,
                                                                                             accelerator="gpu"))
    got = throughput(ctx, record.Timing(samples_per_s=40_000.0), [{"device_name": "NVIDIA A100-SXM4-80GB"}])
    assert got == {"flops_per_sample": 1.2e9, "flops_from": "analytic", "tflops_per_device": pytest.approx(6.0),
                   "peak_tflops": 312.0, "mfu": pytest.approx(6.0 / 312.0)}
    cpu = throughput(SimpleNamespace(**{**vars(ctx), "launch": SimpleNamespace(world_size=2, accelerator="cpu")}),
                     record.Timing(samples_per_s=40_000.0), [{"device_name": "cpu"}])
    assert cpu["tflops_per_device"] == pytest.approx(24.0) and cpu["peak_tflops"] is None and cpu["mfu"] is None
    assert "peak_note" not in cpu  # the report says what a CPU lacks itself
    a40 = throughput(ctx, record.Timing(samples_per_s=40_000.0), [{"device_name": "NVIDIA A40"}])
    assert a40["peak_tflops"] == 149.7 and "peak_note" not in a40  # its tensor-core bf16 rate, not the 37.4 fp32 one
    a10g = throughput(ctx, record.Timing(samples_per_s=40_000.0), [{"device_name": "NVIDIA A10G"}])
    assert (a10g["peak_tflops"], a10g["mfu"]) == (None, None)
    assert a10g["peak_note"] == "NVIDIA A10G is not in scalelab's datasheet table"


def test_flops_formulas_by_hand():
    from scalelab.perfmodel import flops

    # 6 N + 12 L H Q T = 6,000 + 12 x 2 x 4 x 8 x 16 = 18,288; causal kernels skip half the attention term
    assert flops.transformer_flops_per_token(1000, n_layer=2, n_head=4, head_dim=8, seq_len=16) == 18288
    assert flops.transformer_flops_per_token(1000, n_layer=2, n_head=4, head_dim=8, seq_len=16, causal=True) == 12144
    shape = TransformerShape(n_layer=2, n_head=4, d_model=32, seq_len=16, vocab_size=50)
    assert flops.transformer_flops_per_token(shape, seq_len=8) == 6 * shape.matmul_params() + 12 * 2 * 4 * 8 * 8
    with pytest.raises(ValueError, match="^with an explicit parameter count, also give n_head, seq_len$"):
        flops.transformer_flops_per_token(1000, n_layer=2, head_dim=8)
    with pytest.raises(ValueError, match="^n_layer must be a positive number, got 0$"):
        flops.transformer_flops_per_token(shape, n_layer=0)
    assert flops.dense_flops_per_sample(100) == 600
    assert flops.iteration_tflop_per_gpu(2, 2048, 16, 8, recompute=True) == pytest.approx(65.536)
    assert flops.iteration_tflop_per_gpu(2, 2048, 16, 8, recompute=False) == pytest.approx(49.152)
    with pytest.raises(ValueError, match="^gpus must be a positive number, got 0$"):
        flops.iteration_tflop_per_gpu(2, 2048, 16, 0, recompute=False)


def test_every_shape_field_can_be_overridden_and_each_bad_one_is_named():
    from scalelab.perfmodel import flops

    shape = TransformerShape(n_layer=2, n_head=4, d_model=32, seq_len=16, vocab_size=50)
    got = flops.transformer_flops_per_token(shape, n_layer=3, n_head=2, head_dim=5, seq_len=7)
    assert got == 6 * shape.matmul_params() + 12 * 3 * 2 * 5 * 7
    with pytest.raises(ValueError, match="^with an explicit parameter count, also give n_layer, n_head, head_dim, "
                                         "seq_len$"):
        flops.transformer_flops_per_token(1000)
    for bad in ("n_layer", "n_head", "head_dim", "seq_len"):
        given = {"n_layer": 2, "n_head": 4, "head_dim": 8, "seq_len": 16, bad: 0}
        with pytest.raises(ValueError, match=f"^{bad} must be a positive number, got 0$"):
            flops.transformer_flops_per_token(1000, **given)
    with pytest.raises(ValueError, match="^n_params must be a positive number, got 0$"):
        flops.transformer_flops_per_token(0, n_layer=2, n_head=4, head_dim=8, seq_len=16)
    for i, bad in enumerate(("params_billion", "seq_len", "global_batch")):
        args = [2, 2048, 16, 8]
        args[i] = 0
        with pytest.raises(ValueError, match=f"^{bad} must be a positive number, got 0$"):
            flops.iteration_tflop_per_gpu(*args, recompute=False)
