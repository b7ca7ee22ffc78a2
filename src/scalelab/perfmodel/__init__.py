"""Back-of-envelope model of data-parallel training: GPU peaks, FLOPs, collective arithmetic, scaling.

Pure arithmetic (no torch) so the predict CLI, the report and the tests can use it instantly, and so a
prediction made before a run can be put next to what the run measured. Conventions:

- Collectives follow nccl-tests: algbw = S / t, busbw = algbw · 2(n−1)/n for all-reduce, 1 GB = 1e9 B.
- Every bandwidth is *unidirectional*: per GPU for the intra-node link (NVLink 3 = 300 GB/s), per node
  for the inter-node link (HDR = 200 Gbit/s = 25 GB/s). 8 Gbit = 1 GB.
- All-reduce time is the ring model t = 2(n−1)·α + 2(n−1)/n · S / β, not the "2·S over duplex NVLink"
  shortcut (which gives 0.027 s and 0.64 s instead of 0.047 s and 0.62 s in the worked example of
  docs/07-network-arithmetic.md).

One module per concern: `peaks` (what a GPU can do), `flops` (what a model needs), `network` (what a
collective costs, and the all-reduce benchmark's rows), `scaling` (what that means for step time and
efficiency). The names below are the model's public API: `from scalelab import perfmodel as pm; pm.predict(...)`.
"""

from scalelab.perfmodel.flops import dense_flops_per_sample, iteration_tflop_per_gpu, transformer_flops_per_token
from scalelab.perfmodel.memory import (
    FSDP_WORLD_SIZES,
    GPU_MEMORY_GB,
    MemoryEstimate,
    fits,
    sharded_fit,
    training_memory,
)
from scalelab.perfmodel.memory import advice as memory_advice
from scalelab.perfmodel.memory import note as memory_note
from scalelab.perfmodel.network import (
    DDP_BUCKET_BYTES,
    GB,
    GRAD_DTYPE_BYTES,
    LARGE_MSG_BYTES,
    GBps_to_gbit,
    Ring,
    algbw_from_busbw,
    allreduce_bytes_per_rank,
    allreduce_time_from_busbw_s,
    allreduce_time_s,
    bandwidths,
    bench_summary,
    busbw_at,
    busbw_from_algbw,
    busbw_from_time,
    gbit_to_GBps,
    human_bytes,
    message_sizes,
    parse_size,
    ring_for,
)
from scalelab.perfmodel.peaks import (
    PEAK_TFLOPS,
    family_or_reason,
    gpu_family,
    mfu,
    peak_or_reason,
    peak_tflops,
    precision_dtype,
)
from scalelab.perfmodel.scaling import (
    NODE_DOUBLING,
    NODE_OVERHEAD,
    MeasuredPrediction,
    ScaleRow,
    ScalingInputs,
    bandwidth_assumption,
    formula,
    lever_sweep,
    predict,
    predict_from_busbw,
    required_bandwidth_GBps,
    scales,
    verdict,
)
from scalelab.perfmodel.sharding import for_shape as sharded_wire

