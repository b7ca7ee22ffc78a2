"""Choices that only matter on a GPU, checked without one: which optimizer kernel, which device is named."""

import torch

from scalelab.launch import cluster
from scalelab.workloads.nets import fused_optimizer


def test_fused_optimizer_on_cuda_only():
    assert fused_optimizer(torch.device("cuda", 3)) is True
    assert fused_optimizer(torch.device("cpu")) is None  # torch's default there
    from scalelab.workloads.nets.transformer import GPTModule
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


def test_ddps_runtime_statistics_stay_out_of_the_timed_gpu_steps():
    """DDP syncs the GPU at the start of forward in its synchronised steps 2-11, then every 100th (reducer.cpp's
    should_collect_runtime_stats): the GPU warm-up covers the first, the sample rate is pushed past any run."""
    from scalelab import config
    from scalelab.train import comm

    rates = []

    class DDP:
        def _set_ddp_runtime_logging_sample_rate(self, rate):
            rates.append(rate)

    comm.rare_runtime_stats(DDP())
    comm.rare_runtime_stats(object())  # a torch without the setter: its default stays, nothing raised
    assert rates == [2**31 - 1] and config.WARMUP_STEPS == {"cpu": 5, "gpu": 11}


def test_a_gpu_run_warned_when_its_warm_up_leaves_ddps_statistics_in_timed_steps(capsys, tmp_path, monkeypatch):
    from scalelab import config
    from scalelab.launch.cluster import Launch
    from scalelab.train import prepare

    def warned(warmup, world, accelerator="gpu"):
        cfg = config.for_accelerator(config.parse_config(["--model", "gpt", "--output_dir", str(tmp_path),
                                                          *(["--warmup_steps", str(warmup)] if warmup else [])]),
                                     accelerator)
        launch = Launch(launcher="local", devices=world, num_nodes=1, accelerator=accelerator)
        prepare.preflight(cfg, launch, 8)
        return capsys.readouterr().err

    monkeypatch.setenv("SCALELAB_NO_MEMORY_CHECK", "1")  # no GPU here to ask

    assert warned(5, 8) == ("train.py: warning: --warmup_steps 5 times steps 6-11, where DDP syncs the GPU for its "
                            "runtime statistics (a 1-GPU run does not): 11 or more leaves them out\n")
    assert warned(None, 8) == warned(5, 1) == warned(5, 8, "cpu") == warned(11, 8) == ""


def test_gpu_batches_come_from_page_locked_memory():
    """Fabric copies a batch to the GPU with non_blocking=True; from pageable memory that copy waits for itself."""
    from scalelab.workloads import data

    dataset = data.spiral(64, 0.2, 0)
    assert data.train_loader(dataset, 8, 0, 1, 0, pin_memory=True).pin_memory is True
    assert data.eval_loader(dataset, 8, 0, 1, pin_memory=True).pin_memory is True
    assert data.train_loader(dataset, 8, 0, 1, 0).pin_memory is False  # CPU runs: nothing to pin for
    assert data.eval_loader(dataset, 8, 0, 1).pin_memory is False


def test_the_all_reduce_alone_moves_what_the_comm_hook_put_on_the_wire(monkeypatch):
    """--comm_hook bf16 sends each bucket in half its bytes: the probe's transfer alone must move those, in bf16,
    not the float32 buckets, or "running beside backward cost it X ms" compares two different transfers."""
    from scalelab.train import comm, probe

    scratch = comm.Scratch()
    views = scratch.views([3_000_000, 1_000_001], torch.device("cpu"), torch.bfloat16)
    assert [v.dtype for v in views] == [torch.bfloat16] * 2
    assert [v.numel() * 2 for v in views] == [3_000_000, 1_000_000] and scratch.buffer.numel() == 750_000
    sent = []
    monkeypatch.setattr(comm, "allreduce_alone_s",
                        lambda sizes, device, scratch, dtype: sent.append((sizes, dtype)) or 0.1)
    for hook, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("none", torch.float32),
                        ("powersgd:2", torch.float32)):
        steps = probe.AloneProbe(torch.device("cpu"), 2, comm.CommTimer(hook))
        steps.comm.bucket_bytes, steps.comm.wire_bytes = [8_000, 4_000], [4_000, 2_000]
        steps.allreduce_alone()
        assert sent[-1] == ([4_000, 2_000], dtype)
    steps.comm.wire_bytes = []  # a step that sent nothing recorded (an older scalelab's): the buckets
    steps.allreduce_alone()
    assert sent[-1] == ([8_000, 4_000], torch.float32)


def test_the_up_front_memory_check_counts_the_world_size_and_the_accumulation(monkeypatch):
    """xl at 2 sequences a GPU on a 40 GB A100: with K = 2 a DDP rank needs 41.1 GB (the no-sync batches' gradients
    beside DDP's buckets) and is refused before it starts; at K = 1 it fits (35.9), and one GPU holds no buckets."""
    from types import SimpleNamespace

    import pytest

    from scalelab import config
    from scalelab.errors import UsageError
    from scalelab.train import memcheck

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(total_memory=40e9, name="NVIDIA A100-SXM4-40GB"))
    k2 = config.for_accelerator(config.parse_config(["--config", "gpt-xl", "--batch_size", "2",
                                                     "--accumulate_grad_batches", "2"]), "gpu")
    with pytest.raises(UsageError) as err:
        memcheck.check_gpu(k2, 2, 8)
    assert "≈ 41.1 GB per GPU" in str(err.value) and "accumulated 5.3" in str(err.value)
    assert "--batch_size 1 fits" in str(err.value)
    memcheck.check_gpu(config.for_accelerator(config.parse_config(["--config", "gpt-xl", "--batch_size", "2"]),
                                                "gpu"), 2, 8)
    memcheck.check_gpu(k2, 2, 1)  # one GPU: no buckets, the accumulated gradients are its own (35.9 GB)


def test_the_up_front_memory_check_counts_fsdps_shards(monkeypatch):
    """xl at 3 sequences a GPU on a 40 GB A100: a DDP replica needs 40.9 GB and is refused; sharded over 8 ranks
    (--strategy fsdp) one rank needs 19.5 GB and starts; at 8 sequences even the shard is refused (44.9 GB: the
    activations are not sharded), with the batch that fits counted as FSDP counts it (7: 39.8 GB)."""
    from types import SimpleNamespace

    import pytest

    from scalelab import config
    from scalelab.errors import UsageError
    from scalelab.train import memcheck

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(total_memory=40e9, name="NVIDIA A100-SXM4-40GB"))

    def cfg(*extra):
        return config.for_accelerator(config.parse_config(["--config", "gpt-xl", *extra]), "gpu")
    with pytest.raises(UsageError, match="needs ≈ 40.9 GB per GPU"):
        memcheck.check_gpu(cfg(), 3, 8)
    memcheck.check_gpu(cfg("--strategy", "fsdp"), 3, 8)
    with pytest.raises(UsageError) as err:  # through check, which once left FSDP out
        memcheck.check(cfg("--strategy", "fsdp"), SimpleNamespace(accelerator="gpu", world_size=8, devices=8), 8)
    assert "needs ≈ 44.9 GB per GPU" in str(err.value) and "gathered 0.2" in str(err.value)
    assert "--batch_size 7 fits" in str(err.value)


def test_the_cpu_rehearsal_checks_a_nodes_ranks_against_the_hosts_memory():
    """The dry run: `MODEL=gpt PRESET=small` on 4 ranks of a 23 GB machine started ranks of ≈ 12 GB each and the
    kernel killed one; now refused before the ranks start, with the batch that would fit."""
    import pytest

    from scalelab import config
    from scalelab.errors import UsageError
    from scalelab.train import memcheck

    small = config.for_accelerator(config.parse_config(["--config", "gpt-small"]), "cpu")
    with pytest.raises(UsageError) as err:
        memcheck.check_host(small, 8, 4, 4, 23e9, "this node's MemAvailable")
    said = str(err.value)
    assert said.startswith("--preset small at batch 8/device, seq 1024, precision 32: 4 rank(s) on this node need "
                           "4 x 12.6 GB of host memory but this node's MemAvailable leaves 23.0 GB: --batch_size 2 "
                           "would fit, or fewer --devices per node (SCALELAB_NO_MEMORY_CHECK=1 runs anyway)"), said
    memcheck.check_host(small, 8, 4, 1, 23e9, "x")  # one rank of 12.6 GB fits
    memcheck.check_host(small, 2, 4, 4, 23e9, "x")  # the batch it advised fits
    tiny = config.for_accelerator(config.parse_config(["--config", "gpt-tiny"]), "cpu")
    memcheck.check_host(tiny, 8, 8, 8, 23e9, "x")  # the rehearsal's own size: 8 ranks of 0.6 GB


def test_the_hosts_memory_is_what_the_kernel_or_the_cgroup_leaves(tmp_path):
    from scalelab.train import memcheck

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    own = tmp_path / "self-cgroup"
    own.write_text("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n")  # a SLURM task's, cgroup v2
    cg = tmp_path / "cg"
    task = cg / "system.slice" / "slurmstepd.scope" / "job_7" / "step_0" / "user" / "task_0"
    task.mkdir(parents=True)

    def room():
        return memcheck.host_memory(str(meminfo), str(cg), str(own))
    assert room() == (20000000 * 1024, "this node's MemAvailable")  # no limit anywhere
    (task / "memory.max").write_text("max\n")
    (task / "memory.current").write_text("100\n")
    assert room()[1] == "this node's MemAvailable"
    job = task.parent.parent.parent
    (job / "memory.max").write_text("6000000000\n")  # SLURM's --mem=6G sits on the job's cgroup, above the task's
    (job / "memory.current").write_text("1000000000\n")
    assert room() == (5e9, "its cgroup's memory.max")
    (task / "memory.max").write_text("3000000000\n")  # the tightest of them counts
    assert room() == (3e9 - 100, "its cgroup's memory.max")
    assert memcheck.host_memory(str(tmp_path / "none"))[0] == float("inf")


def test_the_torch_a_gpu_cluster_may_bring_is_no_older_than_the_one_the_tests_run():
    """setup.cfg's torch floor is what a site's own CUDA build must reach: the version the Makefile pins and every
    test runs. A lower floor promised APIs that version lacks (FSDP2's custom collectives and sum-only
    reductions, the *_single collectives, Dynamo's ignore_compile_internals): a traceback on the first GPU run."""
    import configparser
    import re

    from helpers import ROOT

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    (floor,) = re.findall(r"^torch>=([\d.]+)$", cfg["options"]["install_requires"], re.M)
    (pin,) = re.findall(r"^TORCH\s*\?=\s*torch==([\d.]+)$", (ROOT / "Makefile").read_text(), re.M)
    assert floor.split(".")[:2] == pin.split(".")[:2], (floor, pin)
