"""Choices that only matter on a GPU, checked without one: which optimizer kernel, which device is named."""

import torch

from scalelab.launch import cluster
from scalelab.workloads.nets import fused_optimizer


def test_fused_optimizer_on_cuda_only():
    assert fused_optimizer(torch.device("cuda", 3)) is True
    assert fused_optimizer(torch.device("cpu")) is None  # torch's default there
    from scalelab.workloads.nets.gpt import GPTModule
    from scalelab.workloads.presets import PRESETS

    opt = GPTModule(PRESETS["tiny"], 1e-3).configure_optimizers()  # on CPU: not fused
    assert not opt.defaults.get("fused")


def test_the_gpu_is_named_from_the_rank_s_own_device(monkeypatch):
    """With one GPU bound per task every rank sees its GPU as cuda:0 while its local rank is 0..3: the name must
    come from the device the rank trains on, not from the local rank."""
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: asked.append(device) or "NVIDIA H100")
    assert cluster.device_name("gpu", torch.device("cuda", 0)) == "NVIDIA H100"
    assert asked == [torch.device("cuda", 0)]
    assert cluster.device_name("cpu", torch.device("cpu")) != "NVIDIA H100"


def test_the_probe_steps_reuse_one_buffer_for_every_bucket():
    from scalelab.train.comm import Scratch

    scratch = Scratch()
    first = scratch.views([4_000_000, 1_000_000], torch.device("cpu"))
    again = scratch.views([1_000_000, 4_000_000, 2_000_000], torch.device("cpu"))
    assert [v.numel() * 4 for v in again] == [1_000_000, 4_000_000, 2_000_000]
    assert {v.data_ptr() for v in first + again} == {scratch.buffer.data_ptr()}  # all views of one buffer
    assert scratch.buffer.numel() * 4 == 4_000_000  # the largest bucket, not the sum
