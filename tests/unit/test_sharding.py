"""perfmodel/sharding.py: FSDP's all-gathers and reduce-scatters in the all-reduce's terms, on figures a real run
recorded (2 gloo ranks, tiny GPT in fp32: tests/scenarios/test_fsdp.py checks a fresh run against `expected`)."""

import pytest

from scalelab.perfmodel import sharding

GRAD = 13_293_568  # the tiny GPT's gradient bytes (fp32): what DDP all-reduces a step
SEEN = {"_allgather_base_": {"dtype": "float32", "bytes": 25_929_728, "calls": 9},
        "_reduce_scatter_base_": {"dtype": "float32", "bytes": 6_646_784, "calls": 5}}  # rank 0 of 2


def test_a_reduce_scatter_is_counted_by_its_input_the_scattered_output_times_the_ranks():
    wire = sharding.observed(SEEN, 2)
    assert wire == sharding.Wire(gather_bytes=25_929_728, gather_calls=9, scatter_bytes=GRAD, scatter_calls=5)
    assert sharding.observed(SEEN, 4).scatter_bytes == 4 * 6_646_784


def test_gathers_and_scatters_cost_half_an_all_reduce_each_in_bytes_and_in_calls():
    nbytes, calls = sharding.observed(SEEN, 2).allreduce_terms()
    assert nbytes == (25_929_728 + GRAD) / 2 and calls == 7
    assert nbytes / GRAD == pytest.approx(1.475, abs=0.001)  # FSDP ÷ DDP on the wire, measured
    ddp = sharding.observed({"allreduce_": {"bytes": GRAD, "calls": 2}}, 2)
    assert ddp.allreduce_terms() == (GRAD, 2)  # an all-reduce is itself
    # DDP's early broadcast of its bucket order (seen in a real 2-rank step): as an all-gather of its size
    early = sharding.observed({"broadcast_": {"dtype": "int32", "bytes": 216, "calls": 2},
                               "allreduce_": {"dtype": "float32", "bytes": GRAD, "calls": 1}}, 2)
    assert early.allreduce_terms() == (GRAD + 108, 2)
    # two ops of one kind add up, bytes and calls; an entry without bytes or calls adds nothing of it
    both = sharding.observed({"_allgather_base_": {"bytes": 1000, "calls": 3}, "allgather_": {"bytes": 24},
                              "_reduce_scatter_base_": {"bytes": 100, "calls": 2},
                              "reduce_scatter_": {"calls": 1}}, 4)
    assert both == sharding.Wire(gather_bytes=1024, gather_calls=3, scatter_bytes=400, scatter_calls=3)


def test_a_step_without_collectives_or_with_one_not_modelled_has_no_terms():
    assert sharding.observed({}, 1) is None and sharding.observed(None, 2) is None
    assert sharding.observed({**SEEN, "alltoall_base_": {"bytes": 8, "calls": 1}}, 2) is None
    assert sharding.observed({"_allgather_base_": "garbage"}, 2) is None


def test_the_units_gather_twice_but_the_root_once_and_scatter_every_gradient():
    wire = sharding.expected(unit_params=[10, 20], root_params=5, param_bytes=4)
    assert wire == sharding.Wire(gather_bytes=(2 * 30 + 5) * 4, gather_calls=5, scatter_bytes=35 * 4,
                                 scatter_calls=3)
    # bf16-mixed gathers bf16 and reduce-scatters fp32: as many bytes as DDP's fp32 all-reduce, less the root's
    bf16 = sharding.expected(unit_params=[100] * 4, root_params=0, param_bytes=2)
    assert bf16.allreduce_terms() == (400 * 4, 6)
    fp32 = sharding.expected(unit_params=[100] * 4, root_params=0, param_bytes=4)
    assert fp32.allreduce_terms()[0] == 1.5 * 400 * 4


def test_what_predict_py_expects_of_the_tiny_gpt_is_what_a_real_run_moved():
    """One model, two ways in: the shape's units (src/predict.py --strategy fsdp) against the wire a real 2-rank
    fp32 run of the tiny GPT recorded, byte for byte."""
    from scalelab.workloads.presets import PRESETS

    assert sharding.for_shape(PRESETS["tiny"], param_bytes=4) == sharding.observed(SEEN, 2)
    assert sharding.for_shape(PRESETS["tiny"], param_bytes=2).gather_bytes == 25_929_728 / 2  # bf16 gathers


def test_a_shapes_wire_takes_the_reduce_dtype_it_is_given():
    """for_shape passes reduce_bytes on: a bf16 reduce-scatter (reduce_dtype bf16) scatters half the fp32 bytes."""
    from scalelab.workloads.presets import PRESETS

    fp32, bf16 = (sharding.for_shape(PRESETS["tiny"], param_bytes=2, reduce_bytes=b) for b in (4, 2))
    assert bf16.scatter_bytes == fp32.scatter_bytes / 2 == GRAD / 2 and bf16.gather_bytes == fp32.gather_bytes


def test_a_wire_costs_only_the_collectives_that_moved_bytes_in_calls():
    """cost_terms keeps a collective with both bytes and calls, each with its name and weight (an all-gather or a
    reduce-scatter half an all-reduce): not one counted without calls (8 bytes, 0 calls) or without bytes."""
    wire = sharding.Wire(gather_bytes=8, gather_calls=0, scatter_bytes=0, scatter_calls=2, reduce_bytes=1,
                         reduce_calls=1)
    assert sharding.cost_terms(wire) == [("all_reduce", 1, 1, 1.0)]
    assert sharding.cost_terms(sharding.observed(SEEN, 2)) == [("all_gather", 25_929_728, 9, 0.5),
                                                                ("reduce_scatter", GRAD, 5, 0.5)]
