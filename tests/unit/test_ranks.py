"""`benchmark.py --ranks`: the per-rank view names the slow rank and its host, from records and from real runs.

The real runs slow one rank the way a thermally throttled CPU is slow: clock modulation runs the core only part
of every few milliseconds. Here the rank's process is stopped for 3 ms and continued for 1 ms (SIGSTOP/SIGCONT),
over and over, so it computes at a fraction of its speed whatever else the machine runs. A busy loop on the
rank's core was tried first and is not enough on a shared machine: the other processes move to the other core
and slow the other rank about as much (measured here: the rank beside the busy loop +7 % against the median).
"""

import contextlib
import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import ROOT, _wait_for, load_results, make_result, run_script, sacct_state, start, wait_for_banner
from scalelab import results
from scalelab.errors import UsageError
from scalelab.measure import cpushare, timing
from scalelab.report import cli, ranks


def rank_record(rank, host, compute_s, step_s=0.02, steps=30, warmup=5, every=5, **extra):
    """A rank's record as measure/timing.py reads it: probe steps take compute_s to gradients-ready."""
    probes = [i for i in range(warmup, steps) if (i - warmup) % every == every - 1]
    return {"rank": rank, "local_rank": rank % 2, "host": host, "device": "cpu", "cpu_affinity": [rank % 2],
            "step_times_s": [step_s if i not in probes else compute_s for i in range(steps)],
            "grads_ready_times_s": [compute_s if i in probes else step_s * 0.9 for i in range(steps)],
            "probe_steps": probes, "allreduce_times_s": [0.001] * steps, "buckets": [1] * steps, **extra}


def training(run_id, ranks_, nodes=2, created="2026-11-24T07:00:00+00:00", **launch):
    data = make_result(run_id, world=len(ranks_), nodes=nodes)
    data["created"] = created
    data["timing"]["warmup_steps"] = 5
    data["launch"].update(launch)
    data["ranks"] = ranks_
    return data


def write(folder, *found):
    for data in found:
        results.write(str(folder), data)
    return folder


def test_the_slow_rank_and_its_host_are_named_and_excluded():
    found = [training("r4", [rank_record(0, "node1", 0.010), rank_record(1, "node1", 0.0104),
                             rank_record(2, "node2", 0.0098), rank_record(3, "node2", 0.013)], launcher="slurm")]
    text = ranks.render(found)
    assert "rank 3 on node2 (+27 %) against the median rank's 10.2 ms" in text
    assert "sbatch --exclude=node2 <job script>" in text
    table = [line.split() for line in text.splitlines() if line.startswith(("node", " "))]
    assert table[0][:2] == ["node1", "0"] and table[2][:2] == ["node2", "2"]  # grouped by host
    assert table[3][-1] == "slow" and not any(row[-1] == "slow" for row in table[:3])


def starved(rank, host, share, **kw):
    """A rank that had a core `share` of its ready time in its probe steps' compute (two probes)."""
    return rank_record(rank, host, 0.02, probe_cpu_s=[[share, 1 - share], [share, 1 - share]], **kw)


def test_advice_fits_the_launcher_and_the_measured_contention():
    """sbatch --exclude only under SLURM; a rank that waited for its cores is named for that, not for its node."""
    quiet = [rank_record(0, "vm", 0.010), rank_record(1, "vm", 0.0101), rank_record(2, "vm", 0.013)]
    text = ranks.render([training("local", quiet, nodes=1)])
    assert "slow: rank 2 on vm (+29 %)" in text and "sbatch" not in text
    assert "not a SLURM job (local): no node to leave out" in text
    busy = [rank_record(0, "node1", 0.010), rank_record(1, "node1", 0.0101), starved(2, "node2", 0.45)]
    text = ranks.render([training("busy", busy, launcher="slurm")])
    assert "rank 2 had a core 45 % of the time it was ready to run: other work shared its cores" in text
    assert "sbatch --exclude" not in text
    row = next(line.split() for line in text.splitlines() if line.split()[:2] == ["node2", "2"])
    assert row[4:6] == ["45", "%"]  # the "had a core" column
    # a share at the threshold or above is no contention: the node is named as before
    text = ranks.render([training("fine", [*busy[:2], starved(2, "node2", 0.95)], launcher="slurm")])
    assert "sbatch --exclude=node2 <job script>" in text


def test_threshold_and_median():
    rows = [{"rank": i, "host": f"n{i}", "compute_s": c} for i, c in enumerate([1.0, 1.0, 1.08])]
    assert ranks.flag(rows, 10) == 1.0 and not any(r["slow"] for r in rows)
    ranks.flag(rows, 5)
    assert [r["slow"] for r in rows] == [False, False, True] and ranks.exclude_list(rows) == "n2"
    assert rows[2]["vs_median"] == pytest.approx(0.08)


def test_accumulated_batches_count_as_one_step():
    """--accumulate_grad_batches 2: a probe's compute is its first batch plus the second's gradients-ready."""
    rec = rank_record(0, "n1", 0.004, steps=20)
    rec["step_ends"] = list(range(1, 20, 2))  # 10 optimizer steps of 2 batches
    rec["probe_steps"] = [6, 8]
    rec["grads_ready_times_s"] = [0.003] * 20
    rec["step_times_s"] = [0.005] * 20
    data = training("acc", [rec], nodes=1)
    data["timing"]["warmup_steps"] = 2
    (row,) = ranks.rank_rows(data)
    assert row["compute_s"] == pytest.approx(0.008) and row["step_s"] == pytest.approx(0.010)


def test_without_probe_steps_no_rank_is_named():
    recs = [rank_record(0, "node1", 0.01, every=10**6), rank_record(1, "node2", 0.02, every=10**6)]
    text = ranks.render([training("np", recs)])
    assert "no probe steps" in text and "--exclude" not in text


def test_ranks_that_shared_cores_are_said_to():
    recs = [rank_record(0, "vm", 0.01), rank_record(1, "vm", 0.01), rank_record(2, "vm", 0.02)]
    text = ranks.render([training("over", recs, nodes=1, oversubscribed="oversubscribed: ranks 0 and 2 shared core 0")])
    assert "  ! oversubscribed: ranks 0 and 2 shared core 0: a rank that shared cores is slow for that reason" in text
    assert "slow: rank 2 on vm (+100 %)" in text


def test_newest_run_per_configuration_and_cli(tmp_path, capsys):
    old = training("old", [rank_record(0, "node1", 0.01), rank_record(1, "node2", 0.02)],
                   created="2026-11-24T06:00:00+00:00", launcher="slurm")
    new = training("new", [rank_record(0, "node1", 0.01), rank_record(1, "node3", 0.0105)], launcher="slurm")
    single = training("one", [rank_record(0, "node1", 0.01)], nodes=1)
    write(tmp_path, old, new, single)
    assert cli.main(["--ranks", "--output_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "new: 2 devices on 2 node(s)" in out and "old:" not in out and "one:" not in out
    assert "no rank's compute is more than 10 % above the median" in out
    assert cli.main(["--ranks", "--all_runs", "--straggler_pct", "2", "--output_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sbatch --exclude=node2 " in out and "sbatch --exclude=node3 " in out  # both runs, 2 % threshold


def test_the_per_rank_view_reads_whole_only_the_runs_it_shows(tmp_path, capsys, monkeypatch):
    """A site's folder of many nights: --ranks picks the newest run of each configuration from the index's rows and
    reads only that one's file whole (its ranks' lists); before, every result was read whole on each call (100,000
    replicated results: 70 s and 5 GB). What it prints is what a read of every file prints (--no_index)."""
    nights = [training(f"night{i:02d}", [rank_record(0, "node1", 0.01), rank_record(1, f"node{2 + i % 2}", 0.01)],
                       created=f"2026-11-{i + 1:02d}T07:00:00+00:00", launcher="slurm") for i in range(12)]
    write(tmp_path, *nights)
    assert cli.main(["--ranks", "--output_dir", str(tmp_path)]) == 0  # builds the index: every file parsed once
    whole = capsys.readouterr().out
    read = []
    load = results.load
    monkeypatch.setattr(results, "load", lambda path, *a, **k: read.append(path) or load(path, *a, **k))
    assert cli.main(["--ranks", "--output_dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == whole and "night11: 2 devices" in whole and "night10" not in whole
    assert [os.path.basename(os.path.dirname(p)) for p in read] == ["night11"]
    monkeypatch.setattr(results, "load", load)
    assert cli.main(["--ranks", "--no_index", "--output_dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == whole


def test_ranks_flag_errors_are_one_line(tmp_path):
    with pytest.raises(UsageError, match="--straggler_pct goes with --ranks"):
        cli.main(["--straggler_pct", "5", "--output_dir", str(tmp_path)])
    with pytest.raises(UsageError, match="does not take --plot"):
        cli.main(["--ranks", "--plot", str(tmp_path), "--output_dir", str(tmp_path)])
    proc = run_script("benchmark.py", "--ranks", "--straggler_pct", "-1")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


@contextlib.contextmanager
def throttled(pid: int, stop_s=0.003, run_s=0.001):
    """The process runs about run_s of every stop_s + run_s (all its threads), until the block ends. Each
    interval is drawn at random around its mean: a fixed cycle phase-locks with the ranks' steps, and a rank's
    compute can then fall inside the run windows every time (seen: both ranks' probes equal, nobody named)."""
    done = threading.Event()
    rng = random.Random(0)

    def cycle():
        while not done.is_set():
            try:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(stop_s * rng.uniform(0.5, 1.5))
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            time.sleep(run_s * rng.uniform(0.5, 1.5))

    thread = threading.Thread(target=cycle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _find_pid(output_dir, **want):
    """The train.py process writing to output_dir whose environment has these values, or None while none does."""
    for entry in Path("/proc").iterdir():
        try:
            env = dict(v.split("=", 1) for v in (entry / "environ").read_text().split("\0") if "=" in v)
            cmd = (entry / "cmdline").read_text()
        except (OSError, ValueError):
            continue
        if "train.py" in cmd and str(output_dir) in cmd and all(env.get(k) == v for k, v in want.items()):
            return int(entry.name)
    return None


@pytest.mark.slow
def test_local_run_names_the_throttled_rank(tmp_path):
    # Batch 512: a probe's compute spans several stop/run cycles (with the default batch it fit in one run window,
    # and the view named no one in 2 of 7 runs).
    proc = start(tmp_path, "--model", "mlp", "--devices", "2", "--batch_size", "512")  # 3 epochs: about 11 probes
    try:
        wait_for_banner(proc)
        pid = _wait_for("rank 1", lambda: _find_pid(tmp_path, LOCAL_RANK="1"), 120)  # rank 0 started it
        with throttled(pid):
            out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    view = run_script("benchmark.py", "--ranks", "--output_dir", tmp_path).stdout
    print(view)
    assert re.search(r"slow: rank 1 on \S+ \(\+\d+ %\)", view), view
    assert "rank 0 on" not in view and "sbatch" not in view  # a local run has no node to leave out


def _ended(env, job):
    state = sacct_state(env, job, timeout=2)
    return state if state and state not in ("PENDING", "RUNNING", "COMPLETING") else None


def _cores(pid: int, log: Path) -> str:
    """The cores the process's main thread may run on, as /proc writes them ("0", "0-1")."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        raise AssertionError(f"the rank ended before training:\n{log.read_text()[-3000:]}") from None
    return re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M).group(1)


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_view_names_the_slow_node(slurm_env, tmp_path):
    """2 nodes x 1 task; node2's rank is throttled, and the view must name node2 alone.

    This cluster's two nodes are one machine without task binding: each node's rank pins itself to core 0. Once
    pinned, node2's rank is moved (all its threads) to core 1, as a site's binding would have placed it, so the
    two ranks do not share a core; then it is throttled."""
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs cores 0 and 1")
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path)}
    job = subprocess.run(["sbatch", "--parsable", f"--output={tmp_path}/slurm-%j.out", "--ntasks-per-node=1",
                          "--cpus-per-task=1", str(ROOT / "slurm_jobs" / "multi_node_multi_gpu.sh"), "--devices",
                          "1", "--threads", "1", "--max_epochs", "30", "--batch_size", "512"],  # as the local test
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    job_log = tmp_path / f"slurm-{job}.out"
    try:
        pid = _wait_for("node2's rank", lambda: _find_pid(tmp_path, SLURM_JOB_ID=job, SLURM_PROCID="1"), 120)
        _wait_for("node2's rank pinned", lambda: _cores(pid, job_log) == "0", 120)
        subprocess.run(["taskset", "-a", "-p", "-c", "1", str(pid)], check=True, capture_output=True)
        with throttled(pid):
            state = _wait_for("the job to end", lambda: _ended(env, job), 300)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
    assert state == "COMPLETED", job_log.read_text()[-3000:]
    (result,) = load_results(tmp_path)
    hosts = {r["rank"]: (r["host"], r["cpu_affinity"]) for r in result["ranks"]}
    assert hosts == {0: ("node1", [0]), 1: ("node2", [1])}, hosts
    proc = run_script("benchmark.py", "--ranks", "--output_dir", tmp_path)
    print(f"\n$ python src/benchmark.py --ranks --output_dir outputs\n{proc.stdout}")
    assert proc.returncode == 0
    assert re.search(r"slow: rank 1 on node2 \(\+\d+ %\)", proc.stdout), proc.stdout
    assert "rank 0 on" not in proc.stdout
    # a stopped process is not ready to run: throttling leaves its share high, and node2 is the one to leave out,
    # unless other work on this machine kept the rank from its core meanwhile (then that is said instead)
    share = timing.had_cpu(result["ranks"])[1]
    if share >= cpushare.QUIET:
        assert "sbatch --exclude=node2 <job script>" in proc.stdout
    else:
        assert f"rank 1 had a core {share * 100:.0f} % of the time it was ready to run" in proc.stdout


def _cells(text: str) -> list:
    lines = text.splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[:1] + lines[2:]]


def test_one_runs_rank_table_cell_by_cell():
    def rec(rank, host, device, cores, probe_ready):  # steps 1 and 3 normal (200 and 300 ms), 2 a probe
        return {"rank": rank, "host": host, "device": device, "cpu_affinity": cores,
                "step_times_s": [1.0, 0.2, 0.9, 0.3], "grads_ready_times_s": [0.5, 0.1, probe_ready, 0.2],
                "probe_steps": [2]}
    run = training("r", [rec(2, "n2", "cuda:0", [], 0.15), rec(1, "n1", "cuda:1", [4, 5, 7], 0.10),
                         rec(0, "n1", "cuda:0", [0, 1, 2, 3], 0.12)], launcher="slurm")
    run["timing"]["warmup_steps"] = 1
    run["slurm"] = {"job_id": "42"}
    lines = ranks.run_table(run, 10.0, "pipe")
    assert lines[0] == "r: 3 devices on 2 node(s), slurm job 42"
    assert _cells(lines[1]) == [ranks.HEADERS,
                                ["n1", "0", "cuda:0", "0-3", "—", "120.0", "+0 %", "250.0", ""],
                                ["", "1", "cuda:1", "4-5,7", "—", "100.0", "-17 %", "250.0", ""],
                                ["n2", "2", "cuda:0", "—", "—", "150.0", "+25 %", "250.0", "slow"]]
    assert lines[2:] == ["  slow: rank 2 on n2 (+25 %) against the median rank's 120.0 ms",
                         "  try next without them: sbatch --exclude=n2 <job script>"]
    assert ranks.run_table(run, 30.0, "pipe")[2:] == [
        "  no rank's compute is more than 30 % above the median (120.0 ms)"]
    for r in run["ranks"]:
        r["probe_steps"] = []
    run["launch"]["oversubscribed"] = "3 ranks on 2 cores"
    del run["slurm"]
    lines = ranks.run_table(run, 10.0, "pipe")
    assert lines[0] == "r: 3 devices on 2 node(s), slurm" and _cells(lines[1])[1][5:7] == ["—", "—"]
    assert _cells(lines[1])[1][7] == "300.0"  # steps 1, 2 and 3 are all normal now: 200, 900, 300 ms
    assert lines[2:] == ["  ! 3 ranks on 2 cores: a rank that shared cores is slow for that reason, not its node",
                         "  no probe steps (--comm_probe_every 0): no rank's own compute is known, and step times "
                         "agree in DDP, so no rank can be named"]


def test_the_per_rank_view_lists_the_newest_multi_rank_run_of_each_configuration():
    old = training("old", [rank_record(0, "a", 0.01), rank_record(1, "b", 0.01)], created="2026-01-01")
    new = training("new", [rank_record(0, "a", 0.01), rank_record(1, "b", 0.01)], created="2026-01-02")
    one = make_result("one", 1)
    assert [r["run_id"] for r in ranks.newest_runs([new, old, one])] == ["new"]
    assert [r["run_id"] for r in ranks.newest_runs([new, old, one], all_runs=True)] == ["old", "new"]
    tables = [line for line in ranks.render([new, old]).splitlines() if ": 2 devices on" in line]
    assert [line.split(":")[0] for line in tables] == ["new"]  # render, too, shows the newest unless asked
    assert ranks.render([one]) == "No completed run on 2 or more devices here: the per-rank view needs one."
    text = ranks.render([old], pct=12.5)
    assert text.splitlines()[0] == ("Per rank (compute: median of the no-sync probe steps, each rank alone; step: "
                                    "median of the normal steps, which end together; flagged: compute more than "
                                    "12.5 % above the median rank)")
    assert text.splitlines()[1] == "" and text.splitlines()[2].startswith("old: 2 devices on 2 node(s), local")
    assert ranks.fmt_pct(0.456) == "46 %" and ranks.fmt_pct(None) == "—" and ranks.fmt_ms(0.0123) == "12.3"
    assert ranks.fmt_vs(0.263) == "+26 %" and ranks.fmt_vs(-0.04) == "-4 %" and ranks.fmt_vs(float("nan")) == "—"


def test_rank_rows_leave_out_warm_up_and_short_steps_and_sort_by_host_then_rank():
    def rec(**kw):
        return {"step_times_s": [0.5, 0.3, 0.2, 0.1], "grads_ready_times_s": [0.4, 0.25, 0.15, 0.05], **kw}
    bare = {"timing": {}, "ranks": [rec(rank=1, host="b", probe_steps=[0]), rec(rank=None, host="b", probe_steps=[]),
                                    rec(probe_steps=[0, 1, 2, 3])]}
    rows = ranks.rank_rows(bare)  # no warm-up recorded: step 0 counts
    assert [(r["host"], r["rank"], r["device"]) for r in rows] == [("?", None, "?"), ("b", None, "?"), ("b", 1, "?")]
    assert rows[2]["compute_s"] == 0.4 and rows[2]["step_s"] == 0.2  # steps 1-3 normal: 0.3, 0.2, 0.1
    assert rows[0]["compute_s"] == pytest.approx(0.2) and rows[0]["step_s"] is None  # every step a probe
    assert rows[1]["compute_s"] is None and rows[1]["step_s"] == pytest.approx(0.25)
    # accumulation of 2 (steps of batches 0-1, 2-3, 4): the last step is short and neither a probe nor a step
    acc = {"timing": {"warmup_steps": 1}, "ranks": [{
        "rank": 0, "host": "a", "step_ends": [1, 3, 4], "step_times_s": [0.1, 0.2, 0.1, 0.3, 0.05],
        "grads_ready_times_s": [0.1, 0.15, 0.1, 0.25, 0.04], "allreduce_times_s": [0] * 5, "buckets": [1] * 5,
        "probe_steps": [1, 2]}]}
    (row,) = ranks.rank_rows(acc)
    assert row["compute_s"] == pytest.approx(0.1 + 0.25) and row["step_s"] is None  # step 1 is the probe at warm-up


def test_flags_at_the_threshold_and_ranks_without_a_compute_figure():
    rows = [{"rank": 0, "host": "a", "compute_s": 1.0}, {"rank": 1, "host": "b", "compute_s": 1.25},
            {"rank": 2, "host": "c", "compute_s": None}, {"rank": 3, "host": "b", "compute_s": 1.0}]
    assert ranks.flag(rows, 25.0) == 1.0 and not any(r["slow"] for r in rows)  # exactly 25 % above: not more
    assert rows[2]["vs_median"] is None and rows[1]["vs_median"] == 0.25
    ranks.flag(rows, 24.0)
    assert [r["slow"] for r in rows] == [False, True, False, False] and ranks.exclude_list(rows) == "b"
    two = [{"rank": i, "host": h, "compute_s": c} for i, (h, c) in enumerate(
        [("a", 1.3), ("b", 1.3), ("a", 1.4), ("x", 1.0), ("y", 1.0), ("z", 1.0), ("w", 1.0)])]
    ranks.flag(two, 10.0)
    assert ranks.exclude_list(two) == "a,b"  # each slow host once, in the order met
    assert ranks.flag([{"compute_s": None}]) is None


def test_the_advice_for_several_starved_ranks_and_an_unknown_launcher():
    slow = [{"rank": 1, "host": "a", "had_cpu": 0.6, "vs_median": 0.3}, {"rank": 2, "host": "b", "had_cpu": 0.5}]
    assert ranks.advice(slow, "slurm") == ["  rank 1 had a core 60 %, rank 2 had a core 50 % of the time it was ready "
                                           "to run: other work shared its cores (see top or ps on a); run again when "
                                           "they are quiet"]
    quiet = [{"rank": 1, "host": "a", "had_cpu": 0.9, "slow": True}]  # at the threshold: not contention
    assert ranks.advice(quiet, "slurm") == ["  try next without them: sbatch --exclude=a <job script>"]
    assert ranks.advice(quiet, None) == [
        "  not a SLURM job (launcher unknown): no node to leave out; the slow rank's cores were its own (see the "
        "share above): look for throttling or a slower core type on that machine"]
    assert ranks.fmt_pct(0.6) == "60 %" and ranks.fmt_ms(0.0125) == "12.5"


def test_the_title_names_two_slow_ranks_and_an_unknown_launcher():
    def rec(rank, host, ready):
        return {"rank": rank, "host": host, "step_times_s": [0.3, 0.3], "grads_ready_times_s": [ready, 0.1],
                "probe_steps": [0]}
    run = training("r", [rec(0, "a", 1.0), rec(1, "b", 1.3), rec(2, "c", 1.4), rec(3, "d", 1.0)], nodes=4)
    run["timing"]["warmup_steps"] = 0
    run["launch"]["launcher"] = None
    lines = ranks.run_table(run, 10.0, "simple")
    assert lines[0] == "r: 4 devices on 4 node(s), ?"
    assert lines[2] == "  slow: rank 1 on b (+13 %), rank 2 on c (+22 %) against the median rank's 1,150.0 ms"
    text = ranks.render([run], fmt="pipe")
    assert "| host   |" in text  # the table in the format asked for
