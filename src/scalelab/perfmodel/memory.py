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

Under --strategy fsdp (FSDP2's fully_shard, as nets/transformer.py applies it: each block one unit, then the GPT as
the root unit: the embeddings, the tied head, the final layer norm) each of N ranks (N = 1 included) keeps 1/N of
the fp32 weights, of the gradients and of AdamW's two moments, and no buckets. On top comes what FSDP2 (torch 2.13,
_fully_shard/) makes, `gathered`: a unit's parameters all-gathered in the compute dtype (MixedPrecisionPolicy's
param_dtype: bf16, 2 bytes a parameter, under bf16-mixed; else 4) while it runs, freed after it; the root's stay
gathered from its forward to its post-backward at the end of backward (lazy init turns reshard_after_forward off
for the root: backward needs its parameters at once). In backward each block gathers again while the one before
it is prefetched; autograd makes the block's gradient unsharded in the compute dtype, and its post-backward copies
that into an fp32 reduce-scatter input (reduce_dtype fp32, 4 bytes a parameter) before freeing it (foreach_reduce;
one such input is kept until the next unit's reduce). At one rank the same copies are made (the world-size-1 path
copies the shard into the unsharded tensors): the working set is what FSDP at 1 costs beyond one device. Under
bf16-mixed the matmul weights are bf16 already, so autocast keeps no copies of them (its fp32 copies of the layer
norms' weights, 4 bytes x 2d a norm, are left out); the activations and the loss are the bf16 ones above (the
residual stream is bf16, but layer norm's inputs are saved in fp32 as before). Gradients exist only in backward
(zero_grad(set_to_none=True)), so the peak is the largest of three moments (fsdp_phases): the start of backward (the
root gathered, every activation and the loss); the last block's backward (the blocks' activations, all counted, the
root gathered with its gradient, which the tied head makes first, two blocks gathered and one block's gradient
beside its reduce-scatter input); the last reduce-scatters at the end (every sharded gradient, the root gathered,
the largest unit's gradient beside its reduce-scatter input, no activations). With K > 1 the no-sync batches keep
the whole gradient unsharded, in fp32 (4P, not / N: `accumulated`), counted at every moment. Checked on CPU at 2
gloo ranks against what torch allocates (tests/unit/test_memory.py): the shards to the byte, the step's peak 0-12 %
above the measurement (12 % for one sequence of tiny in fp32, where the working set is most of the step).
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
    accumulated: float = 0.0  # K > 1: the no-sync batches' gradients (beside DDP's buckets; FSDP's unsharded)
    gathered: float = 0.0  # FSDP: the unsharded parameters and gradients of the units at work (module docstring)

    @property
    def total(self) -> float:
        return sum(self)

    def describe(self) -> str:
        parts = ", ".join(f"{name} {value / 1e9:.1f}" for name, value in self._asdict().items() if value)
        return f"≈ {self.total / 1e9:.1f} GB per GPU ({parts} GB)"


def layer_bytes(shape: TransformerShape, batch: int, bf16: bool) -> float:
    """What the blocks save for backward: every layer's activations, without the last layers' and the loss's."""
    d = shape.d_model
    per_layer = (15 * d * 2 + 2 * d * 4 if bf16 else 17 * d * 4) + shape.n_head * 4
    return batch * shape.seq_len * shape.n_layer * per_layer


def activation_bytes(shape: TransformerShape, batch: int, bf16: bool, *, weight_copies: bool = True) -> float:
    """What autograd saves for backward in one step (the part tests/unit/test_memory.py measures); weight_copies:
    autocast's bf16 copies of fp32 matmul weights (none under FSDP's bf16 parameters)."""
    d, s, vocab = shape.d_model, shape.seq_len, shape.vocab_size
    last = d * 4 + d * (2 if bf16 else 4) + vocab * 4  # final norm's input, head's input, log-probabilities
    copies = 2 * shape.matmul_params() if bf16 and weight_copies else 0
    return layer_bytes(shape, batch, bf16) + batch * s * last + copies


def training_memory(shape: TransformerShape, batch: int, precision: str = "bf16-mixed", bucket_view: bool = True,
                    trainable_params=None, overhead: float = OVERHEAD_BYTES, ddp: bool = True,
                    accumulate: int = 1, *, strategy: str = "ddp", world_size: int = 1) -> MemoryEstimate:
    """One rank's memory at the peak of a step: batch = sequences per GPU; ddp: one rank of several (DDP's
    buckets), else one device; accumulate: --accumulate_grad_batches; strategy "fsdp": sharded over world_size
    ranks, the largest of fsdp_phases (ddp and bucket_view then mean nothing; see the module's docstring)."""
    if strategy == "fsdp":
        return max(fsdp_phases(shape, batch, precision, trainable_params=trainable_params, overhead=overhead,
                               accumulate=accumulate, world_size=world_size), key=lambda e: e.total)
    if strategy != "ddp":
        raise ValueError(f"strategy must be ddp or fsdp, got {strategy!r}")
    _check_batch(batch)
    bf16 = precision in ("bf16-mixed", "16-mixed")
    params = shape.total_params()  # the head is tied to the token embedding: counted once
    trainable = params if trainable_params is None else trainable_params
    grads = 4 * trainable
    start = MemoryEstimate(weights=4 * params, gradients=grads, optimizer=8 * trainable,
                           buckets=0 if bucket_view else grads, activations=activation_bytes(shape, batch, bf16),
                           loss=loss_bytes(shape, batch), overhead=overhead,
                           accumulated=grads if accumulate > 1 else 0)
    if ddp:
        return start
    # one device: no buckets; the gradients at the start of backward are the earlier batches' (K > 1) or none
    start = start._replace(gradients=start.accumulated, buckets=0, accumulated=0)
    end = start._replace(gradients=grads, activations=0, loss=0)
    return max(start, end, key=lambda e: e.total)


def fsdp_phases(shape: TransformerShape, batch: int, precision: str, *, world_size: int, trainable_params=None,
                accumulate: int = 1, overhead: float = OVERHEAD_BYTES) -> tuple:
    """One FSDP2 rank at the step's three moments (the module's docstring): (the start of backward, the last block's
    backward, the last reduce-scatters at its end). With LoRA (trainable_params below every parameter) the adapters
    are the blocks' and the root, frozen, makes no gradient."""
    _check_batch(batch)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    bf16 = precision == "bf16-mixed"  # FSDP takes no 16-mixed (config refuses it: Lightning's FSDP2 does not)
    n, each = world_size, 2 if bf16 else 4  # bytes of a gathered parameter and of autograd's unsharded gradient
    params, root, block = shape.total_params(), shape.root_params(), shape.block_params()
    trainable = params if trainable_params is None else trainable_params
    root_grad, block_grad = (root, block) if trainable >= params else (0, trainable / shape.n_layer)
    reduced = each + 4  # a unit's unsharded gradient beside the fp32 reduce-scatter input it is copied into
    start = MemoryEstimate(weights=4 * params / n, gradients=0, optimizer=8 * trainable / n, buckets=0,
                           activations=activation_bytes(shape, batch, bf16, weight_copies=False),
                           loss=loss_bytes(shape, batch), overhead=overhead,
                           accumulated=4 * trainable if accumulate > 1 else 0, gathered=each * root)
    blocks = start._replace(activations=layer_bytes(shape, batch, bf16), loss=0,
                            gathered=each * (root + root_grad + 2 * block) + reduced * block_grad)
    end = start._replace(gradients=4 * trainable / n, activations=0, loss=0,
                         gathered=each * root + reduced * max(root_grad, block_grad))
    return start, blocks, end


def loss_bytes(shape: TransformerShape, batch: int) -> float:
    """The loss's two vocab-sized gradients at the start of backward, fp32 in both precisions."""
    return batch * shape.seq_len * LOSS_GRADIENT_BYTES * shape.vocab_size


def _check_batch(batch: int) -> None:
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")


def fits(estimate: MemoryEstimate, memory_bytes: float) -> bool:
    return estimate.total <= memory_bytes


FSDP_WORLD_SIZES = tuple(2 ** i for i in range(11))  # 1, 2, 4, ..., 1024: what predict.py tries


def sharded_fit(shape: TransformerShape, batch: int, precision: str, memory_bytes: float, **kw):
    """(the fewest ranks of FSDP_WORLD_SIZES over which this step, sharded, fits memory_bytes, the estimate there),
    or None: the activations and the loss are not sharded, so some batches fit at no world size (kw: as
    training_memory's, accumulate and overhead)."""
    for n in FSDP_WORLD_SIZES:
        est = training_memory(shape, batch, precision, **kw, strategy="fsdp", world_size=n)
        if fits(est, memory_bytes):
            return n, est
    return None


def advice(shape: TransformerShape, batch: int, precision: str, memory_bytes: float, **kw) -> str:
    """What to change when the estimate does not fit: the largest batch that fits, else a smaller preset (kw: as
    training_memory's, the run's ddp and accumulate)."""
    # the estimate grows with the batch (activations, the loss): the largest that fits, by bisection (a scan down
    # from a batch of a million took minutes)
    low, high = 0, batch  # fits at low (0: none yet), not at high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(training_memory(shape, mid, precision, **kw), memory_bytes) else (low, mid)
    return f"--batch_size {low} fits" if low else "no batch fits: use a smaller --preset or a shorter --seq_len"


def note(shape, batch: int, grad_dtype: str, accumulate: int = 1) -> str:
    """Will a step fit in GPU memory (perfmodel.memory): one DDP rank's estimate (its buckets, the accumulated
    gradients with --accumulate) and, per common GPU, yes or what fits; then, per GPU, from how many GPUs one FSDP
    rank's shard of the same per-GPU batch fits."""
    precision = "32" if grad_dtype == "fp32" else "bf16-mixed"
    est = training_memory(shape, batch, precision, accumulate=accumulate)
    verdicts = [f"{gpu}: " + ("fits" if fits(est, gb * 1e9)
                              else f"no ({advice(shape, batch, precision, gb * 1e9, accumulate=accumulate)})")
                for gpu, gb in GPU_MEMORY_GB.items()]
    return (f"memory at {batch} sequence(s) of {shape.seq_len} per GPU ({precision}, AdamW): {est.describe()} under "
            f"DDP; {'; '.join(verdicts)}; under FSDP: {sharded_verdicts(shape, batch, precision, accumulate)}")


def sharded_verdicts(shape, batch: int, precision: str, accumulate: int) -> str:
    """Per common GPU the fewest GPUs of 1, 2, 4, ... 1024 over which one FSDP rank fits, GPUs of one answer named
    together; the activations and the loss are not sharded, so a batch may fit at none."""
    said = {}
    for gpu, gb in GPU_MEMORY_GB.items():
        fit = sharded_fit(shape, batch, precision, gb * 1e9, accumulate=accumulate)
        if fit:
            n, est = fit
            answer = f"from {n} GPU" + (f"s (≈ {est.total / 1e9:.1f} GB at {n})" if n > 1 else
                                        f" (≈ {est.total / 1e9:.1f} GB)")
        else:
            most = FSDP_WORLD_SIZES[-1]
            est = training_memory(shape, batch, precision, accumulate=accumulate, strategy="fsdp", world_size=most)
            answer = (f"not even at {most} GPUs (≈ {est.total / 1e9:.1f} GB: the activations and the loss are not "
                      "sharded)")
        said.setdefault(answer, []).append(gpu)
    return "; ".join(f"{', '.join(gpus)} {answer}" for answer, gpus in said.items())
