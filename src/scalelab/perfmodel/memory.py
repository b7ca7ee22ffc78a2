"""GPU memory of one data-parallel rank training a scalelab GPT: will it fit before it runs?

Parts, in bytes: fp32 weights (4P; under bf16-mixed autocast the weights stay fp32), fp32 gradients (4P of the
trainable ones), AdamW's two moments (8P), DDP's gradient buckets (4P more unless gradient_as_bucket_view, which
scalelab uses), the activations autograd saves for backward, and the loss's gradients. Where the gradients are
depends on the world size and on --accumulate_grad_batches K (zero_grad(set_to_none=True) frees them each step):
under DDP they live in its buckets, allocated for the run; with K > 1 the no-sync batches before the last one make
autograd's own gradient tensors beside those buckets (DDP copies them in only at the synchronised batch):
`accumulated`, 4P more. One device holds no buckets: at the start of backward its gradients are freed (K = 1) or
hold the earlier batches' (K > 1), and at the end of backward every gradient exists while the activations are gone:
its peak is the larger of the two. Activations per token and
layer, counted from what this repository's GPT saves (checked against torch's saved-tensor hooks on CPU,
tests/unit/test_memory.py; 3-6 % above the measurement): in fp32 17·d floats (layer-norm inputs 2d, linear inputs d +
d + d + 4d, q/k/v 3d, attention output d, GELU input 4d) plus the attention's log-sum-exp (one float per head);
under bf16 autocast the 15·d that feed matmuls are bf16 and the 2·d layer-norm inputs stay fp32, and autocast keeps
a bf16 copy of every matmul weight for the step (2 bytes per matmul parameter). Last layers: the final layer
norm's and the head's inputs, and the fp32 log-probabilities cross_entropy saves (V floats per token: autocast
runs cross_entropy in fp32 whatever the logits' dtype). Flash / memory-efficient attention keeps no T×T matrix.

The peak is the start of backward, not the end of forward: log-softmax's backward holds three vocab-sized fp32
tensors at once, the saved log-probabilities, the gradient nll_loss's backward hands it (dense, V per token) and
the gradient of the logits it makes, 12·V bytes per token with every activation still saved. The logits themselves
are gone by then (training_step returns the loss only; neither the fp32 cast nor log-softmax keeps its input), so
`loss` is the two gradients, 8·V bytes per token, beside the 4·V in the activations (benchmarks/memory_model.py
measures the peak on CPU). The CUDA context and allocator slack come on top: a fixed OVERHEAD_BYTES, a rule of
thumb, not a measurement.
"""

from typing import NamedTuple

from scalelab.workloads.presets import TransformerShape

OVERHEAD_BYTES = 2.0e9  # CUDA context, NCCL buffers, allocator fragmentation: a rule of thumb
LOSS_GRADIENT_BYTES = 2 * 4  # per token and vocabulary entry: two fp32 gradients beside the saved log-probabilities
GPU_MEMORY_GB = {"A100 40GB": 40, "A100 80GB": 80, "H100 80GB": 80, "H200 141GB": 141}


class MemoryEstimate(NamedTuple):
    weights: float
    gradients: float
    optimizer: float
    buckets: float
    activations: float
    loss: float
    overhead: float
    accumulated: float = 0.0  # K > 1 under DDP: the no-sync batches' gradients beside the buckets

    @property
    def total(self) -> float:
        return sum(self)

    def describe(self) -> str:
        parts = ", ".join(f"{name} {value / 1e9:.1f}" for name, value in self._asdict().items() if value)
        return f"≈ {self.total / 1e9:.1f} GB per GPU ({parts} GB)"


def activation_bytes(shape: TransformerShape, batch: int, bf16: bool) -> float:
    """What autograd saves for backward in one step (the part tests/unit/test_memory.py measures)."""
    d, s, n_layer, vocab = shape.d_model, shape.seq_len, shape.n_layer, shape.vocab_size
    per_layer = (15 * d * 2 + 2 * d * 4 if bf16 else 17 * d * 4) + shape.n_head * 4
    per_token = n_layer * per_layer + d * 4 + d * (2 if bf16 else 4) + vocab * 4
    weight_copies = 2 * shape.matmul_params() if bf16 else 0
    return batch * s * per_token + weight_copies


def training_memory(shape: TransformerShape, batch: int, precision: str = "bf16-mixed", bucket_view: bool = True,
                    trainable_params=None, overhead: float = OVERHEAD_BYTES, ddp: bool = True,
                    accumulate: int = 1) -> MemoryEstimate:
    """One rank's memory at the peak of a step: batch = sequences per GPU; ddp: one rank of several (DDP's
    buckets), else one device; accumulate: --accumulate_grad_batches (see the module's docstring)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    bf16 = precision in ("bf16-mixed", "16-mixed")
    params = shape.total_params()  # the head is tied to the token embedding: counted once
    trainable = params if trainable_params is None else trainable_params
    grads = 4 * trainable
    loss = batch * shape.seq_len * LOSS_GRADIENT_BYTES * shape.vocab_size  # fp32 in both precisions
    start = MemoryEstimate(weights=4 * params, gradients=grads, optimizer=8 * trainable,
                           buckets=0 if bucket_view else grads, activations=activation_bytes(shape, batch, bf16),
                           loss=loss, overhead=overhead, accumulated=grads if accumulate > 1 else 0)
    if ddp:
        return start
    # one device: no buckets; the gradients at the start of backward are the earlier batches' (K > 1) or none
    start = start._replace(gradients=start.accumulated, buckets=0, accumulated=0)
    end = start._replace(gradients=grads, activations=0, loss=0)
    return max(start, end, key=lambda e: e.total)


def fits(estimate: MemoryEstimate, memory_bytes: float) -> bool:
    return estimate.total <= memory_bytes


def advice(shape: TransformerShape, batch: int, precision: str, memory_bytes: float, **kw) -> str:
    """What to change when the estimate does not fit: the largest batch that fits, else a smaller preset (kw: as
    training_memory's, the run's ddp and accumulate)."""
    for smaller in range(batch - 1, 0, -1):
        if fits(training_memory(shape, smaller, precision, **kw), memory_bytes):
            return f"--batch_size {smaller} fits"
    return "no batch fits: use a smaller --preset or a shorter --seq_len"
