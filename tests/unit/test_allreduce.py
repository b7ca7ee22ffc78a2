"""The all-reduce benchmark: nccl-tests arithmetic, sizes, interpolation, flag errors, and real gloo runs."""

import argparse
import math
import os

import pytest

from helpers import FAKE_SECRETS, load_results, run_script
from scalelab import results
from scalelab.bench import allreduce, collectives, flags
from scalelab.bench.flags import size_type
from scalelab.errors import UsageError
from scalelab.perfmodel.network import bandwidths, bench_summary, busbw_at, human_bytes, message_sizes, parse_size

KiB, MiB, GiB = 2**10, 2**20, 2**30
HEADERS = ["size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "1 op (us)", "#wrong"]


# --- arithmetic -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, busbw", [(2, 10.0), (4, 15.0), (8, 17.5)])
def test_busbw_is_algbw_times_2_n_minus_1_over_n(n, busbw):
    # 1e9 B in 0.1 s: algbw 10 GB/s; busbw = 10 * 2(n-1)/n = 10, 15, 17.5
    algbw, bus = bandwidths(10**9, 0.1, n)
    assert algbw == pytest.approx(10.0) and bus == pytest.approx(busbw)


def test_one_rank_has_zero_busbw_as_in_nccl_tests():
    assert bandwidths(4 * MiB, 1e-3, 1) == (pytest.approx(4 * MiB / 1e-3 / 1e9), 0.0)


# --- sizes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [("32K", 32 * KiB), ("1M", MiB), ("4G", 4 * GiB), ("64m", 64 * MiB),
                                         ("4GiB", 4 * GiB), ("16KB", 16 * KiB), ("1000", 1000), ("1T", 2**40)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "K", "1.5M", "-1", "4X", "32 K B", "0x10", "0"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="like 32K, 64M or 4G"):
        size_type(text)


def test_sizes_double_from_min_to_max_and_round_to_whole_elements():
    sizes = message_sizes(32 * KiB, 64 * MiB, 2, 4)
    assert len(sizes) == 12 and sizes[0] == (32 * KiB, 8192) and sizes[-1] == (64 * MiB, 16 * MiB)
    # 1 and 2 bytes of float32 are both one element: measured once, as the 4 bytes that move
    assert message_sizes(1, 16, 2, 4) == [(4, 1), (8, 2), (16, 4)]
    assert message_sizes(1 * KiB, 100 * KiB, 10, 2) == [(KiB, 512), (10 * KiB, 5 * KiB), (100 * KiB, 50 * KiB)]
    assert [human_bytes(b) for b in (100, 1536, 32 * KiB, MiB, 4 * GiB)] == ["100 B", "1.5 KiB", "32 KiB", "1 MiB",
                                                                               "4 GiB"]


# --- interpolation and summary ----------------------------------------------------------------------


ROWS = [{"bytes": b, "busbw_GBps": bw} for b, bw in ((4 * KiB, 4.0), (1 * KiB, 1.0), (16 * KiB, 8.0))]  # unsorted


def test_busbw_at_is_log_log_linear_between_neighbours():
    assert busbw_at(ROWS, 2 * KiB) == pytest.approx(2.0)  # halfway in log bytes, geometric mean of 1 and 4
    assert busbw_at(ROWS, 8 * KiB) == pytest.approx((4.0 * 8.0) ** 0.5)
    assert busbw_at(ROWS, 4 * KiB) == pytest.approx(4.0)  # a measured size gives its measurement
    w = math.log(3) / math.log(4)  # 3 KiB lies this far from 1 KiB to 4 KiB on a log axis
    assert busbw_at(ROWS, 3 * KiB) == pytest.approx(1.0 * 4.0 ** w)


def test_busbw_at_clamps_outside_the_measured_sizes():
    assert busbw_at(ROWS, 1) == 1.0 and busbw_at(ROWS, 0) == 1.0
    assert busbw_at(ROWS, 10 * GiB) == 8.0


def test_busbw_at_with_zero_busbw_and_bad_input():
    zeros = [{"bytes": KiB, "busbw_GBps": 0.0}, {"bytes": 4 * KiB, "busbw_GBps": 0.0}]
    assert busbw_at(zeros, 2 * KiB) == 0.0  # one rank: no bus, no log
    assert busbw_at([{"bytes": KiB, "busbw_GBps": 0.0}, {"bytes": 4 * KiB, "busbw_GBps": 2.0}], 2 * KiB) == (
        pytest.approx(1.0))  # linear against log(bytes) where a log is undefined
    with pytest.raises(ValueError):
        busbw_at([], KiB)
    with pytest.raises(ValueError):
        busbw_at(ROWS, -1)


def test_summary_averages_sizes_from_1_MiB_and_quotes_the_plateau():
    """avg: sizes >= 1 MiB (all when none is); the quoted busbw: the median of the 3 largest sizes, not of every
    size from 1 MiB (here 2.0 and 3.0 would be 1 MiB's and 2 MiB's climb: the plateau is 3.0, 4.0, 5.0)."""
    rows = [{"bytes": b, "busbw_GBps": bw}
            for b, bw in ((KiB, 9.0), (MiB, 1.0), (2 * MiB, 2.0), (4 * MiB, 5.0), (8 * MiB, 3.0), (16 * MiB, 4.0))]
    s = bench_summary(rows)
    assert s == {"avg_busbw_GBps": pytest.approx(3.0), "peak_busbw_GBps": 9.0, "large_msg_busbw_GBps": 4.0}
    small = bench_summary(rows[:1] + [{"bytes": 2 * KiB, "busbw_GBps": 5.0}])
    assert small == {"avg_busbw_GBps": 7.0, "peak_busbw_GBps": 9.0, "large_msg_busbw_GBps": 7.0}


# --- flag errors: one line, exit 2, before any process group ----------------------------------------


@pytest.fixture
def no_process_group(monkeypatch):
    import torch.distributed as dist

    def forbidden(*a, **k):
        raise AssertionError("a process group started despite bad input")

    monkeypatch.setattr(dist, "init_process_group", forbidden)
    monkeypatch.setattr(allreduce, "spawn_local", forbidden)


@pytest.mark.parametrize("argv, message", [
    (["--min_bytes", "1M", "--max_bytes", "32K"], "--min_bytes 1 MiB is larger than --max_bytes 32 KiB"),
    (["--min_bytes", "128M"], "larger than --max_bytes 64 MiB"),  # the CPU default maximum
    (["--num_nodes", "2"], "--num_nodes 2 needs a launcher"),
    (["--devices", "2", "--factor", "1"], "argument --factor: expected an integer from 2 to 1,024"),
    (["--max_bytes", "1.5G"], "argument --max_bytes: expected a size in bytes like 32K"),
    (["--dtype", "int8"], "argument --dtype: invalid choice"),
    (["--iters", "0"], "argument --iters: expected an integer from 1 to 1,000,000"),
])
def test_bad_flags_fail_before_anything_starts(argv, message, tmp_path, no_process_group):
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        allreduce.main([*argv, "--accelerator", "cpu", "--output_dir", str(out)])
    assert not out.exists()


def test_bad_flag_from_the_command_line_is_one_line_and_exit_2(tmp_path):
    proc = run_script("allreduce_bench.py", "--max_bytes", "lots", "--output_dir", tmp_path / "out")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["allreduce_bench.py: error: argument --max_bytes: expected a size in bytes "
                                        "like 32K, 64M or 4G (1K = 1024), at most 64G (a buffer of this size is "
                                        "made), got 'lots'"]
    assert not (tmp_path / "out").exists()


# --- real runs --------------------------------------------------------------------------------------


def _table_rows(stdout):
    lines = stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["size", "count"])
    assert all(h in lines[head] for h in HEADERS)
    return [line.split() for line in lines[head + 2:] if line and not line.startswith("Avg")
            and not line.startswith("->")]


def test_one_process_in_this_process(tmp_path, capsys):
    """World size 1: a real gloo group of one, busbw 0 by the nccl-tests definition; the caller's cores are given
    back (the rank pins itself to one core while it measures)."""
    before, omp = os.sched_getaffinity(0), os.environ.get("OMP_NUM_THREADS")
    assert allreduce.main(["--accelerator", "cpu", "--max_bytes", "64K", "--iters", "1", "--warmup_iters", "0",
                           "--output_dir", str(tmp_path)]) == 0
    (r,) = load_results(tmp_path)
    assert r["status"] == "completed" and r["launch"]["world_size"] == 1 and r["launch"]["launcher"] == "local"
    assert r["launch"]["backend"] == "gloo"  # the benchmark starts a process group even for one rank
    assert [row["busbw_GBps"] for row in r["rows"]] == [0.0, 0.0] and all(row["algbw_GBps"] > 0 for row in r["rows"])
    assert "Avg bus bandwidth: 0.000 GB/s (all sizes)" in capsys.readouterr().out
    assert os.sched_getaffinity(0) == before  # and nothing leaks to what the caller starts later (`nproc` reads
    assert os.environ.get("OMP_NUM_THREADS") == omp and "SCALELAB_NODE_CORES" not in os.environ  # OMP_NUM_THREADS)


@pytest.mark.slow
def test_two_local_processes_measure_check_and_write(tmp_path):
    proc = run_script("allreduce_bench.py", "--devices", 2, "--max_bytes", "1M", "--iters", 3, "--run_name", "t",
                      "--output_dir", tmp_path, timeout=120, env=FAKE_SECRETS)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("scalelab all-reduce: world size 2 = 1 node(s) x 2 process(es), backend gloo")
    table = _table_rows(proc.stdout)
    assert [row[0] + row[1] for row in table] == ["32KiB", "64KiB", "128KiB", "256KiB", "512KiB", "1MiB"]
    assert all(row[-1] == "0" and row[3] == "float32" for row in table)
    assert "Avg bus bandwidth: " in proc.stdout and "GB/s (sizes >= 1 MiB)" in proc.stdout

    (path,) = list(tmp_path.rglob("result.json"))
    assert proc.stdout.rstrip().endswith(f"-> {path}")
    r = results.load(str(path))
    assert r["kind"] == "allreduce" and r["status"] == "completed" and r["error"] is None
    launch = r["launch"]
    assert (launch["world_size"], launch["num_nodes"], launch["devices"]) == (2, 1, 2)
    assert (launch["launcher"], launch["accelerator"], launch["backend"]) == ("local", "cpu", "gloo")
    assert [row["bytes"] for row in r["rows"]] == [32 * KiB * 2**k for k in range(6)]
    for row in r["rows"]:
        assert row["wrong"] == 0 and row["count"] == row["bytes"] // 4 and row["time_s"] > 0 and row["single_op_s"] > 0
        assert row["busbw_GBps"] > 0 and row["busbw_GBps"] == pytest.approx(row["algbw_GBps"])  # 2(n-1)/n = 1
    plateau = sorted(row["busbw_GBps"] for row in r["rows"][-3:])[1]  # the median of the 3 largest sizes
    assert r["summary"]["large_msg_busbw_GBps"] == plateau
    assert r["config"]["iters"] == 3 and r["config"]["warmup_iters"] == 5 and "-t-allreduce-2x-" in r["run_id"]
    assert r["environment"]["WORLD_SIZE"] == "2"  # captured on a rank, not in the parent
    text = path.read_text()
    assert not [name for name, value in FAKE_SECRETS.items() if value in text or name in text]  # never a secret


@pytest.mark.slow
def test_a_wrong_contribution_fails_the_check(tmp_path):
    """One rank adds 1 to one element it contributes: each rank sees 1 wrong value per size, 2 in all.

    bfloat16 on purpose: every other element must still be exact, or the counts would be larger.
    """
    proc = run_script("allreduce_bench.py", "--devices", 2, "--max_bytes", "64K", "--iters", 1, "--warmup_iters", 0,
                      "--dtype", "bfloat16", "--inject_wrong", "--output_dir", tmp_path, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["allreduce_bench.py: error: all-reduce returned 2 wrong values at size 32 KiB"
                                        " (and at 1 more size(s))"]
    assert [row[-1] for row in _table_rows(proc.stdout)] == ["2", "2"]
    (r,) = load_results(tmp_path)
    assert r["status"] == "failed" and r["error"].startswith("all-reduce returned 2 wrong values at size 32 KiB")
    assert [row["wrong"] for row in r["rows"]] == [2, 2] and r["rows"][0]["dtype"] == "bfloat16"


def test_the_table_prints_each_size_in_microseconds_and_gb_per_s_right_aligned():
    from scalelab.bench import table

    rows = [{"bytes": 32768, "count": 8192, "dtype": "float32", "time_s": 0.000123456, "algbw_GBps": 0.26542,
             "busbw_GBps": 0.13271, "single_op_s": 0.0002, "wrong": 0},
            {"bytes": 2097152, "count": 524288, "dtype": "float32", "time_s": 0.1, "algbw_GBps": 0.19973,
             "busbw_GBps": 0.099865, "single_op_s": 0.2, "wrong": None}]
    # tabulate's simple layout: each column as wide as its widest cell or its header + 2, two spaces between
    assert table.table(rows).splitlines() == [
        "  size    count     type    time (us)    algbw (GB/s)    busbw (GB/s)    1 op (us)    #wrong",
        "------  -------  -------  -----------  --------------  --------------  -----------  --------",
        "32 KiB     8192  float32        123.5           0.265           0.133        200.0         0",
        " 2 MiB   524288  float32     100000.0           0.200           0.100     200000.0       n/a"]
    assert table.avg_line(rows) == "Avg bus bandwidth: 0.100 GB/s (sizes >= 1 MiB)"  # the 2 MiB row alone
    assert table.avg_line(rows[:1]) == "Avg bus bandwidth: 0.133 GB/s (all sizes)"
    assert table.avg_line([{"bytes": 1 << 20, "busbw_GBps": 0.5}]) == "Avg bus bandwidth: 0.500 GB/s (sizes >= 1 MiB)"


def _bench(rows=(), **args):
    """A Bench as its output methods see it, without a process group."""
    from types import SimpleNamespace

    from scalelab.launch.cluster import Launch

    bench = allreduce.Bench.__new__(allreduce.Bench)
    bench.args = SimpleNamespace(**{"dtype": "float32", "min_bytes": 32768, "max_bytes": 1 << 26, "factor": 2,
                                    "iters": 20, "warmup_iters": 5, "check": True, **args})
    bench.launch = Launch("slurm", 4, 2, "gpu")  # 4 processes on each of 2 nodes
    bench.world, bench.device_names, bench.rows, bench.ranks, bench.run_id = 8, ["A100", "H100"], list(rows), [], "rid"
    bench.hosts = []
    bench.coll = collectives.COLLECTIVES[bench.args.__dict__.get("collective", "all_reduce")]  # as __init__ sets it
    return bench


def test_wrong_values_are_named_by_their_first_size():
    assert _bench([{"bytes": 1024, "wrong": 0}, {"bytes": 2048, "wrong": None}]).correctness_error() is None
    assert _bench([{"bytes": 1024, "wrong": 0}, {"bytes": 1 << 20, "wrong": 3}]).correctness_error() == (
        "all-reduce returned 3 wrong values at size 1 MiB")
    assert _bench([{"bytes": 1024, "wrong": 0, "oop_wrong": 2}, {"bytes": 2048, "wrong": 1},
                   {"bytes": 4096, "wrong": 5}]).correctness_error() == (
        "all-reduce returned 2 wrong values at size 1 KiB (and at 2 more size(s))")
    assert _bench([{"bytes": 2048, "wrong": 1}, {"bytes": 4096, "wrong": 5}]).correctness_error() == (
        "all-reduce returned 1 wrong values at size 2 KiB (and at 1 more size(s))")


def test_the_banner_says_the_world_the_sizes_and_the_check():
    assert _bench().banner() == (
        "scalelab all-reduce: world size 8 = 2 node(s) x 4 process(es), backend nccl, device A100, H100 | float32, "
        "32 KiB to 64 MiB x2, 20 timed + 5 warm-up all-reduces per size, check on | launcher: slurm")
    assert _bench(check=False, dtype="bfloat16").banner().endswith("| bfloat16, 32 KiB to 64 MiB x2, 20 timed + 5 "
                                                                    "warm-up all-reduces per size, check off | "
                                                                    "launcher: slurm")
    header = _bench().nccl_tests_header().splitlines()
    assert header[0] == f"# {_bench().banner()}" and header[1] == "# Collective test starting: allreduce_bench.py"
    assert header[2] == "# scalelab run_id: rid accelerator: gpu backend: nccl"
    assert header[3].startswith("# nThread 1 nGpus 1 minBytes 32768 maxBytes 67108864 step: 2(factor) warmup iters: "
                                "5 iters: 20 agg iters: 1 validation: 1")


def _flags(**given):
    """The parsed flags resolve() sees, the size and count defaults still unset."""
    from types import SimpleNamespace

    return SimpleNamespace(**{"max_bytes": None, "iters": None, "warmup_iters": None, "min_bytes": 32768,
                              "oversubscribe": False, **given})


def test_flags_get_the_accelerators_defaults_and_sizes_must_be_in_order():
    from scalelab.launch.cluster import Launch

    args = _flags
    got = flags.resolve(args(), Launch("torchrun", 1, 1, "cpu"))
    assert (got.max_bytes, got.iters, got.warmup_iters) == (64 << 20, 20, 5)
    gpu = flags.resolve(args(iters=3), Launch("slurm", 4, 1, "gpu"))
    assert (gpu.max_bytes, gpu.iters, gpu.warmup_iters) == (4 << 30, 3, 5)
    with pytest.raises(UsageError) as err:
        flags.resolve(args(min_bytes=1 << 20, max_bytes=1024), Launch("torchrun", 1, 1, "cpu"))
    assert str(err.value) == "--min_bytes 1 MiB is larger than --max_bytes 1 KiB"
    assert flags.resolve(args(min_bytes=1024, max_bytes=1024), Launch("torchrun", 1, 1, "cpu")).max_bytes == 1024


def test_local_cpu_ranks_must_each_have_a_core_before_they_start(monkeypatch):
    """A local launch checks its ranks against the node's cores up front (here 1 core: 2 ranks would share it);
    --oversubscribe lets them share. torchrun's ranks are already running: each checks its own fit in run()."""
    from scalelab.launch.cluster import Launch

    monkeypatch.setenv("SCALELAB_NODE_CORES", "0")
    with pytest.raises(UsageError) as err:
        flags.resolve(_flags(), Launch("local", 2, 1, "cpu"))
    assert str(err.value).startswith("2 device(s) x 1 core(s) need 2 cores but this node has 1 (cores 0): ranks "
                                     "would share cores")
    assert flags.resolve(_flags(oversubscribe=True), Launch("local", 2, 1, "cpu")).max_bytes == 64 << 20
    assert flags.resolve(_flags(), Launch("local", 1, 1, "cpu")).max_bytes == 64 << 20
    assert flags.resolve(_flags(), Launch("torchrun", 2, 1, "cpu")).max_bytes == 64 << 20


def test_local_gpu_ranks_need_as_many_gpus(monkeypatch):
    import torch

    from scalelab.launch.cluster import Launch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert flags.resolve(_flags(), Launch("local", 2, 1, "gpu")).max_bytes == 4 << 30
    with pytest.raises(UsageError) as err:
        flags.resolve(_flags(), Launch("local", 3, 1, "gpu"))
    assert str(err.value) == "--devices 3 but this machine has 2 GPU(s)"
    assert flags.resolve(_flags(), Launch("slurm", 3, 1, "gpu")).max_bytes == 4 << 30  # srun gave each its own


def test_the_result_file_holds_the_flags_rows_summary_and_where_it_ran(tmp_path, monkeypatch):
    """What the report and a reader of result.json see: the error, the run's name, every flag (False and None
    too) but not the hidden test hook unless it was used, the summary of the rows, SLURM and the environment."""
    import json
    import platform

    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    rows = [{"bytes": MiB, "time_s": 1e-3, "busbw_GBps": 2.0, "wrong": 3},
            {"bytes": 2 * MiB, "time_s": 1e-3, "busbw_GBps": 4.0, "wrong": 0}]
    bench = _bench(rows, check=False, run_name="sweep-a", inject_wrong=False, output_dir=str(tmp_path))
    bench.hosts = ["n1", "n2"]
    with open(bench.write("failed", "all-reduce returned 3 wrong values at size 1 MiB")) as fh:
        r = json.load(fh)
    assert (r["kind"], r["status"], r["run_name"]) == ("allreduce", "failed", "sweep-a")
    assert r["error"] == "all-reduce returned 3 wrong values at size 1 MiB"
    assert r["config"] == {"dtype": "float32", "min_bytes": 32768, "max_bytes": 1 << 26, "factor": 2, "iters": 20,
                           "warmup_iters": 5, "check": False, "run_name": "sweep-a", "output_dir": str(tmp_path),
                           "collective": "all_reduce"}  # a Bench of flags without --collective measured all-reduces
    assert r["rows"] == rows and r["launch"]["hostnames"] == ["n1", "n2"] and r["launch"]["world_size"] == 8
    # avg over the sizes >= 1 MiB: (2 + 4) / 2; peak 4; the plateau: the median of the (two) largest sizes
    assert r["summary"] == {"avg_busbw_GBps": 3.0, "peak_busbw_GBps": 4.0, "large_msg_busbw_GBps": 3.0}
    assert r["slurm"]["job_id"] == "4242" and r["versions"]["python"] == platform.python_version()
    assert r["environment"]["NCCL_DEBUG"] == "INFO" and r["environment"]["SLURM_JOB_ID"] == "4242"
    hooked = _bench(rows, inject_wrong=True, output_dir=str(tmp_path), run_name=None)
    with open(hooked.write("completed", None)) as fh:
        r = json.load(fh)
    assert r["config"]["inject_wrong"] is True and r["config"]["run_name"] is None and r["error"] is None


def test_another_collective_is_named_in_the_banner_header_errors_and_result(tmp_path):
    """--collective all_gather: the banner and errors say all-gather; the nccl-tests header names all_gather_perf
    (so no reader takes the log for an all-reduce's); the result records the collective."""
    import json

    gather = _bench([{"bytes": 2048, "time_s": 1e-3, "busbw_GBps": 1.0, "wrong": 4}], collective="all_gather",
                    output_dir=str(tmp_path), run_name=None)
    assert gather.banner().startswith("scalelab all-gather: world size 8 = 2 node(s) x 4 process(es)")
    assert "20 timed + 5 warm-up all-gathers per size" in gather.banner()
    assert gather.correctness_error() == "all-gather returned 4 wrong values at size 2 KiB"
    header = gather.nccl_tests_header().splitlines()
    assert header[1] == "# Collective test starting: all_gather_perf"
    scatter = _bench(collective="reduce_scatter")
    assert scatter.what() == "reduce-scatter" and scatter.program() == "reduce_scatter_perf"
    assert _bench().program() == "allreduce_bench.py" and _bench(collective="all_reduce").what() == "all-reduce"
    with open(gather.write("failed", gather.correctness_error())) as fh:
        assert json.load(fh)["config"]["collective"] == "all_gather"


def test_sigterm_in_the_benchmark_raises_what_its_record_names():
    import signal

    from scalelab.bench import allreduce
    from scalelab.train.guard.signals import Terminated

    with pytest.raises(Terminated) as err:
        allreduce._terminated(signal.SIGTERM, None)
    assert err.value.name == "SIGTERM"
