"""LoRA (--lora_rank): a frozen base, trainable adapters that start as a no-op, and a small gradient."""

import pytest
import torch

from scalelab import config
from scalelab.errors import UsageError
from scalelab.workloads import build
from scalelab.workloads.gpt import lora_params
from scalelab.workloads.nets.transformer import GPT, GPTModule, LoRALinear
from scalelab.workloads.presets import TransformerShape

SHAPE = TransformerShape(n_layer=2, n_head=2, d_model=32, seq_len=16, vocab_size=64)
RANK = 4


def seeded(cls, *args, seed=0, **kwargs):
    torch.manual_seed(seed)
    return cls(*args, **kwargs)


def tokens(batch=3):
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, SHAPE.vocab_size, (batch, SHAPE.seq_len + 1), generator=g)


def test_fresh_adapters_leave_the_model_unchanged():
    base, lora = seeded(GPT, SHAPE), seeded(GPT, SHAPE, RANK)
    idx = tokens()[:, :-1]
    assert torch.equal(base(idx), lora(idx))  # B = 0: the adapter adds exact zeros


def test_only_adapters_train():
    model = seeded(GPT, SHAPE, RANK)
    wrapped = [m for m in model.modules() if isinstance(m, LoRALinear)]
    assert len(wrapped) == 4 * SHAPE.n_layer  # qkv, proj and both MLP layers of every block; not the head
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_a." in n or ".lora_b." in n for n in trainable)
    assert not model.tok.weight.requires_grad and not model.head.weight.requires_grad
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == lora_params(SHAPE, RANK)


def test_rank_0_is_full_training_as_before():
    model = seeded(GPT, SHAPE)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert all(p.requires_grad for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == SHAPE.total_params()


def test_workload_counts_adapters_as_trainable():
    full = build(config.parse_config(["--model", "gpt"]), 2, 1)
    lora = build(config.parse_config(["--model", "gpt", "--lora_rank", str(RANK)]), 2, 1)
    assert full.describe == "gpt tiny" and lora.describe == f"gpt tiny + LoRA r{RANK}"
    shape = lora.module.model.shape
    assert lora.trainable_params == lora_params(shape, RANK) == 65_536
    assert lora.n_params == full.n_params + lora.trainable_params  # the base is all there, frozen


def test_optimizer_steps_change_only_adapters():
    module = seeded(GPTModule, SHAPE, learning_rate=1e-2, lora_rank=RANK)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    optimizer = module.configure_optimizers()
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == lora_params(SHAPE, RANK)
    seq = tokens(8)
    losses = []
    for _ in range(5):
        loss = module.training_step((seq[:, :-1], seq[:, 1:]), 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    for name, p in module.named_parameters():
        changed = not torch.equal(before[name], p)
        assert changed == (".lora_" in name), name


def test_lora_needs_the_gpt():  # the CLI's one-line exit 2: tests/unit/test_config.py's table
    with pytest.raises(UsageError, match="--lora_rank applies to --model gpt only"):
        config.parse_config(["--model", "mlp", "--lora_rank", "4"])
    assert config.parse_config(["--model", "mlp", "--lora_rank", "0"]).lora_rank == 0
