"""Back-of-envelope model of data-parallel training: FLOPs, GPU peaks, ring all-reduce, scaling.

Pure arithmetic (no torch) so the predict CLI, the report and the tests can use it instantly, and so a
prediction made before a run can be put next to what the run measured. Conventions:

- Collectives follow nccl-tests: algbw = S / t, busbw = algbw · 2(n−1)/n for all-reduce, 1 GB = 1e9 B.
- Every bandwidth is *unidirectional*: per GPU for the intra-node link (NVLink 3 = 300 GB/s), per node
  for the inter-node link (HDR = 200 Gbit/s = 25 GB/s). 8 Gbit = 1 GB.
- All-reduce time is the ring model t = 2(n−1)·α + 2(n−1)/n · S / β, not the "2·S over duplex NVLink"
  shortcut (which gives 0.027 s and 0.64 s instead of 0.047 s and 0.62 s in the worked example of
  /work/shared/notes/field-math.md).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

GB = 1e9  # nccl-tests and link datasheets use decimal gigabytes
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP bucket_cap_mb=25: one all-reduce (one latency bill) per bucket
GRAD_DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}

# ----------------------------------------------------------------------------------------------------
# Peaks

# Dense (no 2:4 sparsity) peak TFLOP/s from NVIDIA datasheets, keyed by (GPU family, math dtype).
# "fp32" is the non-tensor-core rate: what a "32" Lightning run gets, because torch leaves TF32 off for
# matmuls by default (torch.backends.cuda.matmul.allow_tf32 = False, float32_matmul_precision "highest").
PEAK_TFLOPS: dict[tuple[str, str], float] = {
    ("A100", "bf16"): 312.0, ("A100", "fp16"): 312.0, ("A100", "tf32"): 156.0, ("A100", "fp32"): 19.5,
    ("H100 SXM", "bf16"): 989.0, ("H100 SXM", "fp16"): 989.0, ("H100 SXM", "tf32"): 494.5,
    ("H100 SXM", "fp32"): 67.0,
    ("H100 PCIe", "bf16"): 756.0, ("H100 PCIe", "fp16"): 756.0, ("H100 PCIe", "tf32"): 378.0,
    ("H100 PCIe", "fp32"): 51.0,
    ("H200", "bf16"): 989.0, ("H200", "fp16"): 989.0, ("H200", "tf32"): 494.5, ("H200", "fp32"): 67.0,
    ("GH200", "bf16"): 989.0, ("GH200", "fp16"): 989.0, ("GH200", "tf32"): 494.5, ("GH200", "fp32"): 67.0,
    ("L40S", "bf16"): 362.0, ("L40S", "fp16"): 362.0, ("L40S", "tf32"): 183.0, ("L40S", "fp32"): 91.6,
    # Volta has no bf16/tf32 tensor cores: those lookups return None rather than a made-up rate.
    ("V100 SXM2", "fp16"): 125.0, ("V100 SXM2", "fp32"): 15.7,
    ("V100 PCIe", "fp16"): 112.0, ("V100 PCIe", "fp32"): 14.0,
    ("V100S", "fp16"): 130.0, ("V100S", "fp32"): 16.4,
}

# Lightning precision strings (and plain dtype names) -> the dtype the matmuls run in.
_PRECISION_DTYPE = {
    "32": "fp32", "32-true": "fp32", "fp32": "fp32", "float32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16", "bf16-mixed": "bf16", "bf16-true": "bf16", "bfloat16": "bf16",
    "16": "fp16", "16-mixed": "fp16", "16-true": "fp16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
}


def _has(token: str, name: str) -> bool:
    """token as a whole model number: 'A100' is in 'NVIDIA A100-SXM4-80GB' but not in 'RTX A1000'."""
    return re.search(rf"(?<![A-Z0-9]){token}(?![0-9])", name) is not None


def gpu_family(device_name: str) -> Optional[str]:
    """The PEAK_TFLOPS family of a torch device name, or None when the peak would be a guess.

    MIG slices, H100/H200 NVL, a bare "H100" (SXM or PCIe?) and anything unlisted give None.
    """
    name = (device_name or "").upper()
    if re.search(r"\bMIG\b", name):
        return None  # a slice has a fraction of the peak
    if _has("GH200", name):
        return "GH200"
    if _has("H200", name):
        return None if "NVL" in name else "H200"
    if _has("H100", name):
        if "PCIE" in name:
            return "H100 PCIe"
        if "NVL" in name:
            return None
        return "H100 SXM" if ("SXM" in name or "HBM3" in name) else None
    if _has("A100", name):
        return "A100"  # SXM4 and PCIe A100s share the dense peaks
    if _has("L40S", name):
        return "L40S"
    if "V100S" in name:
        return "V100S"
    if _has("V100", name):
        if "SXM2" in name:
            return "V100 SXM2"
        if "PCIE" in name:
            return "V100 PCIe"
    return None


def precision_dtype(precision) -> Optional[str]:
    """Lightning precision ('32', 'bf16-mixed', '16-mixed', ...) -> 'fp32'|'tf32'|'bf16'|'fp16', else None."""
    return _PRECISION_DTYPE.get(str(precision).strip().lower())


def peak_tflops(device_name: str, precision) -> Optional[float]:
    """Dense peak TFLOP/s for a torch device name at a Lightning precision; None for CPUs and unknowns.

    "32"/"32-true" means the fp32 non-tensor peak (A100 19.5, H100 SXM 67): TF32 is off by default in
    torch for matmul. Pass "tf32" if the run set torch.backends.cuda.matmul.allow_tf32 = True.
    Mixed precision counts at the bf16/fp16 tensor-core peak, where the matmuls run.
    """
    family, dtype = gpu_family(device_name), precision_dtype(precision)
    if family is None or dtype is None:
        return None
    return PEAK_TFLOPS.get((family, dtype))


def mfu(achieved_tflops: float, peak: Optional[float]) -> Optional[float]:
    """Model FLOPs utilisation as a fraction (0.5 = 50 %); None when there is no meaningful peak."""
    if peak is None or not peak > 0 or achieved_tflops is None:
        return None
    if achieved_tflops < 0:
        raise ValueError(f"achieved TFLOP/s must be >= 0, got {achieved_tflops}")
    return achieved_tflops / peak


# ----------------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------------
# Communication


def gbit_to_GBps(gbit_per_s: float) -> float:
    """Link speeds are sold in Gbit/s, collectives measured in GB/s: 200 Gbit/s = 25 GB/s."""
    return gbit_per_s / 8


def GBps_to_gbit(GBps: float) -> float:
    """25 GB/s = 200 Gbit/s."""
    return GBps * 8


def busbw_from_algbw(algbw: float, n: int) -> float:
    """nccl-tests all-reduce bus bandwidth: algbw · 2(n−1)/n, comparable to one link's unidirectional speed."""
    _positive(n=n)
    return algbw * 2 * (n - 1) / n


def busbw_from_time(nbytes: float, seconds: float, n: int) -> float:
    """busbw of an all-reduce of nbytes per rank that took `seconds` (algbw = bytes / time, 1 GB = 1e9 B)."""
    return busbw_from_algbw(nbytes / seconds / GB, n)


def algbw_from_busbw(busbw: float, n: int) -> float:
    """Inverse of busbw_from_algbw (n = 1 has no bus traffic: returns inf)."""
    _positive(n=n)
    return math.inf if n == 1 else busbw * n / (2 * (n - 1))


def allreduce_bytes_per_rank(grad_bytes: float, n: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of S bytes: 2(n−1)/n · S."""
    _nonneg(grad_bytes=grad_bytes)
    _positive(n=n)
    return 2 * (n - 1) / n * grad_bytes


def allreduce_time_s(grad_bytes: float, n: int, bandwidth_GBps: float, latency_s: float = 0.0,
                     buckets: int = 1) -> float:
    """Ring all-reduce time: buckets · 2(n−1)·α + 2(n−1)/n · S / β.

    β is the unidirectional bandwidth of the ring's slowest hop in GB/s (see ring_for); α the per-step
    latency, paid 2(n−1) times per all-reduce and once more per DDP bucket (each bucket is its own call).
    """
    _positive(n=n, bandwidth_GBps=bandwidth_GBps, buckets=buckets)
    _nonneg(latency_s=latency_s)
    if n == 1:
        return 0.0
    return buckets * 2 * (n - 1) * latency_s + allreduce_bytes_per_rank(grad_bytes, n) / (bandwidth_GBps * GB)


def allreduce_time_from_busbw_s(grad_bytes: float, n: int, busbw_GBps: float) -> float:
    """All-reduce time from a measured busbw: t = S · 2(n−1)/n / busbw.

    algbw = S / t and busbw = algbw · 2(n−1)/n, so a measured busbw replaces β in the ring model directly
    (latency already inside the measurement, if it was taken at a comparable message size).
    """
    _positive(n=n, busbw_GBps=busbw_GBps)
    return allreduce_bytes_per_rank(grad_bytes, n) / (busbw_GBps * GB)


@dataclass(frozen=True)
class Ring:
    """The ring one DDP all-reduce runs on: n ranks, bottleneck bandwidth β, per-step latency α."""
    n: int
    bandwidth_GBps: Optional[float]  # None for a single GPU (no ring)
    latency_s: float
    link: str  # "none", "intra" or "inter"


def ring_for(nodes: int, gpus_per_node: int, intra_GBps: float, inter_GBps: float,
             intra_latency_s: float = 0.0, inter_latency_s: float = 0.0) -> Ring:
    """Which link bounds the ring at this scale.

    One node: the ring runs over the node's GPUs on the intra-node link (β = per-GPU unidirectional
    NVLink/PCIe bandwidth, n = GPUs per node). Several nodes: one ring over all n = nodes · gpus_per_node
    GPUs whose slowest hop crosses nodes, so the node's inter-node bandwidth sets β (unidirectional, per
    node: with several NICs give their sum, NCCL runs one ring per NIC). The inter-node latency is charged
    for every step, which overstates latency a little for the intra-node hops.
    """
    _positive(nodes=nodes, gpus_per_node=gpus_per_node)
    n = nodes * gpus_per_node
    if n == 1:
        return Ring(1, None, 0.0, "none")
    if nodes == 1:
        return Ring(n, intra_GBps, intra_latency_s, "intra")
    return Ring(n, inter_GBps, inter_latency_s, "inter")


# ----------------------------------------------------------------------------------------------------
# Prediction


@dataclass(frozen=True)
class ScalingInputs:
    """What predict() needs. Work is given at the 1-GPU baseline: what one GPU computes per step there.

    Gradient size: grad_bytes, or n_params · grad_dtype_bytes (DDP all-reduces every gradient, embeddings
    included). Compute: compute_s (time of one step's compute on 1 GPU, no communication), or
    flops_per_step / (tflops · mfu). scaling "weak" keeps that per-GPU work at every scale (global batch
    grows); "strong" splits it over the GPUs (global batch fixed; assumes all of it splits evenly, which
    DDP's unsplit optimizer step does not). busbw_GBps maps a node count to a measured all-reduce busbw
    that replaces the link figure there. tokens_per_step (tokens of one 1-GPU step), token_budget and
    gpu_hour_price add time-to-train and cost.
    """
    gpus_per_node: int
    nodes: Sequence[int] = (1,)
    n_params: Optional[float] = None
    grad_bytes: Optional[float] = None
    grad_dtype_bytes: int = 4
    intra_GBps: float = 300.0  # NVLink 3, unidirectional per GPU
    inter_GBps: float = 25.0  # InfiniBand HDR 200 Gbit/s, unidirectional per node
    intra_latency_s: float = 0.0
    inter_latency_s: float = 0.0
    busbw_GBps: Optional[Mapping[int, float]] = None
    compute_s: Optional[float] = None
    flops_per_step: Optional[float] = None
    tflops: Optional[float] = None
    mfu: Optional[float] = None
    scaling: str = "weak"
    bucket_bytes: Optional[float] = DDP_BUCKET_BYTES  # None: one all-reduce of the whole gradient
    tokens_per_step: Optional[float] = None
    token_budget: Optional[float] = None
    gpu_hour_price: Optional[float] = None

    def __post_init__(self):
        _positive(gpus_per_node=self.gpus_per_node, intra_GBps=self.intra_GBps, inter_GBps=self.inter_GBps,
                  grad_dtype_bytes=self.grad_dtype_bytes)
        _nonneg(intra_latency_s=self.intra_latency_s, inter_latency_s=self.inter_latency_s)
        nodes = tuple(sorted(set(int(n) for n in self.nodes)))
        if not nodes or min(nodes) < 1:
            raise ValueError(f"nodes must be positive integers, got {list(self.nodes)}")
        object.__setattr__(self, "nodes", nodes)
        if self.scaling not in ("weak", "strong"):
            raise ValueError(f"scaling must be 'weak' or 'strong', got {self.scaling!r}")
        if self.grad_bytes is None and self.n_params is None:
            raise ValueError("give grad_bytes or n_params")
        _positive(**{k: v for k, v in dict(
            n_params=self.n_params, grad_bytes=self.grad_bytes, compute_s=self.compute_s,
            flops_per_step=self.flops_per_step, tflops=self.tflops, mfu=self.mfu,
            bucket_bytes=self.bucket_bytes, tokens_per_step=self.tokens_per_step,
            token_budget=self.token_budget).items() if v is not None})
        if self.gpu_hour_price is not None:
            _nonneg(gpu_hour_price=self.gpu_hour_price)
        if self.mfu is not None and self.mfu > 1:
            raise ValueError(f"mfu is a fraction of peak (0 < mfu <= 1), got {self.mfu}")
        if self.compute_s is None and None in (self.flops_per_step, self.tflops, self.mfu):
            raise ValueError("give compute_s, or flops_per_step with tflops and mfu")
        for n, bw in (self.busbw_GBps or {}).items():
            _positive(**{f"busbw_GBps[{n}]": bw})

    @property
    def allreduce_bytes(self) -> float:
        """S: the gradient bytes all-reduced every step."""
        return self.grad_bytes if self.grad_bytes is not None else self.n_params * self.grad_dtype_bytes

    @property
    def compute_s_1gpu(self) -> float:
        """Compute time of one step on 1 GPU: given, or FLOPs / (peak · MFU)."""
        if self.compute_s is not None:
            return self.compute_s
        return self.flops_per_step / (self.tflops * 1e12 * self.mfu)

    @property
    def buckets(self) -> int:
        return 1 if self.bucket_bytes is None else max(1, math.ceil(self.allreduce_bytes / self.bucket_bytes))


@dataclass(frozen=True)
class ScaleRow:
    """One scale of the prediction. *_no_overlap: compute + comm; *_overlap: max(compute, comm)."""
    label: str
    nodes: int
    gpus: int
    link: str  # "none", "intra", "inter" or "busbw" (a measured busbw replaced the link figure)
    bandwidth_GBps: Optional[float]
    allreduce_bytes_per_gpu: float
    latency_term_s: float
    comm_s: float
    compute_s: float
    step_s_no_overlap: float
    step_s_overlap: float
    comm_bound: bool
    speedup_no_overlap: float
    speedup_overlap: float
    efficiency_no_overlap: float
    efficiency_overlap: float
    tokens_per_step: Optional[float] = None  # global, at this scale
    train_h_no_overlap: Optional[float] = None
    train_h_overlap: Optional[float] = None
    cost_no_overlap: Optional[float] = None
    cost_overlap: Optional[float] = None


def scales(gpus_per_node: int, nodes: Sequence[int]) -> list[tuple[str, int, int]]:
    """(label, nodes, gpus) rows: 1 GPU, 1 node, then every node count above 1."""
    rows = [("1 GPU", 1, 1)]
    if gpus_per_node > 1:
        rows.append(("1 node", 1, gpus_per_node))
    rows += [(f"{n} nodes", n, n * gpus_per_node) for n in sorted(set(nodes)) if n > 1]
    return rows


def predict(inputs: ScalingInputs) -> list[ScaleRow]:
    """Predicted step time, speedup and efficiency at 1 GPU, 1 node and each node count.

    Speedup is against the 1-GPU step (compute only). Weak scaling: per-GPU work fixed, so speedup is the
    throughput ratio gpus · T1 / T and efficiency = compute / step. Strong: compute per GPU = T1 / gpus,
    speedup = T1 / T, efficiency = speedup / gpus.
    """
    S, c1 = inputs.allreduce_bytes, inputs.compute_s_1gpu
    measured = dict(inputs.busbw_GBps or {})
    rows = []
    for label, nodes, gpus in scales(inputs.gpus_per_node, inputs.nodes):
        ring = ring_for(nodes, gpus // nodes, inputs.intra_GBps, inputs.inter_GBps,
                        inputs.intra_latency_s, inputs.inter_latency_s)
        link, bw, latency_term = ring.link, ring.bandwidth_GBps, 0.0
        if gpus == 1:
            comm = 0.0
        elif nodes in measured:
            link, bw = "busbw", measured[nodes]
            comm = allreduce_time_from_busbw_s(S, gpus, bw)
        else:
            latency_term = inputs.buckets * 2 * (gpus - 1) * ring.latency_s
            comm = allreduce_time_s(S, gpus, bw, ring.latency_s, inputs.buckets)
        compute = c1 if inputs.scaling == "weak" else c1 / gpus
        serial, overlap = compute + comm, max(compute, comm)
        work = gpus if inputs.scaling == "weak" else 1  # how many 1-GPU steps of work one step does
        sp_serial, sp_overlap = work * c1 / serial, work * c1 / overlap
        row = dict(label=label, nodes=nodes, gpus=gpus, link=link, bandwidth_GBps=bw,
                   allreduce_bytes_per_gpu=allreduce_bytes_per_rank(S, gpus), latency_term_s=latency_term,
                   comm_s=comm, compute_s=compute, step_s_no_overlap=serial, step_s_overlap=overlap,
                   comm_bound=comm > compute, speedup_no_overlap=sp_serial, speedup_overlap=sp_overlap,
                   efficiency_no_overlap=sp_serial / gpus, efficiency_overlap=sp_overlap / gpus)
        if inputs.tokens_per_step is not None:
            tokens = inputs.tokens_per_step * work
            row["tokens_per_step"] = tokens
            if inputs.token_budget is not None:
                steps = inputs.token_budget / tokens
                row["train_h_no_overlap"] = steps * serial / 3600
                row["train_h_overlap"] = steps * overlap / 3600
                if inputs.gpu_hour_price is not None:
                    row["cost_no_overlap"] = row["train_h_no_overlap"] * gpus * inputs.gpu_hour_price
                    row["cost_overlap"] = row["train_h_overlap"] * gpus * inputs.gpu_hour_price
        rows.append(ScaleRow(**row))
    return rows


def formula(inputs: ScalingInputs) -> str:
    """The model in words and symbols, with this prediction's S, links and latencies."""
    S = inputs.allreduce_bytes
    lines = [
        "all-reduce (ring, nccl-tests definitions): each GPU sends and receives 2(n-1)/n * S bytes;",
        "  t_comm = buckets * 2(n-1) * alpha + 2(n-1)/n * S / beta"
        f"   (S = {S / GB:.4g} GB of gradients, buckets = {inputs.buckets} "
        + ("= one all-reduce)" if inputs.bucket_bytes is None
           else f"DDP buckets of {inputs.bucket_bytes / 2**20:.4g} MiB)"),
        "  with a measured busbw: t_comm = 2(n-1)/n * S / busbw   (busbw = algbw * 2(n-1)/n, algbw = S / t)",
        "step: no overlap = compute + comm; full overlap (DDP all-reduces buckets during backward) ="
        " max(compute, comm); reality lies between.",
    ]
    if inputs.scaling == "weak":
        lines.append("weak scaling: per-GPU work fixed (global batch grows with GPUs); speedup = gpus * T1 / step,"
                     " efficiency = compute / step.")
    else:
        lines.append("strong scaling: global batch fixed, compute per GPU = T1 / gpus; speedup = T1 / step,"
                     " efficiency = speedup / gpus.")
    lines.append(bandwidth_assumption(inputs))
    return "\n".join(lines)


def bandwidth_assumption(inputs: ScalingInputs) -> str:
    """The bandwidth/latency assumption in plain words (what a reader must check against their cluster)."""
    measured = dict(inputs.busbw_GBps or {})
    lines = [
        f"bandwidth (unidirectional): 1 node = one ring over its {inputs.gpus_per_node} GPUs on the intra-node link,"
        f" beta = {inputs.intra_GBps:g} GB/s per GPU, alpha = {inputs.intra_latency_s * 1e6:g} us;",
        f"  several nodes = one ring over all GPUs whose slowest hop is the inter-node link,"
        f" beta = {inputs.inter_GBps:g} GB/s ({GBps_to_gbit(inputs.inter_GBps):g} Gbit/s) per node,"
        f" alpha = {inputs.inter_latency_s * 1e6:g} us.",
    ]
    if measured:
        lines.append("  measured busbw replaces the link figure at " + ", ".join(
            f"{n} node{'s' if n > 1 else ''}: {bw:g} GB/s" for n, bw in sorted(measured.items())) + ".")
    lines.append("  advertised link figures (applications reach ~80 %); ring model, not the '2*S over duplex"
                 " NVLink' shortcut.")
    return "\n".join(lines)


def required_bandwidth_GBps(row: ScaleRow) -> Optional[float]:
    """The bandwidth at which this row's all-reduce would take exactly its compute time (None: latency alone
    already exceeds compute, or no communication)."""
    budget = row.compute_s - row.latency_term_s
    if row.gpus == 1 or budget <= 0:
        return None
    return row.allreduce_bytes_per_gpu / budget / GB


def verdict(rows: Sequence[ScaleRow]) -> str:
    """One line: from which scale all-reduce outlasts compute, and what link would hide it."""
    bound = [r for r in rows if r.comm_bound]
    if not bound:
        worst = max(rows, key=lambda r: r.comm_s / r.compute_s)
        return (f"compute-bound at every scale: largest all-reduce share at {worst.label} ({worst.gpus} GPUs),"
                f" {worst.comm_s:.3g} s <= compute {worst.compute_s:.3g} s")
    r = bound[0]
    text = (f"communication-bound from {r.label} ({r.gpus} GPUs): all-reduce {r.comm_s:.3g} s"
            f" > compute {r.compute_s:.3g} s")
    need = required_bandwidth_GBps(r)
    if need is None:
        return text + "; latency alone exceeds compute: fewer, larger all-reduces or more work per GPU"
    where = {"inter": f"{need:.3g} GB/s ({GBps_to_gbit(need):.3g} Gbit/s) per node between nodes",
             "intra": f"{need:.3g} GB/s per GPU within the node",
             "busbw": f"a busbw of {need:.3g} GB/s"}[r.link]
    return text + f"; full overlap needs >= {where}, or more work per GPU"


@dataclass(frozen=True)
class MeasuredPrediction:
    """What a measured 1-device step and a measured busbw predict for a multi-GPU run."""
    comm_s: float
    compute_s: float
    step_s_no_overlap: float
    step_s_overlap: float
    efficiency_no_overlap: float
    efficiency_overlap: float
    comm_bound: bool


def predict_from_busbw(step_s_1gpu: float, grad_bytes: float, world_size: int, nodes: int,
                       busbw_GBps: Optional[float], scaling: str = "weak") -> MeasuredPrediction:
    """For the report: predicted comm time and efficiency (with and without overlap) of a run.

    step_s_1gpu: measured 1-device step time, taken as pure compute; busbw_GBps: measured all-reduce busbw
    at this world size and node count (nccl-tests style). comm = 2(n-1)/n * S / busbw.
    """
    _positive(step_s_1gpu=step_s_1gpu, world_size=world_size, nodes=nodes)
    _nonneg(grad_bytes=grad_bytes)
    if world_size % nodes:
        raise ValueError(f"world_size {world_size} is not a multiple of nodes {nodes}")
    if scaling not in ("weak", "strong"):
        raise ValueError(f"scaling must be 'weak' or 'strong', got {scaling!r}")
    if world_size == 1:
        comm = 0.0
    else:
        if busbw_GBps is None:
            raise ValueError("busbw_GBps is needed for world_size > 1")
        comm = allreduce_time_from_busbw_s(grad_bytes, world_size, busbw_GBps)
    compute = step_s_1gpu if scaling == "weak" else step_s_1gpu / world_size
    serial, overlap = compute + comm, max(compute, comm)
    work = world_size if scaling == "weak" else 1
    return MeasuredPrediction(comm_s=comm, compute_s=compute, step_s_no_overlap=serial, step_s_overlap=overlap,
                              efficiency_no_overlap=work * step_s_1gpu / serial / world_size,
                              efficiency_overlap=work * step_s_1gpu / overlap / world_size,
                              comm_bound=comm > compute)


# ----------------------------------------------------------------------------------------------------


def _positive(**values):
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (0 < v < math.inf):
            raise ValueError(f"{name} must be a positive number, got {v!r}")


def _nonneg(**values):
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (0 <= v < math.inf):
            raise ValueError(f"{name} must be a number >= 0, got {v!r}")
