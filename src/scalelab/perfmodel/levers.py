"""The levers in the arithmetic: what gradient accumulation and a compression hook change in a step.

Accumulation (K batches per optimizer step) multiplies the compute between two all-reduces by K and leaves the
all-reduce as it was; only the last batch's backward can hide it. A compression hook changes the bytes on the
wire: fp16/bf16 send 2 bytes an element; PowerSGD (rank r) sends each n x m gradient matrix as P (n x r) and
Q (m x r) where that is at least twice smaller, the rest as it is (PyTorch's own rule). One function counts
those bytes, for the training run's timed hook (train/comm.py) and for predict.py alike (hook_wire_bytes).
"""

from __future__ import annotations

from math import prod

from scalelab.workloads.presets import TransformerShape

HOOKS = ("none", "fp16", "bf16", "powersgd")
POWERSGD_MIN_COMPRESSION = 2  # PyTorch's PowerSGDState.min_compression_rate default


def wire_bytes(hook: str, shapes: list, itemsize: int, compressing: bool = True) -> int:
    """Bytes one rank hands the all-reduce for gradients of these shapes under --comm_hook (none, fp16, bf16,
    powersgd:R); `compressing` False: PowerSGD's first, plain all-reduces."""
    numels = [prod(shape) for shape in shapes]
    if hook in ("fp16", "bf16"):
        return 2 * sum(numels)
    if not hook.startswith("powersgd") or not compressing:
        return itemsize * sum(numels)
    rank, total = int(hook.partition(":")[2] or 1), 0
    for shape, numel in zip(shapes, numels):
        n = shape[0] if shape else 1
        m = numel // n if n else 0
        r = min(n, m, rank)
        total += (n + m) * r if (n + m) * r * POWERSGD_MIN_COMPRESSION < numel else numel
    return itemsize * total


def hook_wire_bytes(hook: str, shape, n_params: float, itemsize: int):
    """Bytes one rank sends per all-reduce under --comm_hook, for a model given by its GPT shape (its own gradient
    matrices) or by its parameter count alone (fp16/bf16: 2 bytes an element, no change to 2-byte gradients); None
    for no hook. PowerSGD compresses each matrix by its shape: without one, a ValueError."""
    if hook == "none":
        return None
    if shape:
        return float(wire_bytes(hook, gradient_shapes(shape), itemsize))
    if hook.startswith("powersgd"):
        raise ValueError(f"{hook} compresses each weight matrix by its shape, and no shape was given")
    return n_params * min(itemsize, 2)


def gradient_shapes(shape: TransformerShape) -> list[tuple]:
    """The gradient tensors of scalelab's GPT (workloads/nets/transformer.py) in that shape: the tied token embedding,
    the positions, per block two layernorms, qkv, proj and the MLP (weights and biases), the final layernorm."""
    d, v = shape.d_model, shape.vocab_size
    block = [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,)]
    return [(v, d), (shape.seq_len, d), *block * shape.n_layer, (d,), (d,)]


def accumulated_step(compute_s: float, comm_s: float, k: int) -> tuple[float, float]:
    """(no overlap, full overlap) time of one optimizer step of k batches of `compute_s` each: the all-reduce
    runs once, after the last batch's backward has started, so at best it hides behind that one batch."""
    return k * compute_s + comm_s, (k - 1) * compute_s + max(compute_s, comm_s)
