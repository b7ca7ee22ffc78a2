"""A run's fingerprint (scalelab/fingerprint.py): one per run from its ranks, and what two runs did differently."""

import pytest

from scalelab import fingerprint, record

BF16 = {"step": 4, "matmul_dtypes": ["bfloat16"], "attention": ["_scaled_dot_product_flash_attention_for_cpu"],
        "param_dtypes": ["float32"], "grad_dtypes": ["float32"], "optimizer": "fused", "compiled_graphs": 0,
        "wire": {}}


def test_the_run_keeps_rank_0s_fingerprint_and_says_whether_every_rank_saw_the_same():
    other = {**BF16, "wire": {"allreduce_": {"dtype": "float32", "bytes": 8, "calls": 1}}, "step": 9}
    run = fingerprint.of_run([{"fingerprint": BF16}, {"fingerprint": other}])
    assert record.plain(run) == {**BF16, "same_on_ranks": True}  # wire and step are no part of the job
    run = fingerprint.of_run([{"fingerprint": BF16}, {"fingerprint": {**BF16, "matmul_dtypes": ["float32"]}}])
    assert run.same_on_ranks is False and run.matmul_dtypes == ["bfloat16"]
    assert fingerprint.of_run([{"fingerprint": BF16}, {"fingerprint": None}]).same_on_ranks is False
    assert fingerprint.of_run([{"fingerprint": None}, {"fingerprint": BF16}]) is None
    assert fingerprint.of_run([{}]) is None and fingerprint.of_run([]) is None
    assert record.plain(fingerprint.of_run([{"fingerprint": BF16}])) == {**BF16, "same_on_ranks": True}  # itself
    with pytest.raises(TypeError, match="made_up"):  # observed but not declared: fails where the block is built
        fingerprint.of_run([{"fingerprint": {**BF16, "made_up": 1}}])


def test_differences_name_each_field_in_words_against_the_baseline():
    fp32 = {**BF16, "matmul_dtypes": ["float32"], "optimizer": "for-loop"}
    assert fingerprint.differences(fp32, BF16) == ["matmuls bfloat16, baseline float32",
                                                   "optimizer fused, baseline for-loop"]
    assert fingerprint.differences(BF16, {**BF16, "step": 1, "wire": {"x": 1}}) == []


def test_compile_is_compared_as_on_or_off_whatever_the_graph_count():
    # DDP's optimizer splits a compiled graph at its buckets: 1 graph at one device, several at N is one job
    assert fingerprint.differences({**BF16, "compiled_graphs": 1}, {**BF16, "compiled_graphs": 6}) == []
    assert fingerprint.differences(BF16, {**BF16, "compiled_graphs": 2}) == ["torch.compile on, baseline off"]
    assert fingerprint.differences(BF16, {**BF16, "compiled_graphs": None}) == ["torch.compile unknown, baseline off"]


def test_compiled_is_what_the_steps_after_warm_up_ran_not_the_graphs_dynamo_made():
    """A graph made in warm-up says nothing of the timed steps: Dynamo may fall back to eager after it."""
    ran = {**BF16, "compiled_graphs": 3, "compiled_steps": 12, "steps_after_warmup": 12}
    eager = {**ran, "compiled_steps": 0}
    partly = {**ran, "compiled_steps": 9}
    assert fingerprint.ran_compiled(ran) is True and fingerprint.ran_compiled(eager) is False
    assert fingerprint.ran_compiled(partly) == "9 of 12 steps"
    assert fingerprint.differences(ran, eager) == ["torch.compile off, baseline on"]
    assert fingerprint.differences(ran, partly) == ["torch.compile 9 of 12 steps, baseline on"]
    assert fingerprint.differences(ran, {**ran, "compiled_graphs": 1, "steps_after_warmup": 30,
                                         "compiled_steps": 30}) == []  # another length, the same job
    # a run that ended in its warm-up counted no step: the graph count is all there is
    assert fingerprint.ran_compiled({**ran, "steps_after_warmup": 0, "compiled_steps": 0}) is True


def test_a_run_that_asked_compile_and_ran_eager_is_named_against_its_own_flags():
    ran = {**BF16, "compiled_graphs": 3, "compiled_steps": 12, "steps_after_warmup": 12}
    assert fingerprint.asked_differences(ran, True) == []
    assert fingerprint.asked_differences({**ran, "compiled_steps": 0}, True) == [
        "torch.compile asked, 12 of 12 steps after warm-up ran eager"]
    assert fingerprint.asked_differences({**ran, "compiled_steps": 10}, True) == [
        "torch.compile asked, 2 of 12 steps after warm-up ran eager"]
    assert fingerprint.asked_differences(BF16, True) == ["torch.compile asked, no graph compiled"]  # older record
    assert fingerprint.asked_differences({**ran, "compiled_steps": 0}, False) == []  # not asked: nothing to hold
    assert fingerprint.asked_differences(None, True) == [] and fingerprint.asked_differences({}, True) == []


def test_nothing_is_said_where_either_run_recorded_no_fingerprint():
    assert fingerprint.differences(None, BF16) == [] and fingerprint.differences(BF16, None) == []
    assert fingerprint.differences(BF16, "garbage") == [] and fingerprint.comparable(None) is None
    assert fingerprint.differences(BF16, {**BF16, "attention": []}) == ["attention none, baseline "
                                                                        "_scaled_dot_product_flash_attention_for_cpu"]


def test_several_dtypes_of_one_field_are_joined_and_compared_as_a_whole():
    mixed = {**BF16, "matmul_dtypes": ["bfloat16", "float32"]}  # a head left in fp32, say
    assert fingerprint.differences(BF16, mixed) == ["matmuls bfloat16+float32, baseline bfloat16"]
    assert fingerprint.comparable(mixed)["matmul_dtypes"] == ["bfloat16", "float32"]
    assert fingerprint.comparable({}) == {"matmul_dtypes": None, "attention": None, "param_dtypes": None,
                                          "grad_dtypes": None, "optimizer": None, "compiled": None}


def test_a_run_that_asked_compile_and_ran_eager_says_so_as_it_ends(capsys):
    from types import SimpleNamespace

    from scalelab.train import say

    eager = {**BF16, "compiled_graphs": 1, "compiled_steps": 0, "steps_after_warmup": 12}
    ctx = SimpleNamespace(cfg=SimpleNamespace(compile=True, max_steps=20, max_epochs=None), resumed_from=None)
    payload = {"timing": record.Timing(whole_run_s=30.0, steps=20),  # as build_payload makes it: the blocks built
               "fingerprint": fingerprint.of_run([{"fingerprint": eager}])}
    say.done(ctx, payload, "out/r/result.json", [{}])
    assert capsys.readouterr().out.splitlines()[1] == (
        "scalelab: ! torch.compile asked, 12 of 12 steps after warm-up ran eager (Dynamo fell back): these are not "
        "a compiled step's times, and the report gives the run no speedup")
    compiled = fingerprint.of_run([{"fingerprint": {**eager, "compiled_steps": 12}}])
    say.done(ctx, {**payload, "fingerprint": compiled}, "out/r/result.json", [{}])
    assert len(capsys.readouterr().out.splitlines()) == 1  # it ran compiled: the summary line alone
