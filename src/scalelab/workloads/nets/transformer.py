"""The network of `--model gpt` (declared in workloads/gpt.py): a GPT-style decoder in the spirit of nanoGPT, pre-LN
blocks, causal SDPA attention, tied embeddings.

Optional LoRA (--lora_rank R): the base model is frozen and only low-rank adapters train, so DDP
all-reduces a far smaller gradient (1/50 of tiny's at rank 4) for about 2/3 of the compute.
"""

import math
from typing import Optional

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from scalelab.workloads.nets import fused_optimizer
from scalelab.workloads.presets import TransformerShape


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank path: y = W x + b + (alpha / r) · B A x.

    B starts at zero, so a fresh adapter leaves the model's output exactly as it was (Hu et al. 2021).
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: Optional[float] = None):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = nn.Linear(base.in_features, rank, bias=False)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_a.weight, a=math.sqrt(5))  # nn.Linear's own init, as in loralib
        nn.init.zeros_(self.lora_b.weight)
        self.scale = (alpha or rank) / rank

    def forward(self, x):
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.scale


def add_lora(model: nn.Module, rank: int) -> nn.Module:
    """Freeze every weight of model, then wrap each nn.Linear inside its blocks in a LoRALinear."""
    model.requires_grad_(False)
    for block in model.blocks:
        for parent in list(block.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear:
                    setattr(parent, name, LoRALinear(child, rank))
    return model


class SelfAttention(nn.Module):
    """Multi-head attention through SDPA over every position (BERT's encoder, nets/bert_pretraining.py); the GPT's
    is causal (CausalSelfAttention). `dropout` on the attention weights while training."""

    causal = False

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0):
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        drop = {"dropout_p": self.dropout} if self.training and self.dropout else {}  # the GPT's: none
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, **drop)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class CausalSelfAttention(SelfAttention):
    causal = True


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d_model), CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, shape: TransformerShape, lora_rank: int = 0):
        super().__init__()
        self.shape = shape
        self.tok = nn.Embedding(shape.vocab_size, shape.d_model)
        self.pos = nn.Embedding(shape.seq_len, shape.d_model)
        self.blocks = nn.ModuleList(Block(shape.d_model, shape.n_head) for _ in range(shape.n_layer))
        self.ln_f = nn.LayerNorm(shape.d_model)
        self.head = nn.Linear(shape.d_model, shape.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as in GPT-2
        self.apply(self._init)
        if lora_rank:  # after the base init: the same seed gives the same base weights with or without LoRA
            add_lora(self, lora_rank)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class GPTModule(pl.LightningModule):
    def __init__(self, shape: TransformerShape, learning_rate: float, lora_rank: int = 0):
        super().__init__()
        self.model = GPT(shape, lora_rank)  # --compile compiles it in place (train/compiled.py), as any workload's
        self.learning_rate = learning_rate

    def training_step(self, batch, batch_idx):
        idx, targets = batch
        logits = self.model(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    def shard(self, mesh, precision: str) -> "GPTModule":
        """--strategy fsdp: this module, FSDP2-sharded over `mesh` (`shard` below)."""
        return shard(self, mesh, precision)

    def configure_optimizers(self):
        trainable = [p for p in self.parameters() if p.requires_grad]  # all of them without LoRA
        return torch.optim.AdamW(trainable, lr=self.learning_rate, weight_decay=0.1, betas=(0.9, 0.95),
                                 fused=fused_optimizer(self.device))


def shard(module: GPTModule, mesh, precision: str) -> GPTModule:
    """FSDP2 (`fully_shard`) as torchtitan applies it: each block its own unit (its parameters all-gathered just
    before it runs, freed after), then the network's root (embeddings, final norm and the tied head). The root is
    the GPT, not the LightningModule: training_step calls the GPT, whose forward gathers the root's parameters.
    bf16-mixed computes in bf16 and reduces gradients in fp32 (MixedPrecisionPolicy); 32 keeps everything fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    half = torch.bfloat16 if precision == "bf16-mixed" else None  # config refuses 16-mixed with FSDP
    policy = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32 if half else None)
    net = module.model
    for block in net.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(net, mesh=mesh, mp_policy=policy)
    return module
