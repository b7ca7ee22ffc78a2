"""The levers on a real 2-process DDP run: gradient accumulation, compression hooks, DDP's knobs.

What they must do is what the model (perfmodel) and the report assume: one all-reduce per optimizer step of K
batches, throughput that counts every batch, the bytes on the wire each hook promises, and the settings recorded
as part of the workload (each setting its own scaling group)."""

import pytest

from helpers import load_results, run_script
from scalelab import config
from scalelab.errors import UsageError
from scalelab.perfmodel.levers import gradient_shapes, wire_bytes
from scalelab.workloads.presets import PRESETS

GPT = ["--model", "gpt", "--preset", "tiny", "--warmup_steps", "2", "--devices", "2"]


def test_comm_hook_flag_is_checked_and_normalised():
    assert config.parse_config(["--comm_hook", "powersgd"]).comm_hook == "powersgd:1"
    assert config.parse_config(["--comm_hook", "powersgd:4"]).comm_hook == "powersgd:4"
    for bad in ("powersgd:0", "int8", "bf16:2"):
        with pytest.raises(UsageError, match="expected none, fp16, bf16 or powersgd"):
            config.parse_config(["--comm_hook", bad])


def test_the_levers_are_part_of_the_workload_identity():
    one, other = config.parse_config([]), config.parse_config(["--accumulate_grad_batches", "4"])
    assert one.workload()["accumulate_grad_batches"] == 1 and other.workload()["accumulate_grad_batches"] == 4
    assert set(one.workload()) >= {"comm_hook", "bucket_cap_mb", "static_graph"}


def test_wire_bytes_per_hook():
    shapes = [(256, 64), (64,), (8, 4)]  # a weight, a bias, a matrix too small to be worth compressing
    numel = 256 * 64 + 64 + 32
    assert wire_bytes("none", shapes, 4) == 4 * numel
    assert wire_bytes("bf16", shapes, 4) == wire_bytes("fp16", shapes, 4) == 2 * numel
    # PowerSGD rank 2: the weight as P (256x2) and Q (64x2); bias and the 8x4 matrix ((8+4)*2*2 > 32) as they are
    assert wire_bytes("powersgd:2", shapes, 4) == 4 * ((256 + 64) * 2 + 64 + 32)
    assert wire_bytes("powersgd:2", shapes, 4, compressing=False) == 4 * numel  # its first, plain steps


@pytest.mark.slow
def test_accumulation_all_reduces_once_per_optimizer_step(tmp_path):
    proc = run_script("train.py", *GPT, "--max_steps", "8", "--accumulate_grad_batches", "3",
                      "--output_dir", tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "x 3 accumulated = 48 per optimizer step" in proc.stdout
    (r,) = load_results(tmp_path)
    rank = r["ranks"][0]
    assert rank["step_ends"] == [2, 5, 8, 11, 14, 17, 20, 23]  # 8 optimizer steps of 3 batches
    # DDP's no_sync: buckets only in the batch that ends a step (and none in a probe step's)
    probes = {end for i, end in enumerate(rank["step_ends"]) if i in rank["probe_steps"]}
    communicated = [i for i, n in enumerate(rank["buckets"]) if n]
    assert communicated == [end for end in rank["step_ends"] if end not in probes]
    t = r["timing"]
    assert t["steps"] == 8 and t["samples_per_step"] == 48 and r["workload"]["global_batch"] == 48
    assert t["step_s"]["median"] > 2 * min(rank["step_times_s"])  # a step is 3 batches
    assert t["tokens_per_s"] == pytest.approx(48 * 128 * t["timed_steps"] / t["train_time_s"])
    assert 5.5 < rank["losses"][0] < 7  # the batch's own loss (Lightning hands over loss / K): about ln(512)


def test_powersgd_over_gloo_with_several_buckets_is_refused_in_one_line(tmp_path):
    proc = run_script("train.py", *GPT, "--max_steps", "10", "--comm_hook", "powersgd:2", "--bucket_cap_mb", "5",
                      "--output_dir", tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "train.py: error: --comm_hook powersgd:2 over gloo needs one gradient bucket: the gradients are 12.7 MB, "
        "use --bucket_cap_mb 13 or more (NCCL has no such limit)")


@pytest.mark.slow
@pytest.mark.parametrize("hook, buckets_mb, ratio", [("bf16", 5, 0.5), ("powersgd:2", 25, None)])
def test_compression_hooks_record_their_bytes_on_the_wire(tmp_path, hook, buckets_mb, ratio):
    proc = run_script("train.py", *GPT, "--max_steps", "10", "--comm_hook", hook, "--bucket_cap_mb", buckets_mb,
                      "--static_graph", "--output_dir", tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (r,) = load_results(tmp_path)
    rank = r["ranks"][0]
    assert len(rank["bucket_bytes"]) == (3 if buckets_mb == 5 else 1)  # 12.7 MB of gradients
    sent, full = sum(rank["wire_bytes"]), sum(rank["bucket_bytes"])
    if ratio:
        assert sent == full * ratio
    else:
        assert sent < full / 10  # rank-2 factors of the tiny GPT's matrices
    assert r["workload"]["comm_hook"] == hook and r["config"]["static_graph"] is True
    assert r["timing"]["comm"]["allreduce_s"] > 0


def test_the_models_gradient_shapes_are_the_gpts():
    from scalelab.workloads.nets.transformer import GPT

    for preset in ("tiny", "small"):
        real = [tuple(p.shape) for p in GPT(PRESETS[preset]).parameters()]
        assert sorted(gradient_shapes(PRESETS[preset])) == sorted(real)
