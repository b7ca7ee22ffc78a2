"""nccl-tests interoperability: all_reduce_perf logs of two layouts read as benchmark results, the report's
predicted columns fed by them, our benchmark's nccl-tests-shaped output read back, and bad logs skipped."""

import os

import pytest

from helpers import ROOT, _with_comm, make_result, run_script
from scalelab import files, results
from scalelab.bench import allreduce, nccl_format, nccl_tests
from scalelab.bench.nccl_tests import NcclTestsError
from scalelab.perfmodel.network import bandwidths, plateau_busbw
from scalelab.report import bench_plot, cli, explain, export

MiB = 2**20
A100 = "NVIDIA A100-SXM4-80GB"

DATA = ROOT / "tests" / "data"
# The layout nccl-tests 2.13 and later print (a root column, #wrong counts, `Group` in the rank lines), here from
# mpirun over 2 nodes x 4 GPUs, with NCCL's INFO lines mixed in as NCCL_DEBUG=INFO leaves them, trailing spaces
# and all. Numbers made up, consistent: busbw = algbw x 2(8-1)/8.
NEW = (DATA / "all_reduce_perf-2.18-a100-2x4.log").read_text()
# The layout of 2019-2021 (NCCL 2.4-2.10): no root column, an `error` column (a max deviation, not a count),
# rank lines without `Group`. 2 nodes x 1 V100 over a 10 GbE link: at n = 2, busbw = algbw.
OLD = (DATA / "all_reduce_perf-2019-v100-2x1.log").read_text()
# The layout of 2017-2018 (nccl-tests 1.0, NCCL 2.0-2.3): a `bytes N type op ... res` header, times in ms, rank
# lines without Pid, the footer without `#`. 2 nodes x 1 P100; times chosen, bandwidths = size / time.
OLDEST = (DATA / "all_reduce_perf-2017-p100-2x1.log").read_text()
# A published measurement, copied unchanged (docs/07 shows it): the SLURM output of all_reduce_perf on 2 nodes x 4
# GH200 of CSCS's Alps (NCCL 2.23.4, aws-ofi-nccl 1.9.2), from github.com/boeschf/nccl-benchmark-on-alps-2025,
# results/nccl-tests_nccl-2.23.4-1-aws-1.9.2-v0/job-n-00008-N-0002-142909.out: every line labelled by `srun -l`,
# a `set -x` trace before the table and MPICH's Slingshot counters after it.
ALPS = (DATA / "all_reduce_perf-alps-gh200-2x4.log").read_text()


def _printed_busbw(text: str, column: int) -> list:
    return [float(line.split()[column]) for line in text.splitlines() if line.split() and line.split()[0].isdigit()]


# --- reading real layouts ---------------------------------------------------------------------------------------


def test_a_2_13_log_is_8_ranks_on_2_nodes_read_by_its_out_of_place_column():
    (r,) = nccl_tests.parse(NEW, "a100.log", "2026-01-02T03:04:05+00:00")
    launch = r["launch"]
    assert (launch["world_size"], launch["num_nodes"], launch["devices"]) == (8, 2, 4)
    assert (launch["accelerator"], launch["backend"], launch["device_names"]) == ("gpu", "nccl", [A100])
    assert launch["hostnames"] == ["gpu-a01", "gpu-a02"] and r["created"] == "2026-01-02T03:04:05+00:00"
    assert r["kind"] == "allreduce" and r["status"] == "completed" and r["run_id"] == "nccl-tests-a100.log"
    assert r["config"] == {"dtype": "float32", "min_bytes": 8, "max_bytes": 134217728, "warmup_iters": 5,
                           "iters": 20}
    assert r["source"]["nccl"] == "2.18.5+cuda12.2" and r["source"]["column"] == "out-of-place"
    rows = r["rows"]
    assert [row["bytes"] for row in rows] == [8 * 4**k for k in range(13)]
    assert all(row["count"] == row["bytes"] // 4 and row["dtype"] == "float32" for row in rows)
    assert all(row["wrong"] == 0 and row["in_place_wrong"] == 0 for row in rows)
    # bandwidths recomputed from the printed time: equal to the printed ones within their two decimals; the
    # out-of-place column is the one read, the in-place one kept beside it
    assert [row["busbw_GBps"] for row in rows] == pytest.approx(_printed_busbw(NEW, 7), abs=0.006, rel=1e-3)
    assert [row["in_place_busbw_GBps"] for row in rows] == pytest.approx(_printed_busbw(NEW, 11), abs=0.006,
                                                                         rel=1e-3)
    assert rows[-1]["time_s"] == pytest.approx(1322.9e-6) and rows[-1]["in_place_time_s"] == pytest.approx(1316.3e-6)
    assert rows[-1]["busbw_GBps"] == pytest.approx(134217728 / 1322.9e-6 / 1e9 * 2 * 7 / 8)
    assert r["summary"]["nccl_tests_avg_busbw_GBps"] == 49.8942  # the log's own average, as printed
    assert r["summary"]["large_msg_busbw_GBps"] == pytest.approx(170.60, abs=0.01)  # of 147.45, 170.60, 177.55


def test_a_published_slurm_log_is_read_as_it_was_saved():
    (r,) = nccl_tests.parse(ALPS, "alps.log")
    assert r["_warnings"] == []  # sizes, counts and busbw agree with 8 ranks
    launch = r["launch"]
    assert (launch["world_size"], launch["num_nodes"], launch["devices"]) == (8, 2, 4)
    assert launch["device_names"] == ["NVIDIA GH200 120GB"] and launch["hostnames"] == ["nid005597", "nid005670"]
    assert r["config"] == {"dtype": "float32", "min_bytes": 8, "max_bytes": 4294967296, "warmup_iters": 8,
                           "iters": 24}
    rows = r["rows"]
    assert [row["bytes"] for row in rows] == [8 * 2**k for k in range(30)]
    printed = _printed_busbw(ALPS.replace("\n0: ", "\n"), 7)  # srun's label off
    assert len(printed) == 30
    assert [row["busbw_GBps"] for row in rows] == pytest.approx(printed, abs=0.006, rel=3e-4)  # times: 4-5 digits
    assert r["summary"]["nccl_tests_avg_busbw_GBps"] == 42.7223
    # the plateau docs/07 quotes: the middle of the 3 largest sizes (1, 2, 4 GiB), busbw recomputed from 2 GiB's time
    assert r["summary"]["large_msg_busbw_GBps"] == pytest.approx(23938e-6 ** -1 * 2**31 / 1e9 * 2 * 7 / 8)
    assert r["summary"]["large_msg_busbw_GBps"] == pytest.approx(156.99, abs=0.01)


def test_a_2019_log_without_root_and_with_an_error_column():
    (r,) = nccl_tests.parse(OLD, "v100.txt")
    launch = r["launch"]
    assert (launch["world_size"], launch["num_nodes"], launch["devices"]) == (2, 2, 1)
    assert launch["device_names"] == ["Tesla V100-SXM2-16GB"] and launch["hostnames"] == ["node17", "node18"]
    rows = r["rows"]
    assert [row["bytes"] for row in rows] == [MiB * 2**k for k in range(7)]
    assert all(row["wrong"] is None for row in rows)  # `error` is a deviation, not a count of wrong values
    assert all(row["busbw_GBps"] == pytest.approx(row["algbw_GBps"]) for row in rows)  # n = 2: factor 1
    assert [row["busbw_GBps"] for row in rows] == pytest.approx(_printed_busbw(OLD, 6), abs=0.006)
    assert r["config"]["iters"] == 20 and r["summary"]["nccl_tests_avg_busbw_GBps"] == 1.07929


def test_a_2017_log_with_times_in_milliseconds():
    (r,) = nccl_tests.parse(OLDEST, "p100.log")
    launch = r["launch"]
    assert (launch["world_size"], launch["num_nodes"], launch["device_names"]) == (2, 2, ["Tesla P100-SXM2-16GB"])
    rows = r["rows"]
    assert [row["bytes"] for row in rows] == [MiB, 2 * MiB, 4 * MiB]
    assert [row["time_s"] for row in rows] == pytest.approx([100e-6, 190e-6, 370e-6])  # out-of-place
    assert [row["in_place_time_s"] for row in rows] == pytest.approx([101e-6, 191e-6, 372e-6])
    assert rows[-1]["busbw_GBps"] == pytest.approx(4 * MiB / 370e-6 / 1e9)  # n = 2: busbw = algbw
    assert all(row["wrong"] is None for row in rows) and r["summary"]["nccl_tests_avg_busbw_GBps"] == 10.916


def _count_halved(line: str) -> str:
    """A row whose count column is half of size / 4 B (as an older log printed it); size, time and bandwidths
    as they were."""
    words = line.split()
    if not words or not words[0].isdigit():
        return line
    return "  ".join([words[0], str(int(words[0]) // 8), *words[2:]])


def test_a_count_column_that_disagrees_with_the_size_is_read_by_the_size_with_one_warning(tmp_path, capsys):
    text = "\n".join(_count_halved(line) for line in OLD.splitlines())
    (r,) = nccl_tests.parse(text, "old.txt")
    assert [row["bytes"] for row in r["rows"]] == [MiB * 2**k for k in range(7)]
    assert [row["count"] for row in r["rows"]] == [MiB // 8 * 2**k for k in range(7)]  # as printed
    assert [row["busbw_GBps"] for row in r["rows"]] == pytest.approx(_printed_busbw(OLD, 6), abs=0.006)
    assert r["_warnings"] == ["count is not size / 4 B of float at 7 of 7 row(s) (first: size 1048576, count "
                              "131072): read by the size column, as nccl-tests computes its bandwidths"]
    assert nccl_tests.parse(OLD)[0]["_warnings"] == []
    out = _training_folder(tmp_path)
    (out / "old.txt").write_text(text)
    assert cli.main(["--output_dir", str(out), "--nccl_tests", str(out / "old.txt")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"benchmark.py: warning: {out / 'old.txt'}: {r['_warnings'][0]}"]  # once: found and named


def _per_iteration(line: str) -> str:
    """A row or header of `all_reduce_perf -I 1` (2.19 on): four per-iteration columns after each block."""
    words = line.lstrip("#").split()
    if words[:2] == ["size", "count"]:
        words = words[:9] + ["i_min", "i_max", "i_p99", "i_cv%"] + words[9:] + ["i_min", "i_max", "i_p99", "i_cv%"]
        return "# " + "  ".join(words)
    if not words or not words[0].isdigit():
        return line
    extra = ["17.2", "19.9", "19.9", "3.1"]
    return "  ".join(words[:9] + extra + words[9:] + extra)


def test_the_newest_layout_with_versions_program_and_per_iteration_columns():
    text = ("# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807\n"
            "# Collective test starting: all_reduce_perf\n"
            + "\n".join(_per_iteration(line) for line in NEW.replace("[0x07]", "[0000:07:00]").splitlines())
            + "\n# Collective test concluded: all_reduce_perf\n")
    (r,) = nccl_tests.parse(text)
    (old,) = nccl_tests.parse(NEW)
    assert r["rows"] == old["rows"] and r["launch"] == old["launch"]
    assert r["source"]["nccl_tests"] == "2.19.6" and r["source"]["program"] == "all_reduce_perf"


def test_one_result_per_data_type():
    """`all_reduce_perf -d all` measures every type: float and half become two results (the report takes float32,
    the type DDP all-reduces)."""
    table = [line for line in NEW.splitlines() if line.split() and line.split()[0].isdigit()]
    half = ["  ".join([w[0], str(int(w[0]) // 2), "half", *w[3:]]) for w in (line.split() for line in table)]
    (f32, f16) = nccl_tests.parse(NEW.replace(table[-1], "\n".join([table[-1], *half])), "mixed.log")
    assert (f32["config"]["dtype"], f16["config"]["dtype"]) == ("float32", "float16")
    assert f16["run_id"] == "nccl-tests-mixed.log-float16" and [r["count"] for r in f16["rows"]][:2] == [4, 16]


@pytest.mark.parametrize("prefix", ["0: ", "[1,0]<stdout>:"])
def test_launcher_line_prefixes_are_read_through(prefix):
    """`srun --label` and `mpirun --tag-output` put the rank before every line."""
    (r,) = nccl_tests.parse("".join(prefix + line for line in NEW.splitlines(keepends=True)))
    assert r["launch"]["world_size"] == 8 and len(r["rows"]) == 13


def test_unchecked_runs_say_n_a_and_repeated_sizes_take_the_median():
    (r,) = nccl_tests.parse("\n".join(_unchecked(line) for line in NEW.splitlines()))  # all_reduce_perf -c 0
    assert all(row["wrong"] is None and row["in_place_wrong"] is None for row in r["rows"])
    table = [line for line in NEW.splitlines() if line.split() and line.split()[0].isdigit()]
    slower = table[-1].replace("1322.9  101.46  177.55", "1400.0   95.87  167.77")
    (r,) = nccl_tests.parse(NEW.replace(table[-1], "\n".join([table[-1], slower, table[-1]])))  # -N 3 cycles
    assert len(r["rows"]) == 13 and r["rows"][-1]["time_s"] == pytest.approx(1322.9e-6)


def _with_reductions(times_us: dict) -> str:
    """The 2019 log (2 ranks: busbw = algbw) as `all_reduce_perf -o all` prints it: each size once per reduction,
    out-of-place and in-place `time` = times_us[redop] x the size in MiB, bandwidths printed from that time."""
    out = []
    for line in OLD.splitlines():
        words = line.split()
        if not words or not words[0].isdigit():
            out.append(line)
            continue
        size = int(words[0])
        for redop, us_per_mib in times_us.items():
            us = us_per_mib * size / MiB
            bw = f"{size / (us * 1e-6) / 1e9:.2f}"
            column = f"{us:>8.1f} {bw} {bw} 0e+00"
            out.append(f"{size:>12} {size // 4:>12} float {redop:>6} {column} {column}")
    return "\n".join(out)


def test_of_several_reductions_only_the_sum_rows_are_read():
    """DDP's gradient all-reduce is a sum: a log of every reduction (-o all) is read by its sum rows alone, not a
    median over prod, min, max and avg (which would be 2000 us per MiB here, not 1000)."""
    (r,) = nccl_tests.parse(_with_reductions({"prod": 3000.0, "sum": 1000.0, "min": 2000.0, "max": 2000.0,
                                              "avg": 4000.0}), "all-ops.log")
    assert r["source"]["redop"] == "sum" and len(r["rows"]) == 7
    assert [row["time_s"] for row in r["rows"]] == pytest.approx([1000e-6 * 2**k for k in range(7)])
    assert r["rows"][0]["busbw_GBps"] == pytest.approx(MiB / 1000e-6 / 1e9)  # 2 ranks: busbw = algbw


def test_without_a_sum_the_first_reduction_by_name_is_read():
    (r,) = nccl_tests.parse(_with_reductions({"prod": 3000.0, "min": 1500.0, "max": 2000.0}), "no-sum.log")
    assert r["source"]["redop"] == "max" and len(r["rows"]) == 7
    assert r["rows"][0]["time_s"] == pytest.approx(2000e-6)


def test_a_log_whose_column_header_was_cut_is_read_by_the_length_of_its_rows():
    """13 fields a row: the 2.13+ layout (with root); 12: 2019-2021's (without). Same figures as with the header."""
    header = next(line for line in NEW.splitlines() if line.split()[1:3] == ["size", "count"])
    (cut,) = nccl_tests.parse(NEW.replace(header + "\n", ""), "cut.log")
    (whole,) = nccl_tests.parse(NEW, "cut.log")
    assert cut["rows"] == whole["rows"] and cut["source"] == whole["source"] and len(cut["rows"]) == 13
    old_header = next(line for line in OLD.splitlines() if line.split()[1:3] == ["size", "count"])
    (old,) = nccl_tests.parse(OLD.replace(old_header + "\n", ""), "old.log")
    assert [row["time_s"] for row in old["rows"]] == pytest.approx(
        [1013.3e-6, 1966.5e-6, 3873.0e-6, 7686.0e-6, 15312e-6, 30564e-6, 61068e-6])  # out-of-place, in us
    assert [row["in_place_time_s"] for row in old["rows"]][:2] == pytest.approx([1016.3e-6, 1972.4e-6])
    assert old["source"]["redop"] == "sum" and all(row["wrong"] == 0 for row in old["rows"])  # read as #wrong


def test_the_result_carries_the_benchmark_s_fields(monkeypatch):
    """A log becomes a result like allreduce_bench's own: every launch field, no error, no run name, the log's
    program (the MPI build's name too); a text parsed without a name or a date is named nccl-tests and dated now."""
    monkeypatch.setattr(results, "now_iso", lambda: "2026-05-06T07:08:09+00:00")
    (r,) = nccl_tests.parse(NEW)
    assert (r["run_id"], r["created"]) == ("nccl-tests-nccl-tests", "2026-05-06T07:08:09+00:00")
    assert (r["status"], r["error"], r["run_name"]) == ("completed", None, None)
    assert r["launch"] == {"launcher": "nccl-tests", "world_size": 8, "num_nodes": 2, "devices": 4,
                           "accelerator": "gpu", "backend": "nccl", "device_names": [A100],
                           "hostnames": ["gpu-a01", "gpu-a02"], "link": None}
    assert r["source"] == {"format": "nccl-tests", "program": "all_reduce_perf", "redop": "sum",
                           "column": "out-of-place", "nccl": "2.18.5+cuda12.2"}
    (mpi,) = nccl_tests.parse("# Collective test starting: all_reduce_perf_mpi\n" + NEW)
    assert mpi["source"]["program"] == "all_reduce_perf_mpi"


def test_a_log_of_one_size_without_its_parameter_line_or_a_readable_average():
    """`all_reduce_perf -b 128M -e 128M`: one row, its busbw the plateau. Without the `# nThread` line (cut off
    the top) the sweep's parameters are unknown, not a refusal; an average another rank's output ran into is
    left out (None), the rows still read."""
    last = next(line for line in NEW.splitlines() if line.split()[:1] == ["134217728"])
    one = NEW[:NEW.index("           8 ")] + last + "\n" + NEW[TABLE_END:]
    one = one.replace("minBytes 8 maxBytes", "minBytes 134217728 maxBytes")
    (r,) = nccl_tests.parse(one)
    assert r["config"] == {"dtype": "float32", "min_bytes": 134217728, "max_bytes": 134217728, "warmup_iters": 5,
                           "iters": 20}
    assert [row["bytes"] for row in r["rows"]] == [134217728]
    assert r["summary"]["large_msg_busbw_GBps"] == pytest.approx(134217728 / 1322.9e-6 / 1e9 * 2 * 7 / 8)
    (cut,) = nccl_tests.parse(NEW[NEW.index("\n") + 1:])
    assert cut["config"] == {"dtype": "float32", "min_bytes": None, "max_bytes": None, "warmup_iters": None,
                             "iters": None}
    assert len(cut["rows"]) == 13
    garbled = NEW.replace("Avg bus bandwidth    : 49.8942", "Avg bus bandwidth    : gpu-a02:38810:38810 [0] NCCL")
    (g,) = nccl_tests.parse(garbled)
    assert g["summary"]["nccl_tests_avg_busbw_GBps"] is None and len(g["rows"]) == 13


def test_a_type_without_a_torch_name_keeps_nccl_tests_name():
    """`all_reduce_perf -d int32`: int32 is nccl-tests' name and ours; 4 bytes a value, so no count warning."""
    (r,) = nccl_tests.parse(NEW.replace("     float     sum", "     int32     sum"))
    assert r["config"]["dtype"] == "int32" and {row["dtype"] for row in r["rows"]} == {"int32"}
    assert r["_warnings"] == [] and r["run_id"] == "nccl-tests-nccl-tests"


def test_the_reduction_is_read_in_every_layout():
    """The op column names the reduction in the 2017 header (`op`), the 2.13 one and in headerless rows of 13
    (with root) or 12 (without) fields; a table with no redop column at all is the default op, sum."""
    (prod,) = nccl_tests.parse(OLDEST.replace("   float     sum", "   float    prod"))
    assert prod["source"]["redop"] == "prod" and len(prod["rows"]) == 3
    (mx,) = nccl_tests.parse(_header_cut(NEW.replace("     float     sum", "     float     max")))
    assert mx["source"]["redop"] == "max" and len(mx["rows"]) == 13
    (mn,) = nccl_tests.parse(_header_cut(OLD.replace("   float     sum", "   float     min")))
    assert mn["source"]["redop"] == "min" and len(mn["rows"]) == 7
    no_op = "\n".join(_without_column(line, 3) for line in OLD.splitlines())
    (r,) = nccl_tests.parse(no_op)
    (old,) = nccl_tests.parse(OLD)
    assert r["source"]["redop"] == "sum" and r["rows"] == old["rows"]


def _without_column(line: str, index: int) -> str:
    """A row or the column header without its index-th field (counted after the header's '#')."""
    words = line.lstrip("#").split()
    if words[:2] == ["size", "count"]:
        return "# " + "  ".join(words[:index] + words[index + 1:])
    if not words or not words[0].isdigit():
        return line
    return "  ".join(words[:index] + words[index + 1:])


def test_a_cputime_header_and_a_header_cut_short_of_its_last_column():
    """`all_reduce_perf -C 1` names its time columns cputime; a header whose last #wrong was cut does not say
    whether the in-place column counts wrong values (#wrong) or a deviation (error): None, unknown."""
    (whole,) = nccl_tests.parse(NEW)
    (cpu,) = nccl_tests.parse(NEW.replace("    time   algbw", " cputime   algbw"))
    assert cpu["rows"] == whole["rows"]
    header = next(line for line in NEW.splitlines() if line.split()[1:3] == ["size", "count"])
    assert header.endswith(" #wrong")
    (cut,) = nccl_tests.parse(NEW.replace(header, header[:-len(" #wrong")]))
    assert all(row["wrong"] == 0 and row["in_place_wrong"] is None for row in cut["rows"])  # out-of-place read


def test_a_table_of_one_block_is_read_as_in_place():
    """A table with one time/algbw/busbw block (the 2019 log's in-place columns alone) is that block, labelled
    in-place: no out-of-place figures invented from it, and its bandwidths still checked."""
    def in_place_only(line):
        words = line.lstrip("#").split()
        if words[:2] == ["size", "count"]:
            return "# " + "  ".join(words[:4] + words[8:])
        if not words or not words[0].isdigit():
            return line
        return "  ".join(words[:4] + words[8:])

    text = "\n".join(in_place_only(line) for line in OLD.splitlines())
    (r,) = nccl_tests.parse(text)
    assert r["source"]["column"] == "in-place"
    rows = r["rows"]
    assert [row["time_s"] for row in rows] == pytest.approx(
        [1016.3e-6, 1972.4e-6, 3884.6e-6, 7709.1e-6, 15358e-6, 30656e-6, 61251e-6])
    assert rows[0]["busbw_GBps"] == pytest.approx(MiB / 1016.3e-6 / 1e9)  # 2 ranks: busbw = algbw
    assert not any(key.startswith(("oop_", "in_place_")) for row in rows for key in row)
    with pytest.raises(NcclTestsError) as exc:
        nccl_tests.parse(text.replace("1016.3  1.03  1.03", "1016.3  1.03  0.52"))
    assert str(exc.value) == ("at size 1048576, busbw 0.52 GB/s is not algbw 1.03 x 2(n-1)/n for the 2 rank(s) "
                              "listed: not an all-reduce of 2 rank(s)")


# all_gather_perf of 2019 on the 2 V100 nodes: no redop column, size = the gathered total, count = size / 4 / 2,
# busbw = algbw x (n-1)/n = algbw / 2 (an all-reduce's would equal algbw at n = 2); times from OLD's
ALL_GATHER_2019 = """\
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  13201 on     node17 device  0 [0x00] Tesla V100-SXM2-16GB
#   Rank  1 Pid  20660 on     node18 device  0 [0x00] Tesla V100-SXM2-16GB
#
#                                             out-of-place                       in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        131072   float   1013.3    1.03    0.52  0e+00   1013.3    1.03    0.52  0e+00
     2097152        262144   float   1966.5    1.07    0.53  0e+00   1966.5    1.07    0.53  0e+00
     4194304        524288   float   3873.0    1.08    0.54  0e+00   3873.0    1.08    0.54  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.53
#
"""


def test_another_collective_s_log_is_refused_by_its_busbw():
    """Without a `Collective test starting` line (printed since mid-2025) the program is unnamed: the bus factor
    tells. At 1 MiB busbw 0.52 is half of algbw 1.03, not the 2(n-1)/n = 1 of an all-reduce of 2 ranks (off by
    0.51 GB/s, the check allows 0.011 + 2 % of 0.52)."""
    with pytest.raises(NcclTestsError) as exc:
        nccl_tests.parse(ALL_GATHER_2019)
    assert str(exc.value) == ("at size 1048576, busbw 0.52 GB/s is not algbw 1.03 x 2(n-1)/n for the 2 rank(s) "
                              "listed: not an all-reduce of 2 rank(s)")


def test_printed_bandwidths_may_be_off_by_2_percent_plus_0_011_the_edge_included():
    """Print rounding and nccl-tests' own timing make the printed busbw differ from algbw x 2(n-1)/n a little:
    at 2 ranks, algbw 12.20 and busbw 11.95 differ by 0.25 = 0.011 + 2 % of 11.95, still read (the figures
    read are recomputed from the time, 4 MiB in 343.8 us: 12.20 GB/s)."""
    row = "     4194304       1048576   float     sum    343.8   12.20   11.95  0e+00    343.8   12.20   11.95  0e+00"
    text = OLD[:OLD.index("     1048576 ")] + row + "\n" + OLD[OLD.index("# Out of bounds"):]
    (r,) = nccl_tests.parse(text)
    assert [row["busbw_GBps"] for row in r["rows"]] == pytest.approx([4194304 / 343.8e-6 / 1e9])
    with pytest.raises(NcclTestsError) as exc:  # 0.01 further: refused
        nccl_tests.parse(text.replace("11.95", "11.94"))
    assert str(exc.value) == ("at size 4194304, busbw 11.94 GB/s is not algbw 12.2 x 2(n-1)/n for the 2 rank(s) "
                              "listed: not an all-reduce of 2 rank(s)")


def test_a_rank_line_without_group_is_in_group_0():
    """Rank lines before 2.13 name no group: each is in group 0, the group of a `Group  0` line beside it."""
    (r,) = nccl_tests.parse(NEW.replace("Rank  7 Group  0 Pid", "Rank  7 Pid"))
    assert r["launch"]["world_size"] == 8


def _unchecked(line: str) -> str:
    words = line.split()
    if not words or not words[0].isdigit():
        return line
    words[8] = words[12] = "N/A"
    return "  ".join(words)


# --- the report -------------------------------------------------------------------------------------------------


def _gpu_training(run_id, world, nodes, samples_per_s, busy_s):
    result = _with_comm(make_result(run_id, world, nodes, samples_per_s=samples_per_s), 0.1, busy_s, busy_s / 2,
                        0.1 + busy_s / 2, grad_bytes=64_000_000, buckets=3)
    result["launch"].update(accelerator="gpu", device_names=[A100], backend="nccl")
    return result


def _training_folder(tmp_path):
    out = tmp_path / "outputs"
    for r in (_gpu_training("t1", 1, 1, 100, 0.0), _gpu_training("t8", 8, 2, 700, 0.004)):
        results.write(str(out), r)
    return out


def test_the_report_predicts_from_a_log_in_the_folder(tmp_path, capsys):
    out = _training_folder(tmp_path)
    report = cli.build(str(out))
    scaling, bench, skipped = report.scaling, report.bench, report.skipped
    assert bench.empty and scaling.set_index("world_size").loc[8].isna().bench_busbw_GBps  # no benchmark: no prediction
    assert cli.main(["--output_dir", str(out)]) == 0
    assert "or an all_reduce_perf log of 8 ranks on 2 node(s) (--nccl_tests LOG)" in capsys.readouterr().out
    (out / "slurm-4242.out").write_text("srun: job 4242 queued\n" + NEW)
    (out / "train.log").write_text("epoch 1: loss 0.5\n")  # not nccl-tests: passed over without a word
    report = cli.build(str(out))
    scaling, bench, skipped = report.scaling, report.bench, report.skipped
    assert skipped == [] and list(bench["run_id"]) == ["nccl-tests-slurm-4242.out"]
    rows = nccl_tests.parse(NEW)[0]["rows"]
    eight = scaling.set_index("world_size").loc[8]
    assert eight.bench_runs == 1
    assert eight.predicted_allreduce_s == pytest.approx(explain.predicted_allreduce_s(rows, 64_000_000, 3, 8))
    assert eight.bench_busbw_GBps == pytest.approx(64_000_000 / eight.predicted_allreduce_s / 1e9 * 2 * 7 / 8)
    assert 100 < eight.bench_busbw_GBps < 180  # 21 MB buckets: between the 8 MiB and 32 MiB rows' busbw

    assert cli.main(["--output_dir", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.err == "" and "all-reduce benchmark: " in printed.out


def test_the_report_reads_the_out_of_place_column_as_nccl_tests_users_quote_it(tmp_path):
    """An in-place column twice as slow at 128 MiB (consistent: 2632.6 us, algbw 50.98, busbw 89.22) changes
    nothing the report reads: out-of-place is the field's convention."""
    slow_in_place = NEW.replace("1316.3  101.97  178.44", "2632.6   50.98   89.22")
    (r,) = nccl_tests.parse(slow_in_place)
    assert r["rows"][-1]["in_place_busbw_GBps"] == pytest.approx(89.22, abs=0.01)
    out = _training_folder(tmp_path)
    (out / "a100.log").write_text(slow_in_place)
    bench = cli.build(str(out)).bench
    exported = export.bench_rows(bench)
    assert exported["busbw_GBps"].iloc[-1] == pytest.approx(134217728 / 1322.9e-6 / 1e9 * 2 * 7 / 8)
    assert list(exported["busbw_GBps"]) == pytest.approx(_printed_busbw(NEW, 7), abs=0.006, rel=1e-3)


def _log_of(busbw_by_size: dict) -> str:
    """A 2.13-layout log of NEW's 8 ranks whose busbw (both columns) is chosen per size: algbw = busbw x 8/14,
    time = size / algbw, printed to nccl-tests' precision."""
    rows = []
    for size, busbw in busbw_by_size.items():
        algbw = busbw * 8 / 14
        cols = f"{size / algbw / 1e3:7.1f}  {algbw:6.2f}  {busbw:6.2f}       0"
        rows.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {cols}  {cols}")
    footer = "\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1 \n"
    return NEW[:NEW.index("           8 ")] + "\n".join(rows) + footer


# 1 MiB to 8 GiB: busbw climbs to a plateau of 280-300 GB/s over the last three sizes; the median over every
# size >= 1 MiB would be (150 + 170) / 2 = 160
PLATEAU_LOG = _log_of(dict(zip((MiB * 2**k for k in range(14)),
                               (10, 20, 40, 70, 100, 130, 150, 170, 200, 240, 260, 280, 300, 290))))


def test_the_quoted_busbw_is_the_plateau_the_median_of_the_three_largest_sizes(tmp_path):
    (r,) = nccl_tests.parse(PLATEAU_LOG)
    assert r["summary"]["large_msg_busbw_GBps"] == pytest.approx(290, rel=2e-3)  # median of 280, 300, 290
    assert r["summary"]["peak_busbw_GBps"] == pytest.approx(300, rel=2e-3)
    assert plateau_busbw(r["rows"][:2]) == pytest.approx((10 + 20) / 2, rel=2e-3)  # fewer sizes: all of them
    out = _training_folder(tmp_path)
    (out / "plateau.log").write_text(PLATEAU_LOG)
    bench = cli.build(str(out)).bench
    assert bench["busbw_GBps"].tolist() == pytest.approx([290], rel=2e-3)


def _squeezed(text: str) -> list:
    return [" ".join(line.split()) for line in text.splitlines()]


def test_the_terminal_report_shows_the_log_as_nccl_tests_prints_it(tmp_path, capsys):
    """File name, ranks, nccl-tests' columns with the out-of-place figures as the log printed them, the quoted
    plateau (median of 147.45, 170.60, 177.55) and the log's own average."""
    out = _training_folder(tmp_path)
    (out / "slurm-4242.out").write_text(NEW)
    assert cli.main(["--output_dir", str(out)]) == 0
    printed = _squeezed(capsys.readouterr().out)
    start = printed.index(f"nccl-tests log {out / 'slurm-4242.out'}: 8 ranks on 2 nodes, {A100}, NCCL 2.18.5+cuda12.2; "
                          "out-of-place columns")
    assert printed[start + 1:start + 4] == ["size (B) count type time (us) algbw (GB/s) busbw (GB/s)",
                                            "---------- -------- ------ ----------- -------------- --------------",
                                            "8 2 float 18.00 0.00 0.00"]
    assert printed[start + 15:start + 18] == [
        "134217728 33554432 float 1322.90 101.46 177.55",
        "busbw quoted: 170.60 GB/s, the plateau (median of the 3 largest sizes); peak 177.55 GB/s at 128 MiB",
        "Avg bus bandwidth 49.8942 GB/s: the log's own, over every size and both columns"]


def test_without_training_runs_the_log_is_still_shown(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    log = tmp_path / "all_reduce_perf.p100.log"
    log.write_text(OLDEST)
    assert cli.main(["--output_dir", str(tmp_path / "empty"), "--nccl_tests", str(log)]) == 1
    printed = _squeezed(capsys.readouterr().out)
    assert printed[0] == f"nccl-tests log {log}: 2 ranks on 2 nodes, Tesla P100-SXM2-16GB; out-of-place columns"
    assert printed[3:6] == ["1048576 262144 float 100.00 10.49 10.49", "2097152 524288 float 190.00 11.04 11.04",
                            "4194304 1048576 float 370.00 11.34 11.34"]
    assert printed[-1].startswith("No training results under ")


def test_the_plot_legend_names_the_log_file(tmp_path):
    out = _training_folder(tmp_path)
    (out / "all_reduce_perf-2.x.txt").write_text(NEW)
    bench = cli.build(str(out)).bench
    _, labels = bench_plot.busbw_figure(bench).axes[0].get_legend_handles_labels()
    assert labels == ["8 dev, 2 nodes, all_reduce_perf-2.x.txt, out-of-place"]  # the GPU: in the title


def test_a_scalelab_benchmark_of_the_same_configuration_is_preferred(tmp_path):
    """Its single all-reduces are how DDP issues buckets; the log then is not counted among the runs combined."""
    out = _training_folder(tmp_path)
    (out / "a100.log").write_text(NEW)
    ours = results.envelope("allreduce", "ours-8x")
    rows = [{"bytes": b, "count": b // 4, "dtype": "float32", "time_s": 1e-3, "single_op_s": 2e-3, "wrong": 0,
             "algbw_GBps": b / 1e-3 / 1e9, "busbw_GBps": b / 1e-3 / 1e9 * 1.75} for b in (MiB, 64 * MiB)]
    ours.update(status="completed", error=None, rows=rows, summary={"large_msg_busbw_GBps": rows[-1]["busbw_GBps"]},
                launch={"world_size": 8, "num_nodes": 2, "devices": 4, "accelerator": "gpu",
                        "backend": "nccl", "device_names": [A100], "hostnames": ["a", "b"]},
                config={"dtype": "float32"})
    results.write(str(out), ours)
    report = cli.build(str(out))
    scaling, bench = report.scaling, report.bench
    eight = scaling.set_index("world_size").loc[8]
    assert len(bench) == 2 and eight.bench_runs == 1
    assert eight.predicted_allreduce_s == pytest.approx(explain.predicted_allreduce_s(rows, 64_000_000, 3, 8))


def test_a_log_outside_the_folder_by_flag(tmp_path, capsys):
    out = _training_folder(tmp_path)
    log = tmp_path / "elsewhere" / "all_reduce_perf.8x.log"
    log.parent.mkdir()
    log.write_text(NEW)
    report = cli.build(str(out), nccl_logs=[str(log)])
    scaling, bench = report.scaling, report.bench
    assert len(bench) == 1 and scaling.set_index("world_size").loc[8].bench_runs == 1
    assert cli.main(["--output_dir", str(out), "--nccl_tests", str(log)]) == 0
    assert "all-reduce benchmark: " in capsys.readouterr().out
    with pytest.raises(Exception, match="--nccl_tests .*missing.log: no such file"):
        cli.main(["--output_dir", str(out), "--nccl_tests", str(tmp_path / "missing.log")])


# --- bad logs: one line each, nothing else lost ----------------------------------------------------------------


TABLE_END = NEW.index("# Out of bounds")


ROOTED = NEW.replace("     sum      -1  ", "     sum       0  ")  # reduce_perf's rows: a root each


def _header_cut(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.split()[1:3] != ["size", "count"])


@pytest.mark.parametrize("text, reason", [
    ("epoch 1: loss 0.5\n", "not nccl-tests output (no header, no 'Avg bus bandwidth' line)"),
    (NEW[:TABLE_END], "truncated: 13 row(s) and no 'Avg bus bandwidth' line (the run did not finish)"),
    (NEW[:TABLE_END - 40], "line 32: a row of 8 fields where the header has 13 (truncated or corrupt)"),
    (NEW[:NEW.index("           8 ")], "nccl-tests output without a single result row (truncated)"),
    # the column header cut after `root`: no time column to read the rows by
    (NEW.replace("   root     time   algbw   busbw #wrong     time   algbw   busbw #wrong", "   root"),
     "line 20: a row of 13 fields where the header has 5 (truncated or corrupt)"),
    (NEW.replace("  18.32    1.79", "  18.3x    1.79"), "line 26: not a result row (corrupt): 32768 8192 float sum -1 "
                                                        "18.3x 1.79 3.13 0 18.23 1.80 3.15 0"),
    # the row as read, cut to 60 characters: "134217728 33554432 float sum -1 1322.x 101.46 177.55 0 1316."
    (NEW.replace("1322.9", "1322.x"), "line 32: not a result row (corrupt): 134217728 33554432 float sum -1 1322.x "
                                      "101.46 177.55 0 1316."),
    (NEW.replace("  38.20   54.90   96.07      0", "  38.20   54.90   96.07      3"),
     "3 wrong values at size 2097152: the all-reduce returned wrong data"),
    # out-of-place wrong, in-place right: either column's count refuses the log
    (NEW.replace("  38.39   54.63   95.60      0", "  38.39   54.63   95.60      5"),
     "5 wrong values at size 2097152: the all-reduce returned wrong data"),
    (NEW.replace("148.19", "48.19"), "at size 8388608, busbw 48.19 GB/s is not algbw 84.68 x 2(n-1)/n for the 8 "
                                     "rank(s) listed: not an all-reduce of 8 rank(s)"),
    (NEW.replace("   99.56   84.26  147.45", "   99.56   84.26  247.45"), "at size 8388608, busbw 247.45 GB/s is not "
     "algbw 84.26 x 2(n-1)/n for the 8 rank(s) listed: not an all-reduce of 8 rank(s)"),  # out-of-place column
    (NEW.replace("    18.00    0.00    0.00", "     0.00    0.00    0.00", 1), "time 0 us at size 8"),
    (OLD.replace("1013.3", "-999999"), "time -999999 us at size 1048576"),
    (NEW.replace("Rank  7 Group  0", "Rank  6 Group  0"), "rank 6 is listed twice: several runs in one file "
     "(nccl-tests built without MPI=1 under mpirun/srun, or logs joined); keep one run"),
    (NEW.replace("#  Rank", "# Rnak"), "no '#  Rank N ... on HOST device N' lines: the world size and nodes are "
                                       "unknown"),
    # NCCL_TESTS_SPLIT: ranks 4-7 (the second node) their own communicator
    (NEW.replace("Group  0 Pid  388", "Group  1 Pid  388"), "the ranks are split into groups (NCCL_TESTS_SPLIT): "
                                                             "one all-reduce per group"),
    (ROOTED, "every row has a root: a rooted collective (reduce, broadcast), not all-reduce"),
    (_header_cut(ROOTED), "every row has a root: a rooted collective (reduce, broadcast), not all-reduce"),
    ("# Collective test starting: all_gather_perf\n" + NEW, "all_gather_perf's output, not all_reduce_perf's (only "
                                                            "all-reduce feeds the report)"),
    (NEW.replace("Out of bounds values : 0 OK", "Out of bounds values : 2 FAILED"),
     "nccl-tests reported 2 size(s) with wrong values (Out of bounds values: FAILED)"),
    # either half of the footer's verdict refuses: a count of sizes with wrong values, or the word FAILED (a log
    # edited or joined by hand can disagree with itself)
    (NEW.replace("Out of bounds values : 0 OK", "Out of bounds values : 0 FAILED"),
     "nccl-tests reported 0 size(s) with wrong values (Out of bounds values: FAILED)"),
    (NEW.replace("Out of bounds values : 0 OK", "Out of bounds values : 1 OK"),
     "nccl-tests reported 1 size(s) with wrong values (Out of bounds values: FAILED)"),
])
def test_bad_logs_say_why(text, reason):
    with pytest.raises(NcclTestsError) as exc:
        nccl_tests.parse(text)
    assert str(exc.value) == reason


def test_a_corrupt_log_is_one_warning_and_the_rest_still_reports(tmp_path):
    out = _training_folder(tmp_path)
    (out / "good.log").write_text(NEW)
    (out / "cut.log").write_text(NEW[:TABLE_END - 200])  # the job was killed mid-table
    proc = run_script("benchmark.py", "--output_dir", out, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"benchmark.py: warning: skipped {out / 'cut.log'}: line 31: a row of 3 "
                                        "fields where the header has 13 (truncated or corrupt)"]
    assert "all-reduce benchmark: " in proc.stdout  # good.log still feeds the prediction


def test_scalelab_s_own_table_is_not_taken_for_nccl_tests_output(tmp_path):
    """Its last line is "Avg bus bandwidth: 1.693 GB/s (...)"; nccl-tests' is "# Avg bus bandwidth : 1.69".
    The demo keeps the benchmark's log in the outputs folder, and the report warned it was a corrupt nccl-tests log."""
    proc = run_script("allreduce_bench.py", "--max_bytes", "64K", "--iters", "2", "--warmup_iters", "1",
                      "--output_dir", tmp_path / "runs", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Avg bus bandwidth: " in proc.stdout and not nccl_tests.looks_like(proc.stdout)
    (tmp_path / "runs" / "allreduce.log").write_text(proc.stdout)
    assert nccl_tests.scan(str(tmp_path / "runs")) == ([], [])
    assert nccl_tests.looks_like(NEW)


# --- our benchmark in nccl-tests' format, read back ------------------------------------------------------------


def test_float_str_is_nccl_tests_getfloatstr():
    assert [nccl_format.float_str(v, 7) for v in (18.0, 1316.34, 12646.31, 1234567.0, 123456789.0)] == [
        "  18.00", "1316.34", "12646.3", "1234567", "1.2e+08"]
    assert [nccl_format.float_str(v, 6) for v in (0.0, 101.456, 1234.5)] == ["  0.00", "101.46", "1234.5"]
    # past 6 digits at width 6: getFloatStr's "%*.0e", no decimal (a 7-wide "1.2e+06" would push the columns)
    assert [nccl_format.float_str(v, 6) for v in (1234567.0, 987654321.0)] == [" 1e+06", " 1e+09"]


def test_format_matches_nccl_tests_columns_and_the_average_counts_both_columns():
    rows = [{"bytes": 1024, "count": 256, "dtype": "float32", "time_s": 2e-5, "algbw_GBps": 0.0512,
             "busbw_GBps": 0.0896, "wrong": 0, "oop_time_s": 2.5e-5, "oop_algbw_GBps": 0.04096,
             "oop_busbw_GBps": 0.07168, "oop_wrong": 0}]
    ranks = [{"rank": 0, "pid": 7, "host": "h", "device": 0, "bus": "0x00", "name": "cpu"}]
    params = {"min_bytes": 1024, "max_bytes": 1024, "factor": 2, "warmup_iters": 5, "iters": 20, "check": True}
    lines = nccl_format.format_log(rows, ranks, params, "p").splitlines()
    assert lines[-5] == ("        1024           256     float     sum      -1    25.00    0.04    0.07       0"
                         "    20.00    0.05    0.09       0")
    assert lines[-4:] == ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {(0.0896 + 0.07168) / 2:g} ",
                          "#", "# Collective test concluded: p"]


def test_scalelab_s_own_log_is_read_by_its_in_place_column():
    """Its out-of-place column adds a copy (torch has no out-of-place all-reduce), so the log its run line names
    reads in-place, as its result.json; the run line gives the run_id, accelerator and backend. 2 ranks: busbw =
    algbw; 1 MiB in 1000 us in-place (1.05 GB/s), 1100 us out-of-place (0.95 GB/s)."""
    rows = [{"bytes": MiB, "count": MiB // 4, "dtype": "float32", "time_s": 1e-3, "algbw_GBps": MiB / 1e-3 / 1e9,
             "busbw_GBps": MiB / 1e-3 / 1e9, "wrong": 0, "oop_time_s": 1.1e-3, "oop_algbw_GBps": MiB / 1.1e-3 / 1e9,
             "oop_busbw_GBps": MiB / 1.1e-3 / 1e9, "oop_wrong": 0}]
    ranks = [{"rank": i, "pid": 7 + i, "host": f"node{i}", "device": 0, "bus": "0x00", "name": "cpu"} for i in (0, 1)]
    params = {"min_bytes": MiB, "max_bytes": MiB, "factor": 2, "warmup_iters": 5, "iters": 20, "check": True}
    log = nccl_format.format_log(rows, ranks, params, "allreduce_bench", ("rid-7", "cpu", "gloo"))
    (r,) = nccl_tests.parse(log, "run.log")
    assert r["run_id"] == "rid-7" and r["source"]["column"] == "in-place"
    assert (r["launch"]["accelerator"], r["launch"]["backend"], r["launch"]["world_size"]) == ("cpu", "gloo", 2)
    (row,) = r["rows"]
    assert (row["time_s"], row["oop_time_s"]) == pytest.approx((1e-3, 1.1e-3))
    assert row["busbw_GBps"] == pytest.approx(1.048576) and "in_place_time_s" not in row


def _run_nccl_format(tmp_path, devices, capsys=None):
    argv = ["--accelerator", "cpu", "--max_bytes", "128K", "--iters", "2", "--warmup_iters", "1", "--format",
            "nccl-tests", "--output_dir", str(tmp_path)]
    if devices == 1:
        assert allreduce.main(argv) == 0
        return capsys.readouterr().out
    proc = run_script("allreduce_bench.py", "--devices", devices, *argv, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def _assert_round_trip(stdout, tmp_path, world):
    (path,) = list(tmp_path.rglob("result.json"))
    written = results.load(str(path))
    (parsed,) = nccl_tests.parse(stdout)
    assert parsed["run_id"] == written["run_id"]  # the log names its run: beside its result.json, counted once
    assert parsed["launch"]["world_size"] == world and parsed["launch"]["backend"] == "gloo"
    assert parsed["launch"]["accelerator"] == "cpu"
    assert [r["bytes"] for r in parsed["rows"]] == [r["bytes"] for r in written["rows"]] == [32768, 65536, 131072]
    for got, want in zip(parsed["rows"], written["rows"]):
        assert got["count"] == want["count"] and got["wrong"] == want["wrong"] == 0 and got["oop_wrong"] == 0
        for key in ("time_s", "oop_time_s"):  # printed in us with 2 decimals, or 7 significant digits
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=5e-9)
        assert got["busbw_GBps"] == pytest.approx(bandwidths(want["bytes"], got["time_s"], world)[1])
    avg = next(line for line in stdout.splitlines() if line.startswith("# Avg bus bandwidth"))
    assert float(avg.split(":")[1]) == pytest.approx(nccl_format.avg_busbw(written["rows"]), rel=1e-5, abs=1e-9)
    return written


def test_one_rank_in_nccl_tests_format_reads_back(tmp_path, capsys):
    stdout = _run_nccl_format(tmp_path, 1, capsys)
    assert stdout.splitlines()[-6].startswith("      131072         32768     float     sum      -1")
    written = _assert_round_trip(stdout, tmp_path, 1)
    assert written["config"]["format"] == "nccl-tests"
    (tmp_path / "run.log").write_text(stdout)  # the log beside its own result.json: one benchmark, not two
    found, _ = results.scan(str(tmp_path))
    assert cli.read_nccl_logs(str(tmp_path), [], {r["run_id"] for r in found}, []) == []


@pytest.mark.slow
def test_two_ranks_in_nccl_tests_format_read_back(tmp_path):
    stdout = _run_nccl_format(tmp_path, 2)
    assert "#  Rank  1 Group  0 Pid" in stdout and "# Out of bounds values : 0 OK" in stdout
    written = _assert_round_trip(stdout, tmp_path, 2)
    assert all(r["oop_busbw_GBps"] > 0 for r in written["rows"])


@pytest.mark.slow
def test_a_wrong_out_of_place_sum_is_counted(tmp_path):
    proc = run_script("allreduce_bench.py", "--devices", 2, "--max_bytes", "32K", "--iters", 1, "--warmup_iters", 0,
                      "--format", "nccl-tests", "--inject_wrong", "--output_dir", tmp_path, timeout=120)
    assert proc.returncode == 1
    (row,) = [line.split() for line in proc.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert (row[8], row[12]) == ("2", "2")  # out-of-place and in-place: 1 wrong value on each of 2 ranks
    assert "# Out of bounds values : 2 FAILED" in proc.stdout
    with pytest.raises(NcclTestsError, match="wrong values"):
        nccl_tests.parse(proc.stdout)
    assert os.path.exists(next(tmp_path.rglob("result.json")))


def test_the_header_is_all_reduce_perfs_with_each_column_name_over_its_column():
    import re

    ranks = [{"rank": 0, "pid": 7, "host": "h", "device": 0, "bus": "0x00", "name": "cpu"},
             {"rank": 1, "pid": 123456, "host": "node-b", "device": 1, "bus": "0x1a", "name": "cpu"}]
    params = {"min_bytes": 1024, "max_bytes": 4096, "factor": 2, "warmup_iters": 5, "iters": 20, "check": False}
    lines = nccl_format.header(ranks, params, "all_reduce_perf", ("rid", "cpu", "gloo")).splitlines()
    assert lines[:8] == [
        "# Collective test starting: all_reduce_perf", "# scalelab run_id: rid accelerator: cpu backend: gloo",
        "# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 0 graph: 0", "#", "# Using devices",
        "#  Rank  0 Group  0 Pid      7 on          h device  0 [0x00] cpu",
        "#  Rank  1 Group  0 Pid 123456 on     node-b device  1 [0x1a] cpu", "#"]
    groups, names, units = lines[8:]
    row = nccl_format.row_line({"bytes": 1024, "count": 256, "dtype": "float32", "time_s": 2e-5, "algbw_GBps": 0.05,
                               "busbw_GBps": 0.05, "wrong": 0, "oop_time_s": 2e-5, "oop_algbw_GBps": 0.05,
                               "oop_busbw_GBps": 0.05, "oop_wrong": None})
    ends = [m.end() for m in re.finditer(r"\S+", row)]
    assert names.split() == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                             "time", "algbw", "busbw", "#wrong"]
    assert [m.end() for m in re.finditer(r"\S+", names)][1:] == ends  # right-aligned over the values
    assert row.split()[3:5] == ["sum", "-1"] and row.split()[8] == "N/A"  # an unchecked column says N/A
    unit_ends = {m.group(): m.end() for m in re.finditer(r"\S+", units)}
    assert units.split()[1:] == ["(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "(GB/s)"]
    assert (unit_ends["(B)"], unit_ends["(elements)"]) == (ends[0], ends[1])
    assert [m.end() for m in re.finditer(r"\(us\)", units)] == [ends[5], ends[9]]
    assert groups.split() == ["#", "out-of-place", "in-place"]
    assert ends[4] < groups.index("out-of-place") < ends[8] < groups.index("in-place") < ends[12]
    assert nccl_format.header(ranks, params, "p").splitlines()[1].startswith("# nThread 1")  # no run: no run line


def test_a_folder_scan_reads_the_logs_by_their_suffix_and_content(tmp_path, monkeypatch):
    import datetime

    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "alps.out").write_text(OLD)
    (tmp_path / "a.log").write_text(NEW)
    (tmp_path / "a.json").write_text(NEW)  # not a log's suffix
    (tmp_path / "train.txt").write_text("epoch 1 loss 0.3\n")  # a log, not nccl-tests': passed over in silence
    (tmp_path / "cut.log").write_text(NEW.split("# Out of bounds")[0])  # nccl-tests', unfinished
    (tmp_path / "big.log").write_text(NEW + "#" * 64)
    monkeypatch.setitem(files.LIMITS, "log", len(NEW) + 32)  # larger than a log holds: named, not read
    os.utime(tmp_path / "a.log", (0, 86400))
    found, skipped = nccl_tests.scan(str(tmp_path))
    assert [(r["run_id"], r["_path"]) for r in found] == [
        ("nccl-tests-a.log", str(tmp_path / "a.log")), ("nccl-tests-b/alps.out", str(tmp_path / "b" / "alps.out"))]
    assert found[0]["created"] == datetime.datetime(1970, 1, 2, tzinfo=datetime.timezone.utc).isoformat()
    assert skipped == [(str(tmp_path / "big.log"), "0.0 MiB, more than a log file holds (0 MiB)"),
                       (str(tmp_path / "cut.log"),
                        "truncated: 13 row(s) and no 'Avg bus bandwidth' line (the run did not finish)")]
    assert nccl_tests.load(str(tmp_path / "a.log"))[0]["run_id"] == "nccl-tests-a.log"
    with pytest.raises(results.ResultError, match=r"^unreadable \(No such file or directory\)$"):
        nccl_tests.load(str(tmp_path / "none.log"))


def test_a_log_with_bytes_that_are_not_utf_8_is_still_read(tmp_path):
    """An NCCL INFO line can carry a name in Latin-1 (here an interface's): that byte must not cost the log."""
    data = NEW.replace("Bootstrap : Using ib0", "Bootstrap : Using \xe9th0").encode("latin-1")
    (tmp_path / "a100.log").write_bytes(data)
    found, skipped = nccl_tests.scan(str(tmp_path))
    assert [r["run_id"] for r in found] == ["nccl-tests-a100.log"] and skipped == []
    (loaded,) = nccl_tests.load(str(tmp_path / "a100.log"))
    assert loaded["rows"] == nccl_tests.parse(NEW)[0]["rows"]


def test_a_scan_passes_over_what_is_no_log_names_what_it_cannot_read_and_reads_on(tmp_path, monkeypatch):
    """In name order: a training log, a log whose header comes after its first MiB (not sniffed, so not read), a
    file that cannot be opened (permissions: named), a FIFO named like a SLURM log (named, never opened: opening it
    would wait for a writer for ever): the log after them still read. A file of exactly the limit is read."""
    (tmp_path / "0-train.log").write_text("epoch 1: loss 0.5\n")
    (tmp_path / "1-late.log").write_text("step 1\n" * (MiB // 7 + 1) + NEW)  # 7 B a line: just over 1 MiB
    (tmp_path / "2-locked.log").write_text(NEW)
    os.mkfifo(tmp_path / "2-slurm-1234.out")
    (tmp_path / "3-a100.log").write_text(NEW)
    real_open = os.open

    def refusing(path, *args, **kwargs):
        if str(path).endswith("2-locked.log"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(files.os, "open", refusing)
    found, skipped = nccl_tests.scan(str(tmp_path))
    assert [(r["run_id"], len(r["rows"])) for r in found] == [("nccl-tests-3-a100.log", 13)]
    assert skipped == [(str(tmp_path / "2-locked.log"), "unreadable (Permission denied)"),
                       (str(tmp_path / "2-slurm-1234.out"), "a FIFO, not a file")]
    exact = tmp_path / "exact"
    exact.mkdir()
    (exact / "a.log").write_text(NEW)
    monkeypatch.setitem(files.LIMITS, "log", len(NEW.encode()))
    assert [r["run_id"] for r in nccl_tests.scan(str(exact))[0]] == ["nccl-tests-a.log"]


@pytest.mark.parametrize("text, verdict", [
    ("# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20", True),
    ("# Avg bus bandwidth    : 1.07929", True), ("# Collective test starting: all_reduce_perf", True),
    ("#   out-of-place    in-place", True), ("Avg bus bandwidth: 0.100 GB/s (sizes >= 1 MiB)", False),
    ("epoch 3: loss 0.2\nbusbw looks fine", False), ("", False),
])
def test_what_counts_as_nccl_tests_output(text, verdict):
    assert nccl_tests.looks_like("training log\n" + text) is verdict


def test_rows_footer_and_average_as_scalelab_prints_them():
    full = {"bytes": 1024, "count": 256, "dtype": "float32", "time_s": 1.0, "algbw_GBps": 0.05, "busbw_GBps": 0.05,
            "wrong": 0, "oop_time_s": 2e-5, "oop_algbw_GBps": 0.04, "oop_busbw_GBps": 0.07, "oop_wrong": 2}
    assert nccl_format.row_line(full).split()[5:] == ["20.00", "0.04", "0.07", "2", "1000000", "0.05", "0.05", "0"]
    in_place = {k: v for k, v in full.items() if not k.startswith("oop_")}
    line = nccl_format.row_line(dict(in_place, dtype="int8", bytes=1024, count=1024))
    assert line.split() == ["1024", "1024", "int8", "sum", "-1", "1000000", "0.05", "0.05", "0"]  # no nccl name: as is
    # the out-of-place columns left blank, 32 spaces as nccl-tests' writeBenchMarkLineNullBody prints them
    assert line == ("        1024          1024      int8     sum      -1" + " " * 32
                    + "  1000000    0.05    0.05       0")
    rows = [full, dict(in_place, wrong=1), dict(in_place, wrong=0)]
    assert nccl_format.footer(rows, "prog").splitlines() == [  # a size's column with wrong values counts once
        "# Out of bounds values : 2 FAILED", f"# Avg bus bandwidth    : {(0.07 + 0.05 * 3) / 4:g} ", "#",
        "# Collective test concluded: prog"]
    assert nccl_format.footer([dict(in_place, wrong=None)], "p").splitlines()[0] == "# Out of bounds values : 0 OK"
    assert nccl_format.avg_busbw([]) == 0.0
    log = nccl_format.format_log(rows, [], {"min_bytes": 1, "max_bytes": 2, "factor": 2, "warmup_iters": 1,
                                           "iters": 1, "check": True}, "prog", ("rid", "cpu", "gloo")).splitlines()
    assert log[:2] == ["# Collective test starting: prog", "# scalelab run_id: rid accelerator: cpu backend: gloo"]
    assert log[-1] == "# Collective test concluded: prog" and log[-7] == nccl_format.row_line(full)
