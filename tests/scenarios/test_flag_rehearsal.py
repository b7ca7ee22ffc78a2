"""Every flag that changes what a step runs, rehearsed on CPU at 1 and 2 devices: each combination's steps ran what
its flags ask (observed in its fingerprint, not read from its configuration), and 1 and 2 devices ran the same job.

A flag the CPU can take and no test takes is a path no one has seen: --compile once timed eager steps for a whole
release while its fingerprint said compiled. The six flags below have 96 combinations, 44 of them allowed; ROWS
holds 7 that cover every pair of settings two flags can take together (all-pairs: a fault that needs two flags
to show shows in some row; `test_the_rows_cover_every_pair_the_flags_allow` proves the cover). allpairspy
generates such tables, but with a filter for the combinations config refuses it left pairs out (static_graph on
never appeared), so the table is written here and its cover checked. Each row runs the tiny GPT for 6 steps (3 of
warm-up; the last of them observed) at 1 and at 2 devices: 14 runs. (All defaults, the run every other scenario
makes, is no row: it adds no pair.)
"""

import concurrent.futures
import itertools

import pytest

from helpers import load_results, run_script

pytestmark = pytest.mark.slow
FLAGS = ("precision", "compile", "strategy", "comm_hook", "accumulate_grad_batches", "static_graph")
SETTINGS = {"precision": ("32", "bf16-mixed"), "compile": (False, True), "strategy": ("ddp", "fsdp"),
            "comm_hook": ("none", "bf16", "powersgd"), "accumulate_grad_batches": (1, 2),
            "static_graph": (False, True)}
ROWS = [  # precision, compile, strategy, comm_hook, accumulate, static_graph
    # --compile where it shares a graph: Inductor's cold compile (about 40 s a world size here) is paid by 2 graphs
    ("bf16-mixed", True, "ddp", "bf16", 1, True),
    ("bf16-mixed", True, "ddp", "powersgd", 2, False),
    ("32", True, "fsdp", "none", 2, False),
    ("32", False, "ddp", "bf16", 2, False),
    ("32", False, "ddp", "powersgd", 1, True),
    ("bf16-mixed", False, "fsdp", "none", 1, False),
    ("bf16-mixed", False, "ddp", "none", 1, True),
]
GPT = ["--model", "gpt", "--preset", "tiny", "--batch_size", "4", "--max_steps", "6", "--warmup_steps", "3"]
MATMULS = {"32": ["float32"], "bf16-mixed": ["bfloat16"]}


def allowed(row: dict) -> bool:
    """What config.finalize takes: FSDP has no DDP hook nor static graph; a static graph no accumulation."""
    if row["strategy"] == "fsdp" and (row["comm_hook"] != "none" or row["static_graph"]):
        return False
    return not (row["static_graph"] and row["accumulate_grad_batches"] > 1)


def test_the_rows_cover_every_pair_the_flags_allow():
    """Every pair of settings of two flags that some allowed combination holds is in some row, and every row is
    allowed (config would refuse it in one line, and the rehearsal would rehearse nothing)."""
    rows = [dict(zip(FLAGS, row)) for row in ROWS]
    assert all(allowed(row) for row in rows)
    every = [dict(zip(FLAGS, combo)) for combo in itertools.product(*SETTINGS.values())]
    for a, b in itertools.combinations(FLAGS, 2):
        possible = {(c[a], c[b]) for c in every if allowed(c)}
        covered = {(r[a], r[b]) for r in rows}
        assert possible <= covered, (a, b, sorted(possible - covered, key=str))


def flags(row: dict) -> list:
    out = ["--precision", row["precision"], "--strategy", row["strategy"],
           "--accumulate_grad_batches", row["accumulate_grad_batches"]]
    out += ["--compile"] * row["compile"] + ["--static_graph"] * row["static_graph"]
    return out + (["--comm_hook", row["comm_hook"]] if row["comm_hook"] != "none" else [])


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """{(row index, devices): result} for every row at 1 and 2 devices, two runs at a time: no test here reads a
    time, only what each step ran (a neighbour slows a run, never changes its fingerprint or its wire), and the
    14 runs take the most of any fixture one by one."""
    out = tmp_path_factory.mktemp("rehearsal")

    def rehearse(job):
        i, n = job
        folder = out / f"row{i}-{n}"
        proc = run_script("train.py", *GPT, *flags(dict(zip(FLAGS, ROWS[i]))), "--devices", n, "--output_dir",
                          folder, timeout=400)
        assert proc.returncode == 0, (ROWS[i], n, proc.stdout[-2000:] + proc.stderr[-3000:])
        (result,) = load_results(folder)
        return job, result

    # each 2-device run picks its own free port: one a shell exported (MASTER_PORT) would be both runs' at once
    with pytest.MonkeyPatch.context() as env, concurrent.futures.ThreadPoolExecutor(2) as pool:
        for name in ("MASTER_PORT", "MASTER_ADDR"):
            env.delenv(name, raising=False)
        futures = [pool.submit(rehearse, (i, n)) for i in range(len(ROWS)) for n in (1, 2)]
        try:
            return dict(future.result() for future in futures)
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the first failure ends the fixture: the runs queued are not run
            raise


@pytest.mark.parametrize("i", range(len(ROWS)), ids=["-".join(map(str, row)) for row in ROWS])
def test_each_combination_runs_what_its_flags_ask_and_the_same_job_at_1_and_2_devices(rehearsal, i):
    from scalelab import fingerprint

    row = dict(zip(FLAGS, ROWS[i]))
    one, two = rehearsal[i, 1], rehearsal[i, 2]
    for run in (one, two):
        fp = run["fingerprint"]
        assert run["status"] == "completed" and fp["same_on_ranks"], run.get("error")
        assert fp["matmul_dtypes"] == MATMULS[row["precision"]]
        assert fp["param_dtypes"] == fp["grad_dtypes"] == ["float32"]
        assert fingerprint.ran_compiled(fp) is row["compile"] and fp["steps_after_warmup"] == 3, fp
        assert fingerprint.asked_differences(fp, run["workload"]["compile"]) == []
        assert run["metrics"]["train_loss"] == pytest.approx(run["metrics"]["train_loss"])  # finite, not nan
    assert fingerprint.differences(one["fingerprint"], two["fingerprint"]) == [], (row, one["fingerprint"],
                                                                                   two["fingerprint"])
    assert one["fingerprint"]["wire"] == {}  # one device: no collective
    wire, grad_bytes = dict(two["fingerprint"]["wire"]), two["ranks"][0]["grad_bytes"]
    if row["static_graph"]:  # DDP's static graph rebuilds its buckets in an early step and broadcasts their order
        assert wire.pop("broadcast_")["dtype"] == "int32"
    assert {entry.get("op") for entry in wire.values()} - {None} == {"SUM"}  # what the benchmark measures
    if row["strategy"] == "fsdp":  # each of the 5 units' gradients reduce-scattered once a step, however many batches
        assert set(wire) == {"_allgather_base_", "_reduce_scatter_base_"}
        assert wire["_reduce_scatter_base_"]["calls"] == 5
        return
    assert set(wire) == {"allreduce_"}
    sent = wire["allreduce_"]
    if row["comm_hook"] == "powersgd":  # compressing by the observed step (PowerSGD starts at step 2); its later
        # all-reduces run in gloo's completion threads, where the observer's mode (thread-local) does not see them
        assert sent["dtype"] == "float32" and sent["bytes"] < grad_bytes / 4
    else:  # one bucket, once a step
        want = ("bfloat16", grad_bytes // 2) if row["comm_hook"] == "bf16" else ("float32", grad_bytes)
        assert (sent["dtype"], sent["bytes"], sent["calls"]) == (*want, 1)


def test_the_report_finds_each_combination_the_same_job_at_both_scales(rehearsal, tmp_path):
    """Each row's two runs make one scaling group (its flags are its key): the report names no run `≠ job`."""
    import json

    out = tmp_path / "all"
    for result in rehearsal.values():
        folder = out / result["run_id"]
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps(result))
    proc = run_script("benchmark.py", "--output_dir", out, "--export", out / "export")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "export" / "summary.json").read_text())
    twos = [c for c in summary["configurations"] if c["world_size"] == 2]
    assert len(twos) == len(ROWS) and all(c["job_differs"] == "" for c in twos), [c["job_differs"] for c in twos]
    assert "≠ job" not in proc.stdout


def test_every_fresh_result_fits_the_published_schema(rehearsal):
    """What train.py writes now, under every combination of the flags that change a step, is a result the published
    JSON Schema (python -m scalelab.record) accepts, checked by an independent validator."""
    import jsonschema

    from scalelab import record, workloads

    validator = jsonschema.Draft202012Validator(record.json_schema())
    options = {f"workload.{name}" for spec in workloads.REGISTRY.values() for name in spec.identity}
    for (i, n), result in rehearsal.items():
        errors = list(validator.iter_errors(result))
        assert not errors, (ROWS[i], n, ".".join(map(str, errors[0].absolute_path)), errors[0].message[:200])
        # and every field it holds is declared (a reader learns them from record/), but its workload's options
        assert set(record.undeclared(result)) <= options, (ROWS[i], n, set(record.undeclared(result)) - options)
