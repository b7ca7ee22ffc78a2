"""GPU peak TFLOP/s by device name and precision, and MFU: the denominator of every utilisation figure."""

from __future__ import annotations

import re
from typing import Optional

# Peaks

# Dense peak TFLOP/s per device as torch sees it, keyed by (GPU family, math dtype), from the vendors' datasheets.
# Where a datasheet quotes a tensor-core figure with 2:4 sparsity (marked * there), the dense figure is half of it.
# "fp32" is the rate a "32" run's matmuls get: on NVIDIA the non-tensor-core rate, because torch leaves TF32 off
# for matmuls by default (torch.backends.cuda.matmul.allow_tf32 = False, float32_matmul_precision "highest"); on
# AMD CDNA the FP32 matrix rate, since rocBLAS runs full-precision FP32 GEMMs on the matrix cores. A dtype a device
# has no units for (bf16 on Volta and Turing, TF32 before Ampere or on CDNA2) is absent: its lookup gives None.
# These figures are the MFU denominator for every run: no figure from another table is ever used in their place.
PEAK_TFLOPS: dict[tuple[str, str], float] = {
    # NVIDIA A100 datasheet (SXM4 and PCIe, 40 and 80 GB alike): FP32 19.5, TF32 156 (312*), BF16/FP16 312 (624*)
    ("A100", "bf16"): 312.0, ("A100", "fp16"): 312.0, ("A100", "tf32"): 156.0, ("A100", "fp32"): 19.5,
    # NVIDIA H100 datasheet, SXM: FP32 67, TF32 989*, BF16/FP16 1,979*
    ("H100 SXM", "bf16"): 989.5, ("H100 SXM", "fp16"): 989.5, ("H100 SXM", "tf32"): 494.5,
    ("H100 SXM", "fp32"): 67.0,
    # NVIDIA H100 datasheet, PCIe: FP32 51, TF32 756*, BF16/FP16 1,513*
    ("H100 PCIe", "bf16"): 756.5, ("H100 PCIe", "fp16"): 756.5, ("H100 PCIe", "tf32"): 378.0,
    ("H100 PCIe", "fp32"): 51.0,
    # NVIDIA H100 datasheet, NVL (per GPU, 94 GB; an NVLink-bridged pair is two devices): FP32 60, TF32 835*,
    # BF16/FP16 1,671*
    ("H100 NVL", "bf16"): 835.5, ("H100 NVL", "fp16"): 835.5, ("H100 NVL", "tf32"): 417.5, ("H100 NVL", "fp32"): 60.0,
    # NVIDIA H200 datasheet, SXM: as H100 SXM (FP32 67, TF32 989*, BF16/FP16 1,979*)
    ("H200", "bf16"): 989.5, ("H200", "fp16"): 989.5, ("H200", "tf32"): 494.5, ("H200", "fp32"): 67.0,
    # NVIDIA H200 datasheet, NVL: FP32 60, TF32 835*, BF16/FP16 1,671*
    ("H200 NVL", "bf16"): 835.5, ("H200 NVL", "fp16"): 835.5, ("H200 NVL", "tf32"): 417.5, ("H200 NVL", "fp32"): 60.0,
    # NVIDIA GH200 datasheet (the Hopper GPU of the superchip): FP32 67, TF32 989*, BF16/FP16 1,979*
    ("GH200", "bf16"): 989.5, ("GH200", "fp16"): 989.5, ("GH200", "tf32"): 494.5, ("GH200", "fp32"): 67.0,
    # NVIDIA L40S datasheet: FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*)
    ("L40S", "bf16"): 362.05, ("L40S", "fp16"): 362.05, ("L40S", "tf32"): 183.0, ("L40S", "fp32"): 91.6,
    # NVIDIA L40 datasheet: FP32 90.5, TF32 90.5 (181*), BF16/FP16 181.05 (362.1*)
    ("L40", "bf16"): 181.05, ("L40", "fp16"): 181.05, ("L40", "tf32"): 90.5, ("L40", "fp32"): 90.5,
    # NVIDIA L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*
    ("L4", "bf16"): 121.0, ("L4", "fp16"): 121.0, ("L4", "tf32"): 60.0, ("L4", "fp32"): 30.3,
    # NVIDIA A40 datasheet: FP32 37.4, TF32 74.8 (149.6*), BF16/FP16 149.7 (299.4*)
    ("A40", "bf16"): 149.7, ("A40", "fp16"): 149.7, ("A40", "tf32"): 74.8, ("A40", "fp32"): 37.4,
    # NVIDIA RTX A6000 datasheet (FP32 38.7, tensor 309.7*) with the GA102 whitepaper's per-dtype rates: TF32
    # 77.4 (154.8*), BF16/FP16 with FP32 accumulate 154.8 (309.7*)
    ("RTX A6000", "bf16"): 154.8, ("RTX A6000", "fp16"): 154.8, ("RTX A6000", "tf32"): 77.4,
    ("RTX A6000", "fp32"): 38.7,
    # NVIDIA A10 datasheet: FP32 31.2, TF32 62.5 (125*), BF16/FP16 125 (250*)
    ("A10", "bf16"): 125.0, ("A10", "fp16"): 125.0, ("A10", "tf32"): 62.5, ("A10", "fp32"): 31.2,
    # NVIDIA T4 datasheet: FP32 8.1, mixed-precision FP16/FP32 65 (Turing: no BF16, no TF32)
    ("T4", "fp16"): 65.0, ("T4", "fp32"): 8.1,
    # NVIDIA V100 datasheet: SXM2 FP32 15.7, tensor 125; PCIe 14, 112; V100S 16.4, 130 (Volta: no BF16, no TF32)
    ("V100 SXM2", "fp16"): 125.0, ("V100 SXM2", "fp32"): 15.7,
    ("V100 PCIe", "fp16"): 112.0, ("V100 PCIe", "fp32"): 14.0,
    ("V100S", "fp16"): 130.0, ("V100S", "fp32"): 16.4,
    # NVIDIA Tesla P100 datasheet: SXM2 FP32 10.6, FP16 21.2; PCIe FP32 9.3, FP16 18.7 (no tensor cores)
    ("P100 SXM2", "fp16"): 21.2, ("P100 SXM2", "fp32"): 10.6,
    ("P100 PCIe", "fp16"): 18.7, ("P100 PCIe", "fp32"): 9.3,
    # AMD Instinct MI250X datasheet, per OAM module of two GCDs: FP32 matrix 95.7, BF16/FP16 383 (CDNA2: no TF32).
    # torch sees each GCD as a device: half the module
    ("MI250X GCD", "bf16"): 191.5, ("MI250X GCD", "fp16"): 191.5, ("MI250X GCD", "fp32"): 47.85,
    # AMD Instinct MI300X datasheet: FP32 matrix 163.4, TF32 653.7 (1,307.4*), BF16/FP16 1,307.4 (2,614.9*)
    ("MI300X", "bf16"): 1307.4, ("MI300X", "fp16"): 1307.4, ("MI300X", "tf32"): 653.7, ("MI300X", "fp32"): 163.4,
}

# Lightning precision strings (and plain dtype names) -> the dtype the matmuls run in.
_PRECISION_DTYPE = {
    "32": "fp32", "32-true": "fp32", "fp32": "fp32", "float32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16", "bf16-mixed": "bf16", "bf16-true": "bf16", "bfloat16": "bf16",
    "16": "fp16", "16-mixed": "fp16", "16-true": "fp16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
}


def _has(token: str, name: str) -> bool:
    """token as a whole model number: 'A100' is in 'NVIDIA A100-SXM4-80GB' but not in 'RTX A1000', 'A10' not in
    'A10G' nor 'A100', 'L40' not in 'L40S'."""
    return re.search(rf"(?<![A-Z0-9]){token}(?![0-9A-Z])", name) is not None


# the families whose name alone gives the peak: (token in the device name, family), first match wins
_BY_TOKEN = (("GH200", "GH200"), ("A100", "A100"), ("L40S", "L40S"), ("L40", "L40"), ("L4", "L4"), ("A40", "A40"),
             ("A10", "A10"), ("T4", "T4"), ("V100S", "V100S"), ("MI300X", "MI300X"))


def family_or_reason(device_name: str) -> tuple[Optional[str], str]:
    """(the PEAK_TFLOPS family of a torch device name, "") or (None, why its peak would be a guess)."""
    name = (device_name or "").upper()
    if not name or name == "CPU":
        return None, "a CPU has no datasheet peak"
    if re.search(r"\bMIG\b", name):
        return None, "a MIG slice has a fraction of the card's peak"
    if _has("MI250X", name):
        if _has("MI250", name):
            return None, "the name does not tell an MI250X from an MI250"
        return "MI250X GCD", ""
    for model in ("H100", "H200"):
        if _has(model, name) and not _has("GH200", name):
            if "NVL" in name:
                return f"{model} NVL", ""
            if "PCIE" in name:
                return (None, "an H200 PCIe card is not in the datasheets") if model == "H200" else ("H100 PCIe", "")
            if model == "H200" or "SXM" in name or "HBM3" in name:
                return f"{model} SXM" if model == "H100" else "H200", ""
            return None, "the name does not tell an H100 SXM from a PCIe card"
    if _has("RTX A6000", name):
        return "RTX A6000", ""
    for model, family in (("V100", "V100"), ("P100", "P100")):
        if _has(model, name):
            if "SXM2" in name:
                return f"{family} SXM2", ""
            if "PCIE" in name:
                return f"{family} PCIe", ""
            return None, f"the name does not tell a {model} SXM2 from a PCIe card"
    for token, family in _BY_TOKEN:
        if _has(token, name):
            return family, ""
    return None, f"{device_name} is not in scalelab's datasheet table"


def gpu_family(device_name: str) -> Optional[str]:
    """The PEAK_TFLOPS family of a torch device name, or None when the peak would be a guess: MIG slices, a
    bare "H100" (SXM or PCIe?), a name that fits two cards, and anything unlisted (family_or_reason says which)."""
    return family_or_reason(device_name)[0]


def precision_dtype(precision) -> Optional[str]:
    """Lightning precision ('32', 'bf16-mixed', '16-mixed', ...) -> 'fp32'|'tf32'|'bf16'|'fp16', else None."""
    return _PRECISION_DTYPE.get(str(precision).strip().lower())


def peak_or_reason(device_name: str, precision) -> tuple[Optional[float], str]:
    """(dense peak TFLOP/s for a torch device name at a Lightning precision, "") or (None, a one-line reason)."""
    family, why = family_or_reason(device_name)
    if family is None:
        return None, why
    dtype = precision_dtype(precision)
    if dtype is None:
        return None, f"precision {precision} has no peak in the table"
    peak = PEAK_TFLOPS.get((family, dtype))
    return (peak, "") if peak else (None, f"{family} has no {dtype} matrix units")


def peak_tflops(device_name: str, precision) -> Optional[float]:
    """Dense peak TFLOP/s for a torch device name at a Lightning precision; None for CPUs and unknowns.

    "32"/"32-true" means the fp32 peak (A100 19.5, H100 SXM 67): TF32 is off by default in torch for matmul.
    Pass "tf32" if the run set torch.backends.cuda.matmul.allow_tf32 = True. Mixed precision counts at the
    bf16/fp16 tensor-core peak, where the matmuls run.
    """
    return peak_or_reason(device_name, precision)[0]


def mfu(achieved_tflops: float, peak: Optional[float]) -> Optional[float]:
    """Model FLOPs utilisation as a fraction (0.5 = 50 %); None when there is no meaningful peak."""
    if peak is None or not peak > 0 or achieved_tflops is None:
        return None
    if achieved_tflops < 0:
        raise ValueError(f"achieved TFLOP/s must be >= 0, got {achieved_tflops}")
    return achieved_tflops / peak
