"""Workloads: a LightningModule plus its seeded data. Add a workload = add a module and a branch here."""

from dataclasses import dataclass
from typing import Optional

from scalelab.workloads.presets import PRESETS, TransformerShape


@dataclass
class Workload:
    module: "object"
    train_loader: "object"  # torch DataLoader (torch is imported lazily: presets stay cheap to import)
    val_loader: Optional["object"]
    n_params: int
    tokens_per_sample: int  # 0 for workloads without tokens
    describe: str
    flops_per_sample: float  # training (forward + backward) FLOPs of one sample, analytic: see each workload
    trainable_params: int  # parameters with gradients, what DDP all-reduces: n_params unless LoRA


def throughput_unit(tokens_per_sample) -> str:
    """The unit a workload's throughput is read in: tokens/s where a sample has tokens, else samples/s.

    The one rule for every table, plot and export (they read tokens_per_sample from the result)."""
    return "tokens/s" if tokens_per_sample else "samples/s"


def build(cfg, batch_per_device: int, world_size: int) -> Workload:
    """The module and loaders for cfg (a RunConfig) at this per-device batch and world size."""
    from torch.utils.data import DataLoader

    from scalelab.workloads import data

    loader = dict(batch_size=batch_per_device, num_workers=cfg.num_workers, drop_last=True,
                  persistent_workers=cfg.num_workers > 0)
    if cfg.model == "mlp":
        from torch import nn

        from scalelab import perfmodel
        from scalelab.workloads.mlp import SpiralMLP

        module = SpiralMLP(cfg.hidden_dims, cfg.dropout, cfg.learning_rate)
        # 6 per weight (forward, input and weight gradient; biases and ReLU are elementwise). The standard 6N
        # convention: autograd skips the first layer's input gradient (the data needs none), 2*in*h1 fewer.
        weights = sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))
        train = data.spiral(cfg.num_samples, cfg.noise, cfg.seed)
        val = data.spiral(max(cfg.num_samples // 5, batch_per_device * world_size), cfg.noise, cfg.seed + 1)
        return Workload(
            module=module,
            train_loader=DataLoader(train, shuffle=True, **loader),
            val_loader=DataLoader(val, shuffle=False, **{**loader, "drop_last": False}),
            n_params=sum(p.numel() for p in module.parameters()),
            tokens_per_sample=0,
            describe="mlp " + "-".join(map(str, cfg.hidden_dims)),
            flops_per_sample=perfmodel.dense_flops_per_sample(weights),
            trainable_params=sum(p.numel() for p in module.parameters() if p.requires_grad),
        )
    from scalelab.workloads.transformer import GPTModule, flops_per_token

    base = PRESETS[cfg.preset]
    shape = TransformerShape(base.n_layer, base.n_head, base.d_model, cfg.seq_len, cfg.vocab_size)
    module = GPTModule(shape, cfg.learning_rate, compile=cfg.compile, lora_rank=cfg.lora_rank)
    # Enough sequences for every rank to reach max_steps inside one epoch (no epoch-boundary stalls).
    steps = cfg.max_steps or 1000
    num_samples = cfg.num_samples or steps * batch_per_device * world_size
    train = data.TokenSequences(num_samples, cfg.seq_len, cfg.vocab_size, cfg.seed)
    return Workload(
        module=module,
        train_loader=DataLoader(train, shuffle=True, **loader),
        val_loader=None,
        n_params=sum(p.numel() for p in module.parameters()),  # the tied head counted once; adapters included
        tokens_per_sample=cfg.seq_len,
        describe=f"transformer {cfg.preset}" + (f" + LoRA r{cfg.lora_rank}" if cfg.lora_rank else ""),
        flops_per_sample=flops_per_token(shape, cfg.lora_rank) * cfg.seq_len,
        trainable_params=sum(p.numel() for p in module.parameters() if p.requires_grad),
    )
