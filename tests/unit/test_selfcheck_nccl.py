"""The self-check's "one all-reduce algorithm" claim on constructed logs: NCCL's choice for the step's buckets must be
one it made for the benchmark's sizes around them (a step that averaged in the collective ran Ring where the
benchmark's sum ran NVLS)."""

from helpers import make_result
from scalelab.selfcheck_nccl import algo_name, choices, nccl_algorithm

MIB = 2**20
BUCKET = 25 * MIB + 4096  # a DDP bucket: no power of two


def gpu_run(buckets=(BUCKET, 3 * MIB)):
    r = make_result("g", 8, nodes=2)
    r["launch"].update(accelerator="gpu")
    r["ranks"] = [{"rank": k, "bucket_bytes": list(buckets)} for k in range(8)]
    return r


def line(size, algo, op="AllReduce"):
    return f"node1:42:42 [0] NCCL INFO {op}: {size} Bytes -> Algo {algo} proto Simple channel{{Lo..Hi}}={{0..15}}\n"


def log(bench: dict, step: dict, control: int = 12) -> str:
    """The job's log: the benchmark's choices, the 1-GPU run's banner, the N-GPU run's banner and its choices (with
    the loop's small control all-reduces between)."""
    text = "scalelab job 77 'sl-selfcheck' on node[1-2]\n" + "".join(line(s, a) for s, a in bench.items())
    text += "scalelab: gpt small (124M params), weak scaling, batch 8/device = 8 global, precision bf16-mixed\n"
    text += "scalelab: done in 20.1 s\n"
    text += "scalelab: gpt small (124M params), weak scaling, batch 8/device = 64 global, precision bf16-mixed\n"
    return text + "".join(line(s, a) * 3 + line(control, "Tree") for s, a in step.items())


BENCH = {MIB: "Ring", 2 * MIB: "Ring", 4 * MIB: "NVLS", 16 * MIB: "NVLS", 32 * MIB: "NVLS", 64 * MIB: "NVLS"}


def test_a_step_that_ran_the_benchmarks_algorithm_passes():
    claim, status, figure, *_ = nccl_algorithm(log(BENCH, {BUCKET: "NVLS", 3 * MIB: "Ring"}), gpu_run(), {})
    assert status == "PASS" and "25.0 MiB NVLS" in figure and "3.0 MiB Ring" in figure
    # 3 MiB lies between 2 MiB (Ring) and 4 MiB (NVLS): either is the benchmark's choice at that size
    assert nccl_algorithm(log(BENCH, {BUCKET: "NVLS", 3 * MIB: "NVLS"}), gpu_run(), {})[1] == "PASS"


def test_a_step_that_averaged_in_the_collective_and_ran_ring_where_the_benchmark_ran_nvls_fails():
    claim, status, figure, note = nccl_algorithm(log(BENCH, {BUCKET: "Ring", 3 * MIB: "Ring"}), gpu_run(), {})
    assert status == "FAIL" and figure == "25.0 MiB: step Ring, benchmark NVLS" and "AVG" in note


def test_older_nccls_numbered_choices_and_names_in_any_case_are_read_alike():
    old = "node1:42:42 [0] NCCL INFO 26218496 Bytes -> Algo 4 proto 2 time 812.5\n"
    assert choices(old) == {26218496: "NVLS"} and algo_name("RING") == "Ring" and algo_name("5") == "NVLSTree"
    assert choices(line(MIB, "Ring", op="AllGather")) == {}  # another collective's choice


def test_what_cannot_be_judged_skips_and_says_why():
    cpu = make_result("c", 2)
    assert nccl_algorithm("x", cpu, {})[1:3] == ("SKIP", "CPU run")
    assert nccl_algorithm(None, gpu_run(), {})[1:3] == ("SKIP", "no log")
    assert nccl_algorithm(log(BENCH, {BUCKET: "NVLS"}), gpu_run(), None)[1:3] == ("SKIP", "no benchmark")
    no_tuning = "NCCL INFO Using network IB\n" * 3
    assert nccl_algorithm(no_tuning, gpu_run(), {})[1:3] == ("SKIP", "no NCCL tuning lines")
    other = log(BENCH, {7 * MIB: "NVLS"})  # the step's lines are of no bucket of this run
    assert nccl_algorithm(other, gpu_run(), {})[1:3] == ("SKIP", "no tuning line of the step's buckets")
