"""All-gather and reduce-scatter beside the all-reduce: nccl-tests' bus factors and sizes, the correctness checks
(by hand, then on two real gloo processes), the flag end to end, and the report keeping them out of DDP's
all-reduce prediction."""

import functools
import re

import pytest
import torch

from helpers import ROOT, load_results, run_script, two_gloo_ranks
from scalelab import results
from scalelab.bench import collectives, nccl_tests
from scalelab.bench.collectives import ALL_GATHER, ALL_REDUCE, COLLECTIVES, REDUCE_SCATTER, collective_of
from scalelab.errors import ResultError
from scalelab.perfmodel.network import bandwidths, bus_factor, message_sizes
from scalelab.record import blocks

KiB = 2**10


# --- arithmetic -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, all_reduce, one_pass", [(1, 0.0, 0.0), (2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875)])
def test_bus_factors_are_nccl_tests(n, all_reduce, one_pass):
    # PERFORMANCE.md: all-reduce 2(n-1)/n; all-gather and reduce-scatter (n-1)/n
    assert bus_factor(n) == all_reduce and ALL_REDUCE.bus_factor(n) == all_reduce
    assert bus_factor(n, "all_gather") == one_pass and ALL_GATHER.bus_factor(n) == one_pass
    assert bus_factor(n, "reduce_scatter") == one_pass and REDUCE_SCATTER.bus_factor(n) == one_pass


def test_busbw_is_algbw_times_the_collectives_factor():
    # 1e9 B in 0.1 s: algbw 10 GB/s; at n = 4 busbw 10 * 3/4 (all-gather), 10 * 6/4 (all-reduce)
    assert bandwidths(10**9, 0.1, 4, "all_gather") == (pytest.approx(10.0), pytest.approx(7.5))
    assert bandwidths(10**9, 0.1, 4, "reduce_scatter")[1] == pytest.approx(7.5)
    assert bandwidths(10**9, 0.1, 4)[1] == pytest.approx(15.0)
    with pytest.raises(ValueError):
        bus_factor(0, "all_gather")


def test_names_are_nccl_tests():
    assert list(COLLECTIVES) == ["all_reduce", "all_gather", "reduce_scatter"]
    assert [(c.perf, c.redop, c.split) for c in COLLECTIVES.values()] == [
        ("all_reduce_perf", "sum", False), ("all_gather_perf", "none", True), ("reduce_scatter_perf", "sum", True)]


def test_a_split_size_is_n_whole_parts_and_count_is_one_ranks_part():
    # 2 ranks of float32: 32 KiB = 2 parts of 4096 elements
    assert ALL_GATHER.sizes(32 * KiB, 128 * KiB, 2, 4, 2) == [(32 * KiB, 4096), (64 * KiB, 8192), (128 * KiB, 16384)]
    # 3 ranks: 32768 // 12 = 2730 elements a part, 2730 * 3 * 4 = 32760 bytes move
    assert REDUCE_SCATTER.sizes(32 * KiB, 32 * KiB, 2, 4, 3) == [(32760, 2730)]
    # at least one element a part; 1, 2, 4, 8 bytes all round to one part each: measured once
    assert ALL_GATHER.sizes(1, 16, 2, 4, 2) == [(8, 1), (16, 2)]
    # the all-reduce is one buffer, whatever the world
    assert ALL_REDUCE.sizes(32 * KiB, 128 * KiB, 2, 4, 3) == message_sizes(32 * KiB, 128 * KiB, 2, 4)
    assert ALL_REDUCE.sizes(32 * KiB, 32 * KiB, 2, 4, 3) == [(32 * KiB, 8192)]


def test_buffers_per_rank():
    assert ALL_GATHER.buffer_counts(5, 4) == (5, 20)  # one part in, n parts out
    assert REDUCE_SCATTER.buffer_counts(5, 4) == (20, 5)  # n parts in, one part out
    assert ALL_REDUCE.buffer_counts(5, 4) == (5, 0)  # in place
    assert collectives.gather_offset(3, 5) == 15


def test_results_without_a_collective_are_all_reduces():
    assert collective_of({"kind": "allreduce"}) == "all_reduce"
    assert collective_of({"config": None}) == "all_reduce"
    assert collective_of({"config": {"dtype": "float32"}}) == "all_reduce"
    assert collective_of({"config": {"collective": "all_gather"}}) == "all_gather"


def test_the_declaration_names_the_collectives_this_benchmark_runs():
    """record's config.collective holds a file to these names: one more here and its results would be refused."""
    assert sorted(blocks.COLLECTIVES) == sorted(COLLECTIVES)


def test_a_collective_no_benchmark_runs_skips_its_file_naming_the_field(tmp_path):
    """Before: config.collective was read but not declared; "bogus" or [1, 2] there passed, and the report silently
    took the benchmark for no all-reduce at all."""
    bench = next(r for r in load_results(ROOT / "tests" / "data" / "demo-results") if r["kind"] == "allreduce")
    for value, said in (("bogus", "'bogus'"), ([1, 2], "[1, 2]")):
        bad = dict(bench, config=dict(bench["config"], collective=value))
        with pytest.raises(ResultError, match=rf"^field config.collective: expected one of all_gather, all_reduce, "
                                               rf"reduce_scatter or null, got {re.escape(said)}"):
            results.validate(bad)


# --- the checks, by hand --------------------------------------------------------------------------


def _input(coll, count, world, rank, dtype=torch.float32):
    inp, out = collectives.buffers(coll, count, world, dtype, torch.device("cpu"))
    collectives.fill_pattern(coll, inp, world, rank)
    return inp, out


def test_the_all_gather_pattern_and_its_check():
    # rank r's element i is 1 + (r + i) % 7: rank 0 [1, 2, 3], rank 1 [2, 3, 4]
    assert _input(ALL_GATHER, 3, 2, 0)[0].tolist() == [1, 2, 3]
    inp, out = _input(ALL_GATHER, 3, 2, 1)
    assert inp.tolist() == [2, 3, 4] and out.tolist() == [0] * 6
    right = torch.tensor([1.0, 2, 3, 2, 3, 4])
    assert collectives.check_wrong(ALL_GATHER, inp, right, 2, 1, 3) == 0
    assert collectives.check_wrong(ALL_GATHER, inp, torch.tensor([2.0, 3, 4, 1, 2, 3]), 2, 1, 3) == 6  # parts swapped
    assert collectives.check_wrong(ALL_GATHER, inp, torch.tensor([1.0, 2, 3, 2, 3, 5]), 2, 1, 3) == 1


def test_the_reduce_scatter_pattern_and_its_check():
    # pattern.py at n = 2: element k is owned by rank k % 2, which gives 1 + rank; the sums are [1, 2, 1, 2, 1, 2]
    assert _input(REDUCE_SCATTER, 3, 2, 0)[0].tolist() == [1, 0, 1, 0, 1, 0]
    inp, out = _input(REDUCE_SCATTER, 3, 2, 1)
    assert inp.tolist() == [0, 2, 0, 2, 0, 2] and out.tolist() == [0] * 3
    # rank 0 gets the first part [1, 2, 1], rank 1 the second [2, 1, 2]: an odd count shifts the pattern
    assert collectives.check_wrong(REDUCE_SCATTER, inp, torch.tensor([1.0, 2, 1]), 2, 0, 3) == 0
    assert collectives.check_wrong(REDUCE_SCATTER, inp, torch.tensor([2.0, 1, 2]), 2, 1, 3) == 0
    assert collectives.check_wrong(REDUCE_SCATTER, inp, torch.tensor([1.0, 2, 1]), 2, 1, 3) == 3  # rank 0's part


# --- two real gloo processes --------------------------------------------------------------------------


def _each_collective(rank, out, world=2, dtype=torch.bfloat16):
    """Each collective at `world` ranks, 5 elements a part: (name, planted) -> wrong values on this rank. The last
    rank plants: it adds 1 to its first input element. (5 is no multiple of 3: at 3 ranks each rank's part starts at
    another phase of the pattern.)"""
    got = {}
    for coll in COLLECTIVES.values():
        for planted in (False, True):
            inp, res = collectives.buffers(coll, 5, world, dtype, torch.device("cpu"))
            collectives.fill_pattern(coll, inp, world, rank)
            if planted and rank == world - 1:
                inp[0] += 1
            collectives.call(coll, inp, res)
            got[coll.name, planted] = collectives.check_wrong(coll, inp, res, world, rank, 5)
    out.put((rank, got))


@pytest.mark.slow
def test_each_collective_checks_right_and_catches_a_planted_value_on_gloo():
    """Rank 1 adds 1 to its first input element. All-reduce: both ranks hold the wrong sum (1 + 1); all-gather:
    both hold rank 1's part (1 + 1); reduce-scatter: element 0 is rank 0's part, so rank 0 alone (1 + 0)."""
    got = dict(two_gloo_ranks(_each_collective))
    for name, wrong in (("all_reduce", 2), ("all_gather", 2), ("reduce_scatter", 1)):
        assert got[0][name, False] == got[1][name, False] == 0, name
        assert got[0][name, True] + got[1][name, True] == wrong, name
    assert (got[0]["reduce_scatter", True], got[1]["reduce_scatter", True]) == (1, 0)


@pytest.mark.slow
def test_each_collective_checks_right_and_catches_a_planted_value_at_three_ranks():
    """At 3 ranks a check has more to get right than at 2: rank j's part of an all-gather for every j (not only
    the first two), a reduce-scatter part's phase (rank r's part starts at r·count, here 5 and 10: phases 2 and 1
    of a 3-element pattern, where 2 ranks' odd count gave phase r). A right result is 0 wrong on every rank; rank 2
    adding 1 to its first input element is caught: all-reduce and all-gather on all 3 ranks, reduce-scatter on rank
    0 (element 0 is rank 0's part)."""
    from helpers import gloo_ranks

    got = dict(gloo_ranks(functools.partial(_each_collective, world=3, dtype=torch.float32), 3))
    for name in COLLECTIVES:
        assert [got[r][name, False] for r in range(3)] == [0, 0, 0], (name, got)
    assert [got[r]["all_reduce", True] for r in range(3)] == [1, 1, 1], got
    assert [got[r]["all_gather", True] for r in range(3)] == [1, 1, 1], got  # rank 2's part, in every output
    assert [got[r]["reduce_scatter", True] for r in range(3)] == [1, 0, 0], got


@pytest.mark.slow
def test_all_gather_end_to_end(tmp_path):
    proc = run_script("allreduce_bench.py", "--devices", 2, "--collective", "all_gather", "--max_bytes", "64K",
                      "--iters", 2, "--warmup_iters", 1, "--output_dir", tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("scalelab all-gather: world size 2 = 1 node(s) x 2 process(es), backend gloo")
    assert "2 timed + 1 warm-up all-gathers per size" in proc.stdout
    (r,) = load_results(tmp_path)
    assert r["kind"] == "allreduce" and r["status"] == "completed" and r["config"]["collective"] == "all_gather"
    assert "-allgather-2x-" in r["run_id"]
    # 32 KiB gathered from 2 ranks: 4096 float32 each
    assert [(row["bytes"], row["count"], row["wrong"]) for row in r["rows"]] == [(32 * KiB, 4096, 0),
                                                                                  (64 * KiB, 8192, 0)]
    for row in r["rows"]:
        assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] / 2)  # (n-1)/n at n = 2


@pytest.mark.slow
def test_a_wrong_reduce_scatter_fails_in_nccl_tests_format_and_is_no_all_reduce_log(tmp_path):
    """The planted value lands in rank 0's part only: 1 wrong value a size. The log names reduce_scatter_perf,
    which the nccl-tests reader refuses as an all-reduce."""
    proc = run_script("allreduce_bench.py", "--devices", 2, "--collective", "reduce_scatter", "--max_bytes", "64K",
                      "--iters", 1, "--warmup_iters", 0, "--format", "nccl-tests", "--inject_wrong",
                      "--output_dir", tmp_path, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["allreduce_bench.py: error: reduce-scatter returned 1 wrong values at size "
                                        "32 KiB (and at 1 more size(s))"]
    assert "# Collective test starting: reduce_scatter_perf" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line and not line.startswith("#")]
    assert [(int(w[0]), int(w[1]), w[3], w[-1]) for w in rows] == [(32 * KiB, 4096, "sum", "1"),
                                                                   (64 * KiB, 8192, "sum", "1")]
    (r,) = load_results(tmp_path)
    assert r["config"]["collective"] == "reduce_scatter" and [row["wrong"] for row in r["rows"]] == [1, 1]
    log = tmp_path / "rs.log"
    log.write_text(proc.stdout)
    with pytest.raises(nccl_tests.NcclTestsError, match="reduce_scatter_perf's output, not all_reduce_perf's"):
        nccl_tests.load(str(log))


# --- the report ---------------------------------------------------------------------------------------


def _bench_result(run_id, collective=None, busbw=2.0):
    config = {"dtype": "float32", **({"collective": collective} if collective else {})}
    return {"kind": "allreduce", "run_id": run_id, "status": "completed", "created": run_id, "config": config,
            "launch": {"world_size": 2, "num_nodes": 1, "accelerator": "cpu", "backend": "gloo",
                       "device_names": ["cpu"]},
            "rows": [{"bytes": KiB, "busbw_GBps": busbw, "time_s": 1e-3, "single_op_s": 1e-3}],
            "summary": {"large_msg_busbw_GBps": busbw}}


def test_the_report_predicts_ddp_from_all_reduces_only():
    """An old result (no collective) and a new all_reduce one feed the prediction; a newer all-gather does not."""
    from scalelab import selfcheck
    from scalelab.report import explain

    found = [_bench_result("1-old"), _bench_result("2-ar", "all_reduce", 3.0), _bench_result("3-ag", "all_gather")]
    assert sorted(explain.bench_frame(found)["run_id"]) == ["1-old", "2-ar"]
    assert explain.bench_frame(found[2:]).empty
    first = [_bench_result("0-ag", "all_gather"), *found]  # an all-gather listed first is skipped, not the end
    assert sorted(explain.bench_frame(first)["run_id"]) == ["1-old", "2-ar"]
    assert selfcheck.newest(found, "allreduce")["run_id"] == "2-ar"  # not the newer all-gather
    assert selfcheck.newest(found[2:], "allreduce") is None


def test_the_all_gather_pattern_repeats_every_7_elements():
    assert _input(ALL_GATHER, 9, 2, 0)[0].tolist() == [1, 2, 3, 4, 5, 6, 7, 1, 2]
    assert _input(ALL_GATHER, 9, 3, 2)[0].tolist() == [3, 4, 5, 6, 7, 1, 2, 3, 4]


def test_an_nccl_tests_log_of_another_collective_is_refused_before_its_rows():
    """all_gather_perf's rows (here with the out-of-place columns blank, as scalelab's own log prints them) are
    not all_reduce_perf's: the reader names the program, not a malformed row."""
    from scalelab.bench import nccl_format

    row = {"bytes": 32 * KiB, "count": 4096, "dtype": "float32", "time_s": 1e-4, "algbw_GBps": 0.33,
           "busbw_GBps": 0.16, "wrong": 0}
    assert nccl_format.row_line(row, "none").split()[3] == "none"
    assert nccl_format.row_line(row).split()[3] == "sum"
    params = {"min_bytes": 32 * KiB, "max_bytes": 32 * KiB, "factor": 2, "warmup_iters": 1, "iters": 1, "check": 1}
    for program in ("all_gather_perf", "reduce_scatter_perf"):
        text = "\n".join([nccl_format.header([], params, program), nccl_format.row_line(row, "none"),
                          nccl_format.footer([row], program)])
        with pytest.raises(nccl_tests.NcclTestsError, match=f"^{program}'s output, not all_reduce_perf's"):
            nccl_tests.parse(text)
