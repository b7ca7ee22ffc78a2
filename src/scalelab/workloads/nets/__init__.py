"""The networks (torch and Lightning): imported only when a run builds its workload, never to parse flags."""


def fused_optimizer(device):
    """True on CUDA: one fused kernel updates every parameter, instead of a few kernels per tensor (torch's
    foreach default), a visible share of a GPT step; None elsewhere: torch's own default."""
    return True if device.type == "cuda" else None
