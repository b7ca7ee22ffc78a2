"""Training FLOPs: per token of a decoder transformer, per sample of an MLP, per iteration (back of envelope)."""

from __future__ import annotations

from typing import Optional

from scalelab.perfmodel.checks import positive as _positive

# FLOPs


def transformer_flops_per_token(shape_or_params, n_layer: Optional[int] = None, n_head: Optional[int] = None,
                                head_dim: Optional[int] = None, seq_len: Optional[int] = None,
                                causal: bool = False) -> float:
    """Training FLOPs per token of a decoder transformer: 6·N + 12·L·H·Q·T.

    N = the weights that take part in a matmul (2 FLOPs per multiply-accumulate forward, x3 with backward):
    with a TransformerShape, the blocks' weights plus the LM head (TransformerShape.matmul_params). The attention
    term counts the full T² score and value matmuls, as nanoGPT and torchtitan do; causal=True halves it,
    as causal flash-attention kernels skip the masked half.

    shape_or_params: a TransformerShape (its fields are defaults that the keywords may override, e.g. a
    run's seq_len), or an explicit matmul parameter count with n_layer, n_head, head_dim, seq_len.
    """
    if hasattr(shape_or_params, "matmul_params"):
        shape = shape_or_params
        n_params = shape.matmul_params()
        n_layer = shape.n_layer if n_layer is None else n_layer
        n_head = shape.n_head if n_head is None else n_head
        head_dim = shape.head_dim if head_dim is None else head_dim
        seq_len = shape.seq_len if seq_len is None else seq_len
    else:
        n_params = shape_or_params
        missing = [k for k, v in dict(n_layer=n_layer, n_head=n_head, head_dim=head_dim, seq_len=seq_len).items()
                   if v is None]
        if missing:
            raise ValueError(f"with an explicit parameter count, also give {', '.join(missing)}")
    _positive(n_params=n_params, n_layer=n_layer, n_head=n_head, head_dim=head_dim, seq_len=seq_len)
    attention = 12 * n_layer * n_head * head_dim * seq_len
    return 6 * n_params + (attention / 2 if causal else attention)


def dense_flops_per_sample(n_params: float) -> float:
    """Training FLOPs per sample of an MLP-style model: 6·N (2 per MAC forward, x3 with backward)."""
    _positive(n_params=n_params)
    return 6 * n_params


def iteration_tflop_per_gpu(params_billion: float, seq_len: int, global_batch: float, gpus: int,
                            recompute: bool) -> float:
    """TFLOP per GPU per iteration: params_B · k · 2 · seq_len · global_batch / (gpus · 1e3).

    k = 3 (forward + backward), 4 with activation recomputation (one more forward). The 2B, 2048, 16,
    8-GPU, k=4 example gives 65.536. Only global_batch / gpus (the per-GPU work) matters.
    """
    _positive(params_billion=params_billion, seq_len=seq_len, global_batch=global_batch, gpus=gpus)
    k = 4 if recompute else 3
    return params_billion * k * 2 * seq_len * global_batch / (gpus * 1e3)
