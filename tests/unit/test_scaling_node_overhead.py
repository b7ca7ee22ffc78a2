"""The one-node overhead term of perfmodel.predict, by hand: a node running more than one GPU loses a fixed share of
each step to its host (input pipeline, kernel launches), with or without a network; its default leaves the calibrated
forecast as it was."""

import pytest

from scalelab import perfmodel as pm
from scalelab.perfmodel import calibrate, scaling

GB = 1e9


def cluster(**kw):
    """S = 1 GB, intra 100 GB/s, inter 10 GB/s, one all-reduce; 0.9 s of compute per batch on 1 GPU; a node loses
    10 % of each step, so a GPU sharing a node computes for 0.9 / (1 - 0.1) = 1.0 s."""
    base = dict(devices=4, num_nodes=(1, 2), grad_bytes=GB, intra_GBps=100, inter_GBps=10, compute_s=0.9,
                bucket_bytes=None, node_overhead=0.1)
    return pm.predict(pm.ScalingInputs(**{**base, **kw}))


def test_a_full_node_computes_longer_and_one_gpu_does_not():
    one, node, two = cluster()
    assert one.compute_s == pytest.approx(0.9) and one.efficiency_overlap == 1
    assert node.compute_s == pytest.approx(1.0) and two.compute_s == pytest.approx(1.0)
    assert node.comm_s == pytest.approx(2 * 3 / 4 * 1 / 100)  # 0.015 s: the term leaves the all-reduce alone
    assert node.step_s_no_overlap == pytest.approx(1.015) and node.step_s_overlap == pytest.approx(1.0)
    assert node.efficiency_no_overlap == pytest.approx(0.9 / 1.015)
    assert node.efficiency_overlap == pytest.approx(0.9)  # full overlap still loses the node's 10 %
    assert node.speedup_no_overlap == pytest.approx(4 * 0.9 / 1.015)
    assert two.efficiency_no_overlap == pytest.approx(0.9 / (1.0 + 2 * 7 / 8 * 1 / 10))  # 0.9 / 1.175


def test_one_gpu_per_node_shares_no_host():
    (two,) = [r for r in cluster(devices=1, num_nodes=(2,)) if r.num_nodes == 2]
    assert two.compute_s == pytest.approx(0.9)
    assert two.efficiency_no_overlap == pytest.approx(0.9 / (0.9 + 0.1))  # 2 x 1/2 x 1 GB / 10 GB/s = 0.1 s


def test_strong_scaling_and_accumulation_carry_it():
    _, node, _ = cluster(scaling="strong")
    assert node.compute_s == pytest.approx(0.9 / 4 / 0.9)  # 0.25 s
    assert node.speedup_overlap == pytest.approx(0.9 / 0.25)
    _, node, _ = cluster(accumulate=2)
    assert node.step_s_no_overlap == pytest.approx(2 * 1.0 + 0.015)
    assert node.efficiency_no_overlap == pytest.approx(2 * 0.9 / 2.015)
    assert node.step_s_overlap == pytest.approx(1.0 + 1.0)


def test_no_overhead_is_the_model_as_it_was():
    assert [r.step_s_no_overlap for r in cluster(node_overhead=0.0)] == pytest.approx([0.9, 0.915, 1.075])
    assert pm.ScalingInputs(devices=8, grad_bytes=GB, compute_s=1).node_overhead == 0
    fit = calibrate.RingFit(0.0, 100.0, 0.0, 1, ("r",))
    assert calibrate.inputs_for(1.0, GB, 1, 8, (1,), fit, None).node_overhead == 0  # measured steps hold it


@pytest.mark.parametrize("name, bad", [("node_overhead", -0.1), ("node_overhead", 1.0), ("node_overhead", 1.5),
                                       ("node_doubling", -0.01), ("node_doubling", 1.0)])
def test_each_term_is_a_share_of_a_step(name, bad):
    with pytest.raises(ValueError, match=f"{name} is a fraction of a step"):
        pm.ScalingInputs(devices=8, grad_bytes=GB, compute_s=1, **{name: bad})


def test_the_model_in_words_names_it_only_where_a_node_shares_its_host():
    line = ("node overhead: a node running 4 GPUs loses 10 % of each step to its host, network or not: compute per "
            "GPU there = compute / (1 - 0.1) (--node_overhead).")
    base = dict(num_nodes=(1,), grad_bytes=GB, compute_s=1, node_overhead=0.1)
    assert line in scaling.formula(pm.ScalingInputs(devices=4, **base)).splitlines()
    assert "node running 2 GPUs loses 10 %" in scaling.formula(pm.ScalingInputs(devices=2, **base))
    assert "node overhead" not in scaling.formula(pm.ScalingInputs(devices=1, **base))
    assert "node overhead" not in scaling.formula(pm.ScalingInputs(devices=4, **{**base, "node_overhead": 0.0}))


def test_each_doubling_of_the_nodes_costs_its_share_and_one_node_none():
    one, node, two, four = cluster(num_nodes=(1, 2, 4), node_doubling=0.05)
    assert one.compute_s == pytest.approx(0.9) and node.compute_s == pytest.approx(1.0)  # no doubling on one node
    assert two.compute_s == pytest.approx(1.0 * 1.05) and four.compute_s == pytest.approx(1.0 * 1.10)
    assert four.comm_s == pytest.approx(2 * 15 / 16 * 1 / 10)  # the all-reduce is left alone
    assert four.efficiency_overlap == pytest.approx(0.9 / 1.10)
    assert four.efficiency_no_overlap == pytest.approx(0.9 / (1.10 + 0.1875))
    (two_of_one,) = [r for r in cluster(devices=1, num_nodes=(2,), node_doubling=0.05) if r.num_nodes == 2]
    assert two_of_one.compute_s == pytest.approx(0.9 * 1.05)  # a node of one GPU: the doubling, not the host's share
    assert pm.ScalingInputs(devices=8, grad_bytes=GB, compute_s=1).node_doubling == 0  # the forecast's: none


def test_the_model_in_words_names_the_doubling_only_where_there_are_several_nodes():
    line = ("node doubling: each doubling of the node count costs 1 % of a step more (the slowest of more nodes, a "
            "fuller fabric): compute x (1 + 0.01 * log2(nodes)) (--node_doubling).")
    base = dict(devices=4, grad_bytes=GB, compute_s=1, node_doubling=0.01)
    assert line in scaling.formula(pm.ScalingInputs(num_nodes=(1, 2), **base)).splitlines()
    assert "node doubling" not in scaling.formula(pm.ScalingInputs(num_nodes=(1,), **base))
    assert "node doubling" not in scaling.formula(pm.ScalingInputs(num_nodes=(2,), **{**base, "node_doubling": 0}))
