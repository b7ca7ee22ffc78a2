"""GPU peak TFLOP/s by device name and precision, and MFU: the denominator of every utilisation figure."""

from __future__ import annotations

import re
from typing import Optional

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


def lightning_peak_tflops(device, precision) -> Optional[float]:
    """The peak Lightning knows for a CUDA device (V100, T4, L4, L40, A10G, A40, RTX, ...), for GPUs outside
    PEAK_TFLOPS; None where neither knows it. `device`: a torch.device of the run (imports torch)."""
    import torch
    from lightning.fabric.utilities.throughput import get_available_flops

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision_dtype(precision), torch.float32)
    flops = get_available_flops(device, dtype)
    return flops / 1e12 if flops else None


def mfu(achieved_tflops: float, peak: Optional[float]) -> Optional[float]:
    """Model FLOPs utilisation as a fraction (0.5 = 50 %); None when there is no meaningful peak."""
    if peak is None or not peak > 0 or achieved_tflops is None:
        return None
    if achieved_tflops < 0:
        raise ValueError(f"achieved TFLOP/s must be >= 0, got {achieved_tflops}")
    return achieved_tflops / peak
