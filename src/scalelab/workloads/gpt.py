"""The GPT-style decoder workload: a preset shape (tiny runs on a laptop CPU, xl is GPT-3 XL), synthetic tokens.

Declaration and arithmetic only (torch-free); the network is nets/transformer.py. Optional LoRA (--lora_rank R):
the base model is frozen and only low-rank adapters train, so DDP all-reduces a far smaller gradient.
"""

from scalelab import perfmodel
from scalelab.entry import bounded
from scalelab.errors import UsageError
from scalelab.workloads.presets import PRESETS, TransformerShape
from scalelab.workloads.spec import MemoryCheck, Option, Workload, WorkloadSpec


def lora_params(shape: TransformerShape, rank: int) -> int:
    """Adapter weights: r x (in + out) for qkv (d->3d), proj (d->d), fc (d->4d) and fc-out (4d->d)."""
    d = shape.d_model
    return shape.n_layer * rank * (4 * d + 2 * d + 5 * d + 5 * d)


def flops_per_token(shape: TransformerShape, lora_rank: int = 0) -> float:
    """Training FLOPs (forward + backward) per token of this GPT, for MFU and throughput figures.

    Full training: 6 per matmul weight (2 forward, 2 input gradient, 2 weight gradient) plus perfmodel's
    attention term 12·L·H·Q·T, which counts the full T x T score and value matmuls (as nanoGPT and
    torchtitan do, though causal kernels could skip half) and no recomputation in the backward pass
    (model FLOPs, not hardware FLOPs). With LoRA the frozen base weights need no weight gradient
    (4 per weight) while the adapters get all 6; attention is unchanged, its activations still need
    gradients. (Autograd also skips the input gradient of the first adapted layer, whose input needs
    none; like 6N, the convention ignores that: under 3 % of tiny with LoRA, less for bigger models.)
    """
    dims = (shape.n_layer, shape.n_head, shape.head_dim, shape.seq_len)
    n = shape.matmul_params()
    if not lora_rank:
        return perfmodel.transformer_flops_per_token(n, *dims)  # 6·N + attention
    return 4 * n + perfmodel.transformer_flops_per_token(lora_params(shape, lora_rank), *dims)


def shape_of(cfg) -> TransformerShape:
    """The run's shape: its preset, with --seq_len and --vocab_size applied."""
    base = PRESETS[cfg.preset]
    return TransformerShape(base.n_layer, base.n_head, base.d_model, cfg.seq_len, cfg.vocab_size)


def memory_terms(cfg, world_size: int) -> dict:
    """What of the run perfmodel.training_memory reads besides shape, batch and precision: LoRA's trainable share,
    the accumulated gradients with --accumulate_grad_batches, and the strategy: DDP's buckets where there are several
    ranks, or --strategy fsdp's shards over every rank (1 included)."""
    trainable = lora_params(shape_of(cfg), cfg.lora_rank) if cfg.lora_rank else None
    terms = {"trainable_params": trainable, "accumulate": cfg.accumulate_grad_batches}
    if cfg.strategy == "fsdp":
        return {**terms, "strategy": "fsdp", "world_size": world_size}
    return {**terms, "ddp": world_size > 1}


def memory_estimate(cfg, batch: int, world_size: int, **kw) -> "perfmodel.MemoryEstimate":
    """This run's memory per device (perfmodel.memory), DDP's or FSDP's as the run's strategy: the one place the
    run's up-front check and its record ask (kw: overhead=0 for the tensors alone)."""
    return perfmodel.training_memory(shape_of(cfg), batch, cfg.precision, **memory_terms(cfg, world_size), **kw)


def what(cfg, batch: int, per: str) -> str:
    """The run as a memory refusal names it: its preset, batch per GPU or device, sequence and precision."""
    return f"--preset {cfg.preset} at batch {batch}/{per}, seq {shape_of(cfg).seq_len}, precision {cfg.precision}"


def advice(cfg, batch: int, world_size: int, room: float, **kw) -> str:
    """What fits in room bytes a device: the largest batch, counted as this run counts (kw: overhead)."""
    return perfmodel.memory_advice(shape_of(cfg), batch, cfg.precision, room, **memory_terms(cfg, world_size), **kw)


def build(cfg, batch_per_device: int, world_size: int) -> Workload:
    from scalelab.workloads import data
    from scalelab.workloads.nets.transformer import GPTModule

    shape = shape_of(cfg)
    module = GPTModule(shape, cfg.learning_rate, lora_rank=cfg.lora_rank)
    # Enough sequences for every rank to reach max_steps inside one epoch (no epoch-boundary stalls).
    steps = (cfg.max_steps or 1000) * cfg.accumulate_grad_batches  # batches: K per optimizer step
    num_samples = cfg.num_samples or steps * batch_per_device * world_size
    train = data.TokenSequences(num_samples, cfg.seq_len, cfg.vocab_size, cfg.seed)
    return Workload(
        module=module,
        train_set=train,
        val_set=None,
        n_params=sum(p.numel() for p in module.parameters()),  # the tied head counted once; adapters included
        tokens_per_sample=cfg.seq_len,
        describe=f"gpt {cfg.preset}" + (f" + LoRA r{cfg.lora_rank}" if cfg.lora_rank else ""),
        flops_per_sample=flops_per_token(shape, cfg.lora_rank) * cfg.seq_len,
        trainable_params=sum(p.numel() for p in module.parameters() if p.requires_grad),
    )


def finalize(cfg) -> None:
    shape = PRESETS[cfg.preset]
    cfg.seq_len = cfg.seq_len or shape.seq_len
    cfg.vocab_size = cfg.vocab_size or shape.vocab_size
    if cfg.vocab_size < 2:
        raise UsageError("--vocab_size must be at least 2")


SPEC = WorkloadSpec(
    name="gpt",
    formerly=("transformer",),  # schema 2's name (upgrades.py reads it as gpt)
    shards="each transformer block, then the rest (embeddings, final norm, head)",
    help="gpt: GPT-style decoder transformer (nets/transformer.py; configs gpt-tiny ... gpt-xl)",
    defaults={"batch_size": 8, "learning_rate": 3e-4, "max_epochs": None, "max_steps": 50},
    options=(
        Option("preset", "tiny", {"choices": sorted(PRESETS), "help": "GPT size (tiny runs on a laptop CPU)"}),
        Option("seq_len", None, {"type": bounded(int, 1, 2**20, "tokens"),
               "help": "GPT context length (default: preset's)"}),
        Option("vocab_size", None, {"type": bounded(int, 1, 2**24, "tokens"),
               "help": "GPT vocabulary (default: preset's)"}),
        Option("lora_rank", 0, {"type": bounded(int, 0, 2**16, "a rank"),
               "help": "train only rank-R adapters (base frozen): a tiny "
                                "gradient, to see how scaling changes; 0 = full training"}),
    ),
    identity=("preset", "seq_len", "vocab_size", "lora_rank"),
    build=build,
    gpu_precision="bf16-mixed",  # fp32 on an A100 runs ~10x slower, on TF32 at best: not what anyone trains in
    finalize=finalize,
    memory=MemoryCheck(estimate=memory_estimate, what=what, advice=advice),
    flops_note="MFU counts attention's full T x T scores (the causal half is not discounted), as nanoGPT and PaLM "
               "count it: compare it with figures that do the same",
)
