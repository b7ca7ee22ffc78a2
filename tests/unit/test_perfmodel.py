"""The analytic model: the worked example of docs/07, nccl-tests arithmetic, peaks, and scaling by hand."""

import sys
from math import prod

import pytest

from scalelab import perfmodel as pm
from scalelab.perfmodel import scaling
from scalelab.workloads.presets import PRESETS, TransformerShape

GB = 1e9
S_2B_FP32 = 2e9 * 4  # 8 GB of fp32 gradients


# --- the worked example (docs/07-network-arithmetic.md) --------------------------------------------------

def test_worked_example_compute():
    tflop = pm.iteration_tflop_per_gpu(2, 2048, 16, 8, recompute=True)
    assert tflop == pytest.approx(65.536)
    assert pm.iteration_tflop_per_gpu(2, 2048, 16, 8, recompute=False) == pytest.approx(65.536 * 3 / 4)
    assert tflop / (312 * 0.5) == pytest.approx(0.42, abs=0.001)  # 156 TFLOP/s = 50 % MFU on A100


def test_worked_example_one_node_nvlink():
    assert pm.allreduce_bytes_per_rank(S_2B_FP32, 8) == pytest.approx(14 * GB)
    assert pm.allreduce_time_s(S_2B_FP32, 8, 300) == pytest.approx(0.0467, abs=1e-4)


def test_worked_example_four_nodes_hdr_and_ndr():
    assert pm.allreduce_bytes_per_rank(S_2B_FP32, 32) == pytest.approx(15.5 * GB)
    assert pm.allreduce_time_s(S_2B_FP32, 32, pm.gbit_to_GBps(200)) == pytest.approx(0.62)
    assert pm.allreduce_time_s(S_2B_FP32, 32, pm.gbit_to_GBps(400)) == pytest.approx(0.31)


def worked_example_inputs(**overrides):
    kw = dict(devices=8, num_nodes=(1, 4), n_params=2e9, grad_dtype_bytes=4, intra_GBps=300,
              inter_GBps=pm.gbit_to_GBps(200), flops_per_step=65.536e12, tflops=312, mfu=0.5)
    return pm.ScalingInputs(**{**kw, **overrides})


def test_worked_example_prediction_rows_and_flags():
    rows = pm.predict(worked_example_inputs())
    assert [(r.label, r.world_size, r.link) for r in rows] == [("1 GPU", 1, "none"), ("1 node", 8, "intra"),
                                                         ("4 nodes", 32, "inter")]
    one, node, four = rows
    assert one.comm_s == 0 and not one.comm_bound and one.efficiency_no_overlap == 1
    assert all(r.compute_s == pytest.approx(0.42, abs=0.001) for r in rows)  # weak: per-GPU work fixed
    assert node.comm_s == pytest.approx(0.0467, abs=1e-4) and not node.comm_bound
    assert four.comm_s == pytest.approx(0.62) and four.comm_bound
    assert four.bandwidth_GBps == 25
    assert four.step_s_no_overlap == pytest.approx(four.compute_s + 0.62)
    assert four.step_s_overlap == pytest.approx(0.62)
    faster = pm.predict(worked_example_inputs(inter_GBps=pm.gbit_to_GBps(400)))[-1]
    assert faster.comm_s == pytest.approx(0.31) and not faster.comm_bound
    line = pm.verdict(rows)
    assert line.startswith("communication-bound from 4 nodes (32 GPUs): all-reduce 0.62 s > compute 0.42 s")
    assert "36.9 GB/s (295 Gbit/s)" in line  # 15.5 GB / 0.42 s


def test_duplex_shortcut_is_not_the_model():
    # "2·S over duplex NVLink" would give 0.027 s and 0.64 s; the ring model must not.
    assert pm.allreduce_time_s(S_2B_FP32, 8, 300) != pytest.approx(2 * S_2B_FP32 / 600e9, rel=0.1)
    assert pm.allreduce_time_s(S_2B_FP32, 32, 25) != pytest.approx(0.64, rel=0.01)


# --- nccl-tests arithmetic ----------------------------------------------------------------------------

def test_busbw_hand_cases():
    assert pm.busbw_from_algbw(10.0, 2) == pytest.approx(10.0)  # n=2: busbw = algbw
    assert pm.busbw_from_algbw(10.0, 8) == pytest.approx(17.5)  # n=8: 2·7/8 = 1.75x
    assert pm.busbw_from_algbw(10.0, 1) == 0
    assert pm.algbw_from_busbw(17.5, 8) == pytest.approx(10.0)


def test_measured_busbw_replaces_beta():
    # t = S·2(n−1)/n / busbw; and the algbw it implies gives back the same busbw.
    t = pm.allreduce_time_from_busbw_s(S_2B_FP32, 32, 25)
    assert t == pytest.approx(0.62)
    assert pm.busbw_from_algbw(S_2B_FP32 / t / GB, 32) == pytest.approx(25)
    assert pm.allreduce_time_from_busbw_s(1 * GB, 2, 10) == pytest.approx(0.1)  # n=2: S / busbw


def test_latency_term():
    assert pm.allreduce_time_s(0, 8, 100, latency_s=1e-5) == pytest.approx(14e-5)  # 2(n−1) steps
    assert pm.allreduce_time_s(0, 8, 100, latency_s=1e-5, buckets=3) == pytest.approx(3 * 14e-5)
    assert pm.allreduce_time_s(1 * GB, 8, 100, latency_s=1e-6) == pytest.approx(14e-6 + 1.75 / 100)
    assert pm.allreduce_time_s(1 * GB, 1, 100, latency_s=1) == 0  # one rank: nothing to reduce


def test_ring_for_topology():
    assert pm.ring_for(1, 8, 300, 25, 2e-6, 5e-6) == pm.Ring(8, 300, 2e-6, "intra")
    assert pm.ring_for(4, 8, 300, 25, 2e-6, 5e-6) == pm.Ring(32, 25, 5e-6, "inter")
    assert pm.ring_for(1, 1, 300, 25).link == "none"


def test_unit_helpers():
    assert pm.gbit_to_GBps(200) == 25 and pm.gbit_to_GBps(400) == 50
    assert pm.GBps_to_gbit(25) == 200


@pytest.mark.parametrize("bad", [dict(n=0), dict(bandwidth_GBps=0), dict(bandwidth_GBps=-1), dict(latency_s=-1)])
def test_communication_rejects_bad_values(bad):
    kw = {**dict(grad_bytes=GB, n=8, bandwidth_GBps=100), **bad}
    with pytest.raises(ValueError):
        pm.allreduce_time_s(**kw)


# --- peaks and MFU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("device, precision, peak", [
    ("NVIDIA H100 80GB HBM3", "bf16-mixed", 989.5), ("NVIDIA H100 80GB HBM3", "32", 67),
    ("NVIDIA H100 PCIe", "bf16-mixed", 756.5), ("NVIDIA H100 PCIe", "32-true", 51),
    ("NVIDIA A100-SXM4-80GB", "bf16-mixed", 312), ("NVIDIA A100-SXM4-80GB", "16-mixed", 312),
    ("NVIDIA A100-SXM4-80GB", "32", 19.5), ("NVIDIA A100-SXM4-80GB", "tf32", 156),
    ("NVIDIA A100 80GB PCIe", "bf16-true", 312),
    ("NVIDIA H200", "bf16-mixed", 989.5), ("NVIDIA H200", "32-true", 67),
])
def test_peak_lookup(device, precision, peak):
    assert pm.peak_tflops(device, precision) == peak


@pytest.mark.parametrize("device, precision", [
    ("cpu", "32"), ("cpu", "bf16-mixed"), ("", "32"), ("AMD Instinct MI250X / MI250", "bf16-mixed"),
    ("NVIDIA RTX A1000", "32"),  # not an A100
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "bf16-mixed"),  # a slice: its peak is a fraction
    ("NVIDIA H100", "bf16-mixed"), ("NVIDIA A100-SXM4-80GB", "64-true"), ("NVIDIA A100-SXM4-80GB", "nonsense"),
    ("Tesla V100-SXM2-16GB", "bf16-mixed"),  # Volta has no bf16 tensor cores
])
def test_peak_is_none_rather_than_made_up(device, precision):
    assert pm.peak_tflops(device, precision) is None


# (torch's device name, the datasheet's dense bf16, tf32 and fp32 figures; None where the device has no such units).
# Written as the datasheet prints them: dense where it prints dense, "x / 2" where it prints only the figure with
# 2:4 sparsity. AMD: per device as torch sees it, fp32 being the FP32 matrix rate (rocBLAS's FP32 GEMM); an
# MI250X module (383 bf16, 95.7 fp32 matrix) is two devices.
DATASHEET = [
    ("NVIDIA A100-SXM4-40GB", 312, 156, 19.5), ("NVIDIA A100 80GB PCIe", 312, 156, 19.5),
    ("NVIDIA H100 80GB HBM3", 1979 / 2, 989 / 2, 67), ("NVIDIA H100 PCIe", 1513 / 2, 756 / 2, 51),
    ("NVIDIA H100 NVL", 1671 / 2, 835 / 2, 60), ("NVIDIA H200", 1979 / 2, 989 / 2, 67),
    ("NVIDIA H200 NVL", 1671 / 2, 835 / 2, 60), ("NVIDIA GH200 480GB", 1979 / 2, 989 / 2, 67),
    ("NVIDIA L40S", 362.05, 183, 91.6), ("NVIDIA L40", 181.05, 90.5, 90.5), ("NVIDIA L4", 242 / 2, 120 / 2, 30.3),
    ("NVIDIA A40", 149.7, 74.8, 37.4), ("NVIDIA RTX A6000", 309.7 / 2, 154.8 / 2, 38.7),
    ("NVIDIA A10", 125, 62.5, 31.2), ("Tesla T4", None, None, 8.1), ("Tesla V100-SXM2-32GB", None, None, 15.7),
    ("Tesla V100-PCIE-16GB", None, None, 14),
    ("Tesla V100S-PCIE-32GB", None, None, 16.4), ("Tesla P100-SXM2-16GB", None, None, 10.6),
    ("AMD Instinct MI250X", 383 / 2, None, 95.7 / 2), ("AMD Instinct MI300X", 1307.4, 653.7, 163.4),
]


@pytest.mark.parametrize("device, bf16, tf32, fp32", DATASHEET)
def test_each_named_device_has_its_datasheet_peak(device, bf16, tf32, fp32):
    got = [pm.peak_tflops(device, p) for p in ("bf16-mixed", "tf32", "32-true")]
    assert got == [pytest.approx(v, abs=0.051) if v else None for v in (bf16, tf32, fp32)]  # 309.7 / 2
    for precision, value in zip(("bf16-mixed", "tf32", "32-true"), got):
        assert (value is None) == bool(pm.peak_or_reason(device, precision)[1])  # a reason exactly when no figure


@pytest.mark.parametrize("device, fp16", [("Tesla T4", 65), ("Tesla V100-SXM2-32GB", 125),
                                          ("Tesla V100-PCIE-16GB", 112), ("Tesla V100S-PCIE-32GB", 130),
                                          ("Tesla P100-PCIE-16GB", 18.7), ("NVIDIA A40", 149.7),
                                          ("AMD Instinct MI250X", 191.5)])
def test_fp16_peaks_of_the_cards_without_bf16(device, fp16):
    assert pm.peak_tflops(device, "16-mixed") == fp16


@pytest.mark.parametrize("device, precision, reason", [
    ("NVIDIA A10G", "bf16-mixed", "NVIDIA A10G is not in scalelab's datasheet table"),  # no public datasheet
    ("NVIDIA RTX 6000 Ada Generation", "bf16-mixed",
     "NVIDIA RTX 6000 Ada Generation is not in scalelab's datasheet table"),  # not the RTX A6000
    ("NVIDIA GeForce RTX 4090", "bf16-mixed", "NVIDIA GeForce RTX 4090 is not in scalelab's datasheet table"),
    ("AMD Instinct MI250X / MI250", "bf16-mixed", "the name does not tell an MI250X from an MI250"),
    ("NVIDIA H100", "bf16-mixed", "the name does not tell an H100 SXM from a PCIe card"),
    ("NVIDIA H200 PCIe", "bf16-mixed", "an H200 PCIe card is not in the datasheets"),
    ("Tesla V100-SXM3-32GB", "16-mixed", "the name does not tell a V100 SXM2 from a PCIe card"),
    ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "bf16-mixed", "a MIG slice has a fraction of the card's peak"),
    ("Tesla V100-SXM2-32GB", "bf16-mixed", "V100 SXM2 has no bf16 matrix units"),
    ("AMD Instinct MI250X", "tf32", "MI250X GCD has no tf32 matrix units"),
    ("NVIDIA A100-SXM4-80GB", "64-true", "precision 64-true has no peak in the table"),
    ("cpu", "32", "a CPU has no datasheet peak"), ("", "32", "a CPU has no datasheet peak"),
])
def test_an_unknown_peak_is_none_with_its_reason(device, precision, reason):
    assert pm.peak_or_reason(device, precision) == (None, reason)


@pytest.mark.parametrize("device, achieved", [("NVIDIA A40", 100.0), ("NVIDIA RTX A6000", 100.0),
                                              ("NVIDIA H100 NVL", 600.0), ("AMD Instinct MI250X", 120.0),
                                              ("NVIDIA L4", 80.0)])
def test_mfu_of_a_plausible_bf16_run_stays_below_one(device, achieved):
    """Two thirds of the tensor-core rate is a good bf16 run on any of these; against the non-tensor rate a table
    once gave the A40 and A6000 (37.4, 38.7 TFLOP/s) it would read 2.7x, against the whole MI250X module's 383 half
    of what it is."""
    peak = pm.peak_tflops(device, "bf16-mixed")
    assert 0.5 < pm.mfu(achieved, peak) < 0.9


def test_mfu():
    assert pm.mfu(156, 312) == pytest.approx(0.5)
    assert pm.mfu(156, pm.peak_tflops("NVIDIA A100-SXM4-80GB", "bf16-mixed")) == pytest.approx(0.5)
    assert pm.mfu(1.0, pm.peak_tflops("cpu", "32")) is None
    assert pm.mfu(1.0, 0) is None


# --- FLOPs --------------------------------------------------------------------------------------------

def test_tiny_preset_flops_per_token_by_hand():
    # tiny: L=4, H=4, d=256 (Q=64), T=128, vocab 512. Matmul weights: 12·256² per block, plus the LM head 256·512.
    n = 4 * 12 * 256 * 256 + 256 * 512
    assert n == 3_276_800 == PRESETS["tiny"].matmul_params()
    attention = 12 * 4 * 4 * 64 * 128  # 1,572,864
    tiny = PRESETS["tiny"]
    assert pm.transformer_flops_per_token(tiny) == 6 * 3_276_800 + 1_572_864 == 21_233_664
    assert pm.transformer_flops_per_token(tiny, causal=True) == 6 * 3_276_800 + 786_432
    # the same from an explicit parameter count, and a run's seq_len overriding the preset's
    assert pm.transformer_flops_per_token(n, 4, 4, 64, 128) == 21_233_664
    assert pm.transformer_flops_per_token(tiny, seq_len=256) == 6 * n + 2 * attention
    with pytest.raises(ValueError, match="seq_len"):
        pm.transformer_flops_per_token(n, 4, 4, 64)


def test_dense_flops():
    assert pm.dense_flops_per_sample(1000) == 6000


def test_module_does_not_import_torch():
    import subprocess

    code = "import sys; import scalelab.perfmodel; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(pm.__file__).rsplit("/scalelab/", 1)[0]})
    assert out.stdout.strip() == "False", out.stderr


def test_predict_cli_does_not_import_torch():
    """The predict CLI's logic (scalelab.predict) stays instant: pure arithmetic, no torch."""
    import subprocess

    code = "import sys; import scalelab.predict; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(pm.__file__).rsplit("/scalelab/", 1)[0]})
    assert out.stdout.strip() == "False", out.stderr


# --- weak vs strong by hand ---------------------------------------------------------------------------

def small_cluster(scaling, **kw):
    # S = 1 GB, 4 GPUs per node; intra 100 GB/s, inter 10 GB/s; 1 s of compute per step on 1 GPU.
    return pm.predict(pm.ScalingInputs(devices=4, num_nodes=(1, 2), grad_bytes=GB, intra_GBps=100, inter_GBps=10,
                                       compute_s=1.0, scaling=scaling, bucket_bytes=None, **kw))


def test_weak_scaling_by_hand():
    one, node, two = small_cluster("weak")
    assert node.comm_s == pytest.approx(2 * 3 / 4 * 1 / 100)  # 0.015 s
    assert two.comm_s == pytest.approx(2 * 7 / 8 * 1 / 10)  # 0.175 s
    assert node.compute_s == two.compute_s == 1.0
    assert node.efficiency_no_overlap == pytest.approx(1 / 1.015)
    assert node.speedup_no_overlap == pytest.approx(4 / 1.015)
    assert two.efficiency_no_overlap == pytest.approx(1 / 1.175)
    assert two.efficiency_overlap == pytest.approx(1.0) and two.speedup_overlap == pytest.approx(8)
    assert not any(r.comm_bound for r in (one, node, two))


def test_strong_scaling_by_hand():
    one, node, two = small_cluster("strong")
    assert node.compute_s == pytest.approx(0.25) and two.compute_s == pytest.approx(0.125)
    assert node.speedup_no_overlap == pytest.approx(1 / 0.265)
    assert node.efficiency_no_overlap == pytest.approx(1 / 0.265 / 4)
    assert node.speedup_overlap == pytest.approx(4) and node.efficiency_overlap == pytest.approx(1)
    assert two.comm_bound  # 0.175 s > 0.125 s
    assert two.speedup_no_overlap == pytest.approx(1 / 0.3)
    assert two.efficiency_no_overlap == pytest.approx(1 / 0.3 / 8)
    assert two.speedup_overlap == pytest.approx(1 / 0.175)
    assert two.efficiency_overlap == pytest.approx(1 / 0.175 / 8)
    assert pm.verdict([one, node, two]).startswith("communication-bound from 2 nodes (8 GPUs)")


def test_measured_busbw_per_scale_replaces_the_link():
    _, node, two = small_cluster("weak", busbw_GBps={2: 5.0})
    assert node.link == "intra" and two.link == "busbw" and two.bandwidth_GBps == 5
    assert two.comm_s == pytest.approx(1.75 / 5)


def test_latency_is_paid_per_ddp_bucket():
    kw = dict(devices=8, num_nodes=(1,), grad_bytes=100 * 2**20, compute_s=1.0, intra_latency_s=1e-5)
    node = pm.predict(pm.ScalingInputs(bucket_bytes=25 * 2**20, **kw))[-1]
    assert node.latency_term_s == pytest.approx(4 * 14 * 1e-5)
    assert node.comm_s == pytest.approx(4 * 14e-5 + 1.75 * 100 * 2**20 / 300e9)
    whole = pm.predict(pm.ScalingInputs(bucket_bytes=None, **kw))[-1]
    assert whole.latency_term_s == pytest.approx(14e-5)


def test_time_and_cost_to_train():
    rows = small_cluster("weak", tokens_per_step=1000, token_budget=8e6, gpu_hour_price=3.0)
    two = rows[-1]
    assert two.tokens_per_step == 8000  # weak: tokens per step grow with GPUs
    steps = 8e6 / 8000
    assert two.train_h_no_overlap == pytest.approx(steps * 1.175 / 3600)
    assert two.train_h_overlap == pytest.approx(steps * 1.0 / 3600)
    assert two.cost_no_overlap == pytest.approx(steps * 1.175 / 3600 * 8 * 3.0)
    strong = small_cluster("strong", tokens_per_step=1000, token_budget=8e6)[-1]
    assert strong.tokens_per_step == 1000 and strong.cost_overlap is None


def test_formula_states_model_and_bandwidth_assumption():
    text = pm.formula(worked_example_inputs())
    assert "2(n-1)/n * S / beta" in text and "unidirectional" in text
    assert "25 GB/s (200 Gbit/s) per node" in text and "300 GB/s per GPU" in text
    assert "not the '2*S over duplex NVLink' shortcut" in text


def test_predict_from_busbw_for_the_report():
    p = pm.predict_from_busbw(0.42, S_2B_FP32, world_size=32, num_nodes=4, busbw_GBps=25)
    assert p.comm_s == pytest.approx(0.62) and p.comm_bound
    assert p.efficiency_no_overlap == pytest.approx(0.42 / 1.04)
    assert p.efficiency_overlap == pytest.approx(0.42 / 0.62)
    solo = pm.predict_from_busbw(0.42, S_2B_FP32, world_size=1, num_nodes=1, busbw_GBps=None)
    assert solo.comm_s == 0 and solo.efficiency_no_overlap == 1 == solo.efficiency_overlap
    strong = pm.predict_from_busbw(1.0, GB, world_size=8, num_nodes=2, busbw_GBps=10, scaling="strong")
    assert strong.compute_s == pytest.approx(0.125) and strong.comm_s == pytest.approx(0.175)
    assert strong.efficiency_overlap == pytest.approx(1 / 0.175 / 8)
    with pytest.raises(ValueError):
        pm.predict_from_busbw(1.0, GB, world_size=8, num_nodes=3, busbw_GBps=10)
    with pytest.raises(ValueError):
        pm.predict_from_busbw(1.0, GB, world_size=8, num_nodes=1, busbw_GBps=None)


@pytest.mark.parametrize("bad", [
    dict(n_params=0), dict(n_params=-1), dict(compute_s=0), dict(mfu=1.5), dict(scaling="sideways"),
    dict(num_nodes=(0,)), dict(devices=0), dict(busbw_GBps={2: 0}), dict(compute_s=None, tflops=None),
])
def test_inputs_reject_bad_values(bad):
    kw = dict(devices=8, num_nodes=(1, 2), n_params=1e9, compute_s=1.0)
    with pytest.raises(ValueError):
        pm.ScalingInputs(**{**kw, **bad})


def test_accumulation_multiplies_compute_not_communication():
    base = dict(devices=1, num_nodes=[4], n_params=1e9, inter_GBps=0.125, compute_s=2.0, bucket_bytes=None)
    rows = {k: pm.predict(pm.ScalingInputs(**base, accumulate=k))[-1] for k in (1, 4, 16)}
    assert rows[4].comm_s == rows[1].comm_s and rows[4].compute_s == 4 * rows[1].compute_s
    # only the last batch's backward can hide the all-reduce: (K-1) * c + max(c, comm)
    assert rows[4].step_s_overlap == pytest.approx(3 * 2.0 + max(2.0, rows[4].comm_s))
    effs = [rows[k].efficiency_no_overlap for k in (1, 4, 16)]
    assert effs == sorted(effs) and effs[0] < effs[-1]


def test_a_hook_changes_the_bytes_on_the_wire_only():
    from scalelab.perfmodel.levers import gradient_shapes, wire_bytes

    shapes = gradient_shapes(PRESETS["xl"])
    full = wire_bytes("none", shapes, 4)
    assert full == 4 * PRESETS["xl"].total_params() and wire_bytes("bf16", shapes, 4) == full / 2
    base = dict(devices=1, num_nodes=[4], n_params=PRESETS["xl"].total_params(), inter_GBps=0.125, compute_s=2.0)
    plain, half = (pm.predict(pm.ScalingInputs(**base, wire_bytes=w))[-1] for w in (None, full / 2))
    assert half.comm_s == pytest.approx(plain.comm_s / 2, rel=1e-3) and half.compute_s == plain.compute_s
    assert wire_bytes("powersgd:4", shapes, 4) < full / 100  # rank-4 factors of 2048-wide matrices


@pytest.mark.parametrize("given, message", [
    ({"devices": 0}, "devices must be a positive number, got 0"),
    ({"devices": True}, "devices must be a positive number, got True"),
    ({"inter_GBps": float("inf")}, "inter_GBps must be a positive number, got inf"),
    ({"accumulate": 0}, "accumulate must be a positive number, got 0"),
    ({"wire_bytes": 0}, "wire_bytes must be a positive number, got 0"),
    ({"intra_latency_s": -1e-6}, "intra_latency_s must be a number >= 0, got -1e-06"),
    ({"inter_latency_s": "1"}, "inter_latency_s must be a number >= 0, got '1'"),
    ({"num_nodes": ()}, "num_nodes must be positive integers, got []"),
    ({"num_nodes": (2, 0)}, "num_nodes must be positive integers, got [2, 0]"),
    ({"scaling": "linear"}, "scaling must be 'weak' or 'strong', got 'linear'"),
    ({"grad_bytes": None}, "give grad_bytes or n_params"),
    ({"compute_s": 0}, "compute_s must be a positive number, got 0"),
    ({"token_budget": -5}, "token_budget must be a positive number, got -5"),
    ({"gpu_hour_price": -1}, "gpu_hour_price must be a number >= 0, got -1"),
    ({"compute_s": None, "flops_per_step": 1e12, "tflops": 100, "mfu": 1.5},
     "mfu is a fraction of peak (0 < mfu <= 1), got 1.5"),
    ({"compute_s": None, "flops_per_step": 1e12, "tflops": 100},
     "give compute_s, or flops_per_step with tflops and mfu"),
    ({"busbw_GBps": {2: 0}}, "busbw_GBps[2] must be a positive number, got 0"),
    ({"intra_GBps": 0}, "intra_GBps must be a positive number, got 0"),
    ({"grad_dtype_bytes": 0}, "grad_dtype_bytes must be a positive number, got 0"),
    ({"n_params": 0}, "n_params must be a positive number, got 0"),
    ({"grad_bytes": 0}, "grad_bytes must be a positive number, got 0"),
    ({"flops_per_step": 0}, "flops_per_step must be a positive number, got 0"),
    ({"tflops": 0}, "tflops must be a positive number, got 0"),
    ({"mfu": 0}, "mfu must be a positive number, got 0"),
    ({"bucket_bytes": 0}, "bucket_bytes must be a positive number, got 0"),
    ({"tokens_per_step": 0}, "tokens_per_step must be a positive number, got 0"),
    ({"intra_latency_s": float("inf")}, "intra_latency_s must be a number >= 0, got inf"),
])
def test_scaling_inputs_name_what_is_wrong(given, message):
    with pytest.raises(ValueError) as err:
        pm.ScalingInputs(**{"devices": 8, "grad_bytes": 1e9, "compute_s": 0.1, **given})
    assert str(err.value) == message


def test_scaling_inputs_derive_bytes_compute_and_buckets():
    i = pm.ScalingInputs(devices=4, num_nodes=(4, 2, 2, 1), n_params=25 * 2**20, grad_dtype_bytes=2,
                         flops_per_step=1e15, tflops=100, mfu=0.5, gpu_hour_price=0)
    assert i.num_nodes == (1, 2, 4) and i.allreduce_bytes == 50 * 2**20 and i.sent_bytes == 50 * 2**20
    assert i.compute_s_1gpu == pytest.approx(20.0)  # 1e15 FLOP at 50 % of 100 TFLOP/s
    assert i.buckets == 2  # 50 MiB in DDP's 25 MiB buckets
    assert pm.ScalingInputs(devices=1, grad_bytes=25 * 2**20 + 1, compute_s=1).buckets == 2
    assert pm.ScalingInputs(devices=1, grad_bytes=1, compute_s=1).buckets == 1
    assert pm.ScalingInputs(devices=1, grad_bytes=1e12, compute_s=1, bucket_bytes=None).buckets == 1
    assert pm.ScalingInputs(devices=1, grad_bytes=8e9, compute_s=1, wire_bytes=4e9).sent_bytes == 4e9


def test_the_scales_are_one_gpu_one_node_then_each_node_count():
    assert scaling.scales(4, [3, 1, 2, 2]) == [("1 GPU", 1, 1), ("1 node", 1, 4), ("2 nodes", 2, 8), ("3 nodes", 3, 12)]
    assert scaling.scales(1, [1, 2]) == [("1 GPU", 1, 1), ("2 nodes", 2, 2)]


def test_a_measured_busbw_predicts_weak_and_strong_scaling():
    # 8 ranks on 2 nodes, 1 GB of gradients at 10 GB/s busbw: 2 x 7/8 x 1 GB / 10 GB/s = 0.175 s
    weak = scaling.predict_from_busbw(0.1, 1e9, 8, 2, 10.0)
    assert (weak.comm_s, weak.compute_s) == (pytest.approx(0.175), 0.1) and weak.comm_bound
    assert (weak.step_s_no_overlap, weak.step_s_overlap) == (pytest.approx(0.275), pytest.approx(0.175))
    assert weak.efficiency_no_overlap == pytest.approx(0.1 / 0.275)
    assert weak.efficiency_overlap == pytest.approx(0.1 / 0.175)
    strong = scaling.predict_from_busbw(0.1, 1e9, 8, 2, 10.0, "strong")  # each rank computes 1/8
    assert strong.compute_s == pytest.approx(0.0125) and strong.step_s_no_overlap == pytest.approx(0.1875)
    assert strong.efficiency_no_overlap == pytest.approx(0.1 / 0.1875 / 8)
    assert strong.efficiency_overlap == pytest.approx(0.1 / 0.175 / 8)
    one = scaling.predict_from_busbw(0.1, 1e9, 1, 1, None)
    assert (one.comm_s, one.efficiency_no_overlap, one.efficiency_overlap, one.comm_bound) == (0.0, 1.0, 1.0, False)
    quick = scaling.predict_from_busbw(0.1, 1e9, 2, 1, 1000.0)  # 1 ms of comm under 100 ms of compute
    assert not quick.comm_bound and quick.efficiency_overlap == 1.0


@pytest.mark.parametrize("args, message", [
    ((0, 1e9, 2, 1, 1.0), "step_s_1gpu must be a positive number, got 0"),
    ((0.1, -1, 2, 1, 1.0), "grad_bytes must be a number >= 0, got -1"),
    ((0.1, 1e9, 6, 4, 1.0), "world_size 6 is not a multiple of num_nodes 4"),
    ((0.1, 1e9, 0, 1, 1.0), "world_size must be a positive number, got 0"),
    ((0.1, 1e9, 2, 0, 1.0), "num_nodes must be a positive number, got 0"),
    ((0.1, 1e9, 2, 1, None), "busbw_GBps is needed for world_size > 1"),
    ((0.1, 1e9, 2, 1, 1.0, "linear"), "scaling must be 'weak' or 'strong', got 'linear'"),
])
def test_a_measured_prediction_refuses_bad_input(args, message):
    with pytest.raises(ValueError) as err:
        scaling.predict_from_busbw(*args)
    assert str(err.value) == message


def _verdict(**given):
    inputs = {"devices": 8, "num_nodes": (2,), "grad_bytes": 1e9, "compute_s": 0.05, "bucket_bytes": None, **given}
    return scaling.verdict(pm.predict(pm.ScalingInputs(**inputs)))


def test_the_verdict_names_where_communication_outlasts_compute_and_the_link_that_would_hide_it():
    # 16 GPUs on 2 nodes: 2 x 15/16 x 1 GB over 25 GB/s per node = 0.075 s > 0.05 s; hiding it needs
    # 1.875 GB in 0.05 s = 37.5 GB/s = 300 Gbit/s
    assert _verdict() == ("communication-bound from 2 nodes (16 GPUs): all-reduce 0.075 s > compute 0.05 s; full "
                          "overlap needs >= 37.5 GB/s (300 Gbit/s) per node between nodes, or more work per GPU")
    assert _verdict(num_nodes=(1,), intra_GBps=10.0) == (  # 1.75 GB over 10 GB/s per GPU
        "communication-bound from 1 node (8 GPUs): all-reduce 0.175 s > compute 0.05 s; full overlap needs "
        ">= 35 GB/s per GPU within the node, or more work per GPU")
    assert _verdict(busbw_GBps={2: 5.0}) == (
        "communication-bound from 2 nodes (16 GPUs): all-reduce 0.375 s > compute 0.05 s; full overlap needs >= "
        "a busbw of 37.5 GB/s, or more work per GPU")
    assert _verdict(inter_latency_s=0.01).endswith(  # 2 x 15 hops x 10 ms = 0.3 s of latency alone
        "; latency alone exceeds compute: fewer, larger all-reduces or more work per GPU")
    assert _verdict(compute_s=0.1) == ("compute-bound at every scale: largest all-reduce share at 2 nodes (16 GPUs), "
                                       "0.075 s <= compute 0.1 s")


def test_the_network_arithmetic_by_hand():
    net = pm.network
    assert net.gbit_to_GBps(200) == 25 and net.GBps_to_gbit(25) == 200
    assert net.busbw_from_algbw(10.0, 8) == pytest.approx(17.5) and net.busbw_from_algbw(10.0, 1) == 0
    assert net.busbw_from_time(2e9, 0.5, 4) == pytest.approx(4 * 1.5)  # algbw 4 GB/s, x 2 x 3/4
    assert net.algbw_from_busbw(17.5, 8) == pytest.approx(10.0) and net.algbw_from_busbw(1.0, 1) == float("inf")
    assert net.allreduce_bytes_per_rank(1000, 4) == 1500 and net.allreduce_bytes_per_rank(1000, 1) == 0
    # 4 ranks, 1 GB at 10 GB/s with 1 ms a hop and 3 buckets: 3 x 2 x 3 x 1 ms + 1.5 GB / 10 GB/s
    assert net.allreduce_time_s(1e9, 4, 10.0, 0.001, 3) == pytest.approx(0.018 + 0.15)
    assert net.allreduce_time_s(1e9, 1, 10.0, 0.001) == 0.0
    assert net.allreduce_time_from_busbw_s(1e9, 4, 10.0) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="^n must be a positive number, got 0$"):
        net.busbw_from_algbw(1.0, 0)
    with pytest.raises(ValueError, match="^buckets must be a positive number, got 0$"):
        net.allreduce_time_s(1e9, 2, 10.0, buckets=0)
    with pytest.raises(ValueError, match="^latency_s must be a number >= 0, got -1$"):
        net.allreduce_time_s(1e9, 2, 10.0, latency_s=-1)
    with pytest.raises(ValueError, match="^grad_bytes must be a number >= 0, got -1$"):
        net.allreduce_bytes_per_rank(-1, 2)


def test_the_all_reduce_time_names_a_bad_rank_count_or_busbw_first():
    """A rank count is checked before anything is computed from it: True is not one rank, and a bad n is named
    even where the byte count is bad too; a busbw of 0 is refused, not divided by."""
    net = pm.network
    with pytest.raises(ValueError, match="^n must be a positive number, got True$"):
        net.allreduce_time_s(1e9, True, 10.0)
    with pytest.raises(ValueError, match="^n must be a positive number, got 0$"):
        net.allreduce_time_from_busbw_s(-1, 0, 10.0)
    with pytest.raises(ValueError, match="^busbw_GBps must be a positive number, got 0$"):
        net.allreduce_time_from_busbw_s(1e9, 4, 0)


def test_the_ring_runs_on_the_slowest_link_it_crosses():
    net = pm.network
    assert net.ring_for(1, 1, 300, 25, 1e-6, 5e-6) == net.Ring(1, None, 0.0, "none")
    assert net.ring_for(1, 8, 300, 25, 1e-6, 5e-6) == net.Ring(8, 300, 1e-6, "intra")
    assert net.ring_for(2, 8, 300, 25, 1e-6, 5e-6) == net.Ring(16, 25, 5e-6, "inter")
    assert net.ring_for(4, 1, 300, 25) == net.Ring(4, 25, 0.0, "inter")
    assert net.ring_for(1, 8, 300, 25) == net.Ring(8, 300, 0.0, "intra")  # no latency given: none charged
    with pytest.raises(ValueError, match="^num_nodes must be a positive number, got 0$"):
        net.ring_for(0, 8, 300, 25)
    with pytest.raises(ValueError, match="^devices must be a positive number, got 0$"):
        net.ring_for(1, 0, 300, 25)


def test_busbw_between_and_beyond_the_measured_sizes():
    net = pm.network
    rows = [{"bytes": 1000, "busbw_GBps": 1.0}, {"bytes": 100_000, "busbw_GBps": 4.0},
            {"bytes": 10_000, "busbw_GBps": None}]
    assert net.busbw_at(rows, 10) == 1.0 and net.busbw_at(rows, 1000) == 1.0 and net.busbw_at(rows, 1e6) == 4.0
    assert net.busbw_at(rows, 10_000) == pytest.approx(2.0)  # halfway in log(bytes): the geometric mean
    zero = [{"bytes": 1000, "busbw_GBps": 0.0}, {"bytes": 100_000, "busbw_GBps": 4.0}]
    assert net.busbw_at(zero, 10_000) == pytest.approx(2.0)  # log(0) undefined: linear in busbw
    assert net.busbw_at([{"bytes": 10, "busbw_GBps": 1.0}, {"bytes": 10, "busbw_GBps": 3.0}], 10) == 1.0
    # the largest size is clamped to: its own measurement, not one re-derived through logs (exp(log 3) is not 3.0)
    assert net.busbw_at([{"bytes": 1024, "busbw_GBps": 1.0}, {"bytes": 4096, "busbw_GBps": 3.0}], 4096) == 3.0
    # nccl-tests prints busbw with two decimals: a small size reads 0.00, and the size above it is reached linearly
    # (w = 1: 0 + 1 x 3.0), not through the logs of the pair above
    zero_first = [{"bytes": 1024, "busbw_GBps": 0.0}, {"bytes": 2048, "busbw_GBps": 3.0},
                  {"bytes": 4096, "busbw_GBps": 6.0}]
    assert net.busbw_at(zero_first, 2048) == 3.0
    falls_to_zero = [{"bytes": 1000, "busbw_GBps": 4.0}, {"bytes": 100_000, "busbw_GBps": 0.0}]
    assert net.busbw_at(falls_to_zero, 10_000) == pytest.approx(2.0)  # halfway, linear: no log of 0
    with pytest.raises(ValueError, match="^nbytes must be >= 0, got -1$"):
        net.busbw_at(rows, -1)
    with pytest.raises(ValueError, match="^no rows with a busbw to interpolate$"):
        net.busbw_at([{"bytes": 1, "busbw_GBps": None}], 1)
    with pytest.raises(ValueError, match="^no measured sizes around nan bytes: a size that is not a number$"):
        net.busbw_at(rows, float("nan"))  # e.g. a gradient size missing from a results frame


def test_a_summary_of_no_rows_has_every_figure_and_none_of_them():
    assert pm.network.bench_summary([]) == {"avg_busbw_GBps": None, "peak_busbw_GBps": None,
                                            "large_msg_busbw_GBps": None}


def test_the_plateau_is_the_median_of_the_three_largest_sizes():
    net = pm.network
    rows = [{"bytes": b, "busbw_GBps": v} for b, v in [(1, 0.1), (4, 9.0), (2, 5.0), (3, 7.0), (5, 8.0)]]
    assert net.plateau_busbw(rows) == 8.0  # of 7, 9, 8 (sizes 3, 4, 5)
    assert net.plateau_busbw(rows[:2]) == pytest.approx(4.55) and net.plateau_busbw([]) is None
    assert net.plateau_busbw([{"bytes": 9, "busbw_GBps": None}, *rows[:1]]) == 0.1


@pytest.mark.parametrize("name, family", [
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"), ("NVIDIA RTX A1000", None),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 SXM5", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H100 NVL 94GB HBM3", "H100 NVL"), ("NVIDIA H100", None),
    ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA H200 PCIe", None),
    ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA L40S", "L40S"), ("NVIDIA L40", "L40"), ("NVIDIA L4", "L4"),
    ("NVIDIA A10", "A10"), ("NVIDIA A10G", None), ("NVIDIA A40", "A40"), ("NVIDIA RTX A6000", "RTX A6000"),
    ("Tesla T4", "T4"), ("Tesla P100-PCIE-16GB", "P100 PCIe"), ("AMD Instinct MI250X", "MI250X GCD"),
    ("AMD Instinct MI300X", "MI300X"), ("AMD Instinct MI300X VF", "MI300X"), ("cpu", None),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100-PCIE-32GB", "V100 PCIe"), ("Tesla V100S-PCIE-32GB", "V100S"),
    ("Tesla V100-DGXS-32GB", None), ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", None), ("", None), (None, None),
])
def test_the_gpu_family_of_a_device_name(name, family):
    assert pm.peaks.gpu_family(name) == family


@pytest.mark.parametrize("name, answer", [
    ("NVIDIA H100 80GB HBM3", ("H100 SXM", "")), ("NVIDIA H100 NVL", ("H100 NVL", "")),
    ("NVIDIA H100 PCIe", ("H100 PCIe", "")), ("NVIDIA A100-SXM4-80GB", ("A100", "")),
    ("AMD Instinct MI250X", ("MI250X GCD", "")), ("NVIDIA RTX A6000", ("RTX A6000", "")),
    ("Tesla V100-SXM2-16GB", ("V100 SXM2", "")), ("Tesla V100-PCIE-32GB", ("V100 PCIe", "")),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", (None, "a MIG slice has a fraction of the card's peak")),
    ("NVIDIA H200 PCIe", (None, "an H200 PCIe card is not in the datasheets")),
    # the GH200's GPU is a Hopper H100: a name that carries both tokens is the superchip, not a bare H100
    ("NVIDIA GH200 H100 96GB", ("GH200", "")),
])
def test_a_family_comes_with_an_empty_reason_and_no_family_with_one(name, answer):
    """The contract callers rely on: a family with an empty reason, or None with the one line a report prints."""
    assert pm.family_or_reason(name) == answer


def test_peaks_by_precision_and_mfu():
    peaks = pm.peaks
    assert [peaks.precision_dtype(p) for p in ("32", " 32-TRUE ", "tf32", "bf16-mixed", "bf16-true", "16-mixed",
                                                 "half", "float32", "bfloat16", "64", None)] == [
        "fp32", "fp32", "tf32", "bf16", "bf16", "fp16", "fp16", "fp32", "bf16", None, None]
    assert peaks.peak_tflops("NVIDIA A100-SXM4-80GB", "bf16-mixed") == 312.0
    assert peaks.peak_tflops("NVIDIA A100-SXM4-80GB", "32") == 19.5  # TF32 off by default: the fp32 rate
    assert peaks.peak_tflops("NVIDIA H100 PCIe", "tf32") == 378.0
    assert peaks.peak_tflops("Tesla V100-SXM2-16GB", "bf16-mixed") is None  # Volta: no bf16 tensor cores
    assert peaks.peak_tflops("cpu", "32") is None and peaks.peak_tflops("NVIDIA A100", "64") is None
    assert peaks.mfu(156.0, 312.0) == 0.5 and peaks.mfu(0.0, 312.0) == 0.0 and peaks.mfu(0.25, 0.5) == 0.5
    assert peaks.mfu(1.0, None) is None and peaks.mfu(1.0, 0.0) is None and peaks.mfu(None, 312.0) is None
    with pytest.raises(ValueError, match="^achieved TFLOP/s must be >= 0, got -1.0$"):
        peaks.mfu(-1.0, 312.0)


def test_bytes_on_the_wire_per_hook():
    lv = pm.levers
    shapes = [(1000, 100), (10,), (4, 3)]  # 100,000 + 10 + 12 elements
    assert lv.wire_bytes("none", shapes, 4) == 4 * 100_022
    assert lv.wire_bytes("bf16", shapes, 4) == lv.wire_bytes("fp16", shapes, 4) == 2 * 100_022
    # PowerSGD rank 4: (1000 + 100) x 4 = 4,400 for the matrix; the vector (1 x 10, r = 1: 11 x 2 >= 10) and the
    # 4 x 3 matrix ((4 + 3) x 3 x 2 >= 12) go as they are
    assert lv.wire_bytes("powersgd:4", shapes, 4) == 4 * (4400 + 10 + 12)
    assert lv.wire_bytes("powersgd", [(1000, 100)], 2) == 2 * 1100  # rank 1 by default
    assert lv.wire_bytes("powersgd:4", shapes, 4, compressing=False) == 4 * 100_022
    assert lv.wire_bytes("powersgd:4", [()], 4) == 4  # a scalar: one element, sent as it is
    assert lv.accumulated_step(0.1, 0.3, 4) == (pytest.approx(0.7), pytest.approx(0.6))
    assert lv.accumulated_step(0.1, 0.05, 4) == (pytest.approx(0.45), pytest.approx(0.4))


def test_the_gradient_tensors_of_the_gpt():
    shape = TransformerShape(n_layer=2, n_head=2, d_model=8, seq_len=4, vocab_size=16)
    shapes = pm.levers.gradient_shapes(shape)
    assert shapes[:2] == [(16, 8), (4, 8)] and shapes[-2:] == [(8,), (8,)] and len(shapes) == 2 + 12 * 2 + 2
    assert shapes[2:14] == [(8,), (8,), (24, 8), (24,), (8, 8), (8,), (8,), (8,), (32, 8), (32,), (8, 32), (8,)]
    assert sum(prod(s) for s in shapes) == shape.total_params()  # every parameter has its gradient, once


def test_powersgd_edges_an_empty_tensor_and_a_tie_at_twice_smaller():
    lv = pm.levers
    assert lv.wire_bytes("powersgd:1", [(0, 5)], 4) == 0  # no rows: nothing to send, nothing to factor
    assert lv.wire_bytes("powersgd:1", [(4, 4)], 4) == 4 * 16  # (4 + 4) x 1 x 2 = 16: not smaller, sent as is
    assert lv.wire_bytes("powersgd:1", [(5, 4)], 4) == 4 * 9  # 9 x 2 = 18 < 20: factored
    assert isinstance(lv.wire_bytes("powersgd:4", [(1000, 100)], 4), int)  # a byte count, as the result records it


def test_a_size_that_is_not_one_is_refused_by_name():
    with pytest.raises(ValueError) as err:
        pm.network.parse_size("12 parsecs")
    assert str(err.value) == "not a size: '12 parsecs'"
    assert pm.network.parse_size("4gib") == pm.network.parse_size("4G") == 4 * 2**30


def test_the_model_in_words_with_this_predictions_figures():
    i = pm.ScalingInputs(devices=8, num_nodes=(2,), grad_bytes=1e9, compute_s=0.1, intra_latency_s=2e-6,
                         inter_latency_s=5e-6)
    assert scaling.formula(i).splitlines() == [
        "all-reduce (ring, nccl-tests definitions): each GPU sends and receives 2(n-1)/n * S bytes;",
        "  t_comm = buckets * 2(n-1) * alpha + 2(n-1)/n * S / beta   (S = 1 GB of gradients, buckets = 39 DDP buckets "
        "of 25 MiB)",  # 1e9 B in 25 MiB buckets: 38.1, so 39 calls
        "  with a measured busbw: t_comm = 2(n-1)/n * S / busbw   (busbw = algbw * 2(n-1)/n, algbw = S / t)",
        "step: no overlap = compute + comm; full overlap (DDP all-reduces buckets during backward) = max(compute, "
        "comm); reality lies between.",
        "weak scaling: per-GPU work fixed (global batch grows with GPUs); speedup = gpus * T1 / step, efficiency = "
        "compute / step.",
        "bandwidth (unidirectional): 1 node = one ring over its 8 GPUs on the intra-node link, beta = 300 GB/s per "
        "GPU, alpha = 2 us;",
        "  several nodes = one ring over all GPUs whose slowest hop is the inter-node link, beta = 25 GB/s (200 "
        "Gbit/s) per node, alpha = 5 us.",
        "  advertised link figures (applications reach ~80 %); ring model, not the '2*S over duplex NVLink' shortcut."]
    k = pm.ScalingInputs(devices=4, num_nodes=(1, 2), grad_bytes=1e9, wire_bytes=5e8, compute_s=0.1,
                         bucket_bytes=None, accumulate=4, scaling="strong", busbw_GBps={2: 12.5, 1: 100})
    lines = scaling.formula(k).splitlines()
    assert lines[1].endswith("(S = 0.5 GB on the wire: a hook compresses 1 GB, buckets = 1 = one all-reduce)")
    assert lines[4:6] == [
        "accumulation: an optimizer step computes K = 4 batches and all-reduces once: no overlap = K * compute + "
        "comm; full overlap = (K-1) * compute + max(compute, comm).",
        "strong scaling: global batch fixed, compute per GPU = T1 / gpus; speedup = T1 / step, efficiency = "
        "speedup / gpus."]
    assert lines[8] == "  measured busbw replaces the link figure at 1 node: 100 GB/s, 2 nodes: 12.5 GB/s."
    assert "alpha = 0 us" in lines[6]


def test_the_bandwidth_that_would_hide_the_all_reduce_and_the_largest_share_under_strong_scaling():
    import dataclasses

    rows = pm.predict(pm.ScalingInputs(devices=2, grad_bytes=1e9, compute_s=0.1, bucket_bytes=None))
    assert scaling.required_bandwidth_GBps(rows[0]) is None  # one GPU: nothing to hide
    assert scaling.required_bandwidth_GBps(rows[1]) == pytest.approx(1e9 / 0.1 / 1e9)  # 1 GB per rank in 0.1 s
    assert scaling.required_bandwidth_GBps(dataclasses.replace(rows[1], latency_term_s=0.1)) is None
    # strong scaling, an inter-node link faster than the node's own: 16 GPUs spend the largest share of their
    # (smaller) compute in the all-reduce, though 8 GPUs spend more seconds in it
    strong = pm.predict(pm.ScalingInputs(devices=8, num_nodes=(2,), grad_bytes=1e9, compute_s=10.0,
                                         inter_GBps=500.0, scaling="strong", bucket_bytes=None))
    assert scaling.verdict(strong) == ("compute-bound at every scale: largest all-reduce share at 2 nodes (16 GPUs), "
                                       "0.00375 s <= compute 0.625 s")


def test_accumulation_time_and_cost_by_hand():
    """2 nodes of 1 GPU, 1 GB at 10 GB/s: the all-reduce takes 2 x 1/2 x 1 GB / 10 GB/s = 0.1 s. 40 ms a batch, 2
    batches an optimizer step: no overlap 2 x 0.04 + 0.1 = 0.18 s, full overlap 0.04 + max(0.04, 0.1) = 0.14 s. Two
    GPUs do 2 x 2 one-GPU batches a step: speedup 0.16 / 0.18 and 0.16 / 0.14; 1000 tokens a batch -> 4000 a step,
    8e6 tokens = 2000 steps = 0.1 h and 280 / 3600 h; at 3 an hour for 2 GPUs, 0.6 and 280 / 3600 x 6."""
    two = pm.predict(pm.ScalingInputs(devices=1, num_nodes=(2,), grad_bytes=1e9, inter_GBps=10, bucket_bytes=None,
                                      compute_s=0.04, accumulate=2, tokens_per_step=1000, token_budget=8e6,
                                      gpu_hour_price=3.0))[-1]
    assert (two.comm_s, two.compute_s) == (pytest.approx(0.1), pytest.approx(0.08)) and two.comm_bound
    assert (two.step_s_no_overlap, two.step_s_overlap) == (pytest.approx(0.18), pytest.approx(0.14))
    assert (two.speedup_no_overlap, two.speedup_overlap) == (pytest.approx(0.16 / 0.18), pytest.approx(0.16 / 0.14))
    assert two.efficiency_overlap == pytest.approx(0.16 / 0.14 / 2)
    assert two.tokens_per_step == 4000
    assert (two.train_h_no_overlap, two.train_h_overlap) == (pytest.approx(0.1), pytest.approx(280 / 3600))
    assert (two.cost_no_overlap, two.cost_overlap) == (pytest.approx(0.6), pytest.approx(280 / 3600 * 6))


def test_an_all_reduce_exactly_as_long_as_compute_is_not_communication_bound():
    """1 GB over 2 ranks at 10 GB/s: 0.1 s, as long as the 0.1 s of compute: full overlap hides it all."""
    rows = pm.predict(pm.ScalingInputs(devices=1, num_nodes=(2,), grad_bytes=1e9, inter_GBps=10,
                                       bucket_bytes=None, compute_s=0.1))
    assert rows[-1].comm_s == rows[-1].compute_s == 0.1 and not rows[-1].comm_bound
    assert scaling.verdict(rows).startswith("compute-bound at every scale")
    tie = scaling.predict_from_busbw(0.1, 1e9, 2, 1, 10.0)
    assert tie.comm_s == tie.compute_s == 0.1 and not tie.comm_bound


def test_an_mfu_of_one_is_the_peak_itself():
    """mfu is a fraction of peak, 0 < mfu <= 1: at 1, 1e12 FLOP at 100 TFLOP/s take 10 ms."""
    i = pm.ScalingInputs(devices=1, grad_bytes=1e9, flops_per_step=1e12, tflops=100, mfu=1.0)
    assert i.compute_s_1gpu == pytest.approx(0.01)


def test_the_formula_names_accumulation_from_two_batches_and_latency_in_microseconds():
    i = pm.ScalingInputs(devices=2, grad_bytes=1e9, compute_s=0.1, accumulate=2, intra_latency_s=0.1234564)
    text = scaling.formula(i)
    assert "accumulation: an optimizer step computes K = 2 batches and all-reduces once" in text
    assert "alpha = 123456 us;" in text  # 0.1234564 s = 123456.4 us, to 6 significant digits


def test_hook_wire_bytes_by_shape_or_by_parameter_count():
    from scalelab.perfmodel import levers

    tiny = PRESETS["tiny"]
    numel = sum(prod(s) for s in levers.gradient_shapes(tiny))
    assert levers.hook_wire_bytes("none", tiny, 1e9, 4) is None
    assert levers.hook_wire_bytes("bf16", tiny, 1e9, 4) == 2 * numel  # the shape's own elements, not n_params
    assert levers.hook_wire_bytes("bf16", None, 1e9, 4) == 2e9
    assert levers.hook_wire_bytes("fp16", None, 1e9, 2) == 2e9  # 2-byte gradients stay 2 bytes
    assert levers.hook_wire_bytes("powersgd:4", tiny, 1e9, 4) == levers.wire_bytes("powersgd:4",
                                                                                    levers.gradient_shapes(tiny), 4)
    with pytest.raises(ValueError, match="powersgd:4 compresses each weight matrix by its shape"):
        levers.hook_wire_bytes("powersgd:4", None, 1e9, 4)


def test_lever_sweep_is_the_largest_scale_per_hook_and_k_and_the_first_compute_bound_k():
    inputs = worked_example_inputs()
    wires = {"none": None, "bf16": inputs.allreduce_bytes / 2}
    rows, bound_at = pm.lever_sweep(inputs, wires, (1, 4, 64))
    assert [(hook, k) for hook, k, _ in rows] == [("none", 1), ("none", 4), ("none", 64), ("bf16", 1), ("bf16", 4),
                                                  ("bf16", 64)]
    for hook, k, row in rows:
        alone = pm.predict(pm.ScalingInputs(**{**vars(inputs), "accumulate": k, "wire_bytes": wires[hook]}))[-1]
        assert row == alone
    firsts = {hook: next((k for h, k, row in rows if h == hook and not row.comm_bound), None) for hook in wires}
    assert bound_at == {hook: k for hook, k in firsts.items() if k is not None} == {"none": 4, "bf16": 1}
    assert rows[0][2].comm_s > rows[3][2].comm_s  # half the bytes on the wire: less time on it
