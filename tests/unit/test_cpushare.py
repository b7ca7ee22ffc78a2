"""Contention is measured, not guessed: a core loaded on purpose shows in the run's record, its last line and the
report, and an idle neighbour (a process that sleeps, like a rank waiting for the network) does not."""

import os
import subprocess
import sys
import time

import pytest

from helpers import load_results, run_script
from scalelab.measure import cpushare

SPIN = "import time\nend = time.time() + 120\nwhile time.time() < end: pass"


def _spinners(cores):
    """One busy process pinned to each of `cores` (killed by the caller)."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=lambda c=c: os.sched_setaffinity(0, {c}))
             for c in cores]
    time.sleep(0.3)  # running before the measured work starts
    return procs


def _busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.fixture
def one_core():
    """This process on one core for the test, its affinity restored after."""
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    yield core
    os.sched_setaffinity(0, before)


def _span(threads, work):
    first = threads.read()
    work()
    return cpushare.computing(first, threads.read())  # as the probe reads a window


@pytest.mark.alone  # a test beside it on the other worker would be one more neighbour on its core
def test_a_spinning_neighbour_halves_the_share_a_sleeping_one_does_not(one_core):
    threads = cpushare.Threads()
    assert any(threads.read()), "this kernel exposes no /proc/self/task/*/schedstat"
    assert cpushare.had_cpu([_span(threads, lambda: _busy(0.5))]) > 0.8  # alone (other tests may still nibble)
    spinners = _spinners([one_core])
    try:
        loaded = cpushare.had_cpu([_span(threads, lambda: _busy(1.0))])
    finally:
        for p in spinners:
            p.kill()
    assert 0.3 < loaded < 0.7, loaded  # two runnable processes on one core: about half each
    # waiting, not runnable (as a rank waiting for a peer): counts in neither figure
    assert cpushare.had_cpu([_span(threads, lambda: (time.sleep(0.5), _busy(0.2)))]) > 0.8
    threads.close()
    assert threads.read() == []  # closed: nothing to read


def test_contended_names_the_most_starved_rank():
    assert cpushare.contended([0.97, 0.52, 0.61]) == ("rank 1 had a core 52 % of the time it was ready to run: "
                                                      "other work shared its cores")
    assert cpushare.contended([0.97, 0.9]) is None and cpushare.contended(None) is None
    assert cpushare.contended([None, 0.4]).startswith("rank 1 had a core 40 %")


def _schedstat(folder, **threads):
    """A /proc/self/task lookalike: one schedstat per thread, "<ns on a core> <ns waiting> <timeslices>"."""
    for tid, fields in threads.items():
        (folder / tid[1:]).mkdir()
        (folder / tid[1:] / "schedstat").write_text(fields)
    return str(folder)


def test_a_read_gives_each_threads_figures_in_seconds(tmp_path, monkeypatch):
    # 1.5 s and 0.25 s on a core, 0.5 s and 0.125 s waiting; a thread whose file cannot be opened is not read, one
    # with a torn line reads None
    monkeypatch.setattr(cpushare, "TASKS", _schedstat(tmp_path, t101="1500000000 500000000 9\n",
                                                      t102="250000000 125000000 3\n", t103="garbage\n"))
    (tmp_path / "104").mkdir()
    threads = cpushare.Threads()
    first = threads.read()
    assert sorted(f for f in first if f) == [(0.25, 0.125), (1.5, 0.5)] and first.count(None) == 1
    (tmp_path / "102" / "schedstat").write_text("750000000 125000000 4\n")  # read again: the same files, new figures
    assert sorted(f for f in threads.read() if f) == [(0.75, 0.125), (1.5, 0.5)]
    threads.close()
    assert threads.read() == []  # closed for good: the files are not opened again behind the caller's back


def test_only_the_threads_that_computed_count_a_helper_that_woke_does_not():
    """The compute thread ran 2 ms and waited 0.05 ms; the device sampler woke, waited 0.4 ms for the core the compute
    thread held and ran 0.02 ms (under COMPUTING of 2 ms): a quiet rank, 97.6 %, not 83 %. An intra-op thread that
    ran 1 ms counts; under a neighbour the compute thread itself waits, and that counts; a thread that ended, and a
    window where nothing ran, give nothing."""
    before = [(1.0, 0.1), (5.0, 1.0), (0.5, 0.0), (3.0, 0.0)]
    after = [(1.002, 0.10005), (5.00002, 1.0004), (0.501, 0.0), None]
    assert cpushare.computing(before, after) == [pytest.approx(0.003), pytest.approx(0.00005)]
    assert cpushare.had_cpu([cpushare.computing(before, after)]) == pytest.approx(0.003 / 0.00305)
    every = [sum(b[0] - a[0] for a, b in zip(before[:3], after[:3])), sum(b[1] - a[1] for a, b in zip(before[:3],
                                                                                                    after[:3]))]
    assert cpushare.had_cpu([every]) < cpushare.QUIET  # summed over every thread: flagged for nothing
    neighbour = [(1.002, 0.102), (5.00002, 1.0004)]  # the compute thread waited as long as it ran
    assert cpushare.had_cpu([cpushare.computing(before[:2], neighbour)]) == pytest.approx(0.5)
    assert cpushare.computing(before, before) is None and cpushare.computing([], []) is None
    # a thread that ran exactly COMPUTING of the busiest one's time computed; figures kept to the microsecond
    edge = cpushare.computing([(0.0, 0.0), (0.0, 0.0)], [(1.0, 0.0), (cpushare.COMPUTING, 0.25)])
    assert edge == [1.0 + cpushare.COMPUTING, 0.25]
    assert cpushare.computing([(0.0, 0.0)], [(0.0012345678, 0.0000012345678)]) == [0.001235, 0.000001]


def test_a_window_is_none_where_the_kernel_shows_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(cpushare, "TASKS", str(tmp_path / "absent"))
    threads = cpushare.Threads()
    assert threads.read() == [] and cpushare.computing(threads.read(), threads.read()) is None
    monkeypatch.setattr(cpushare, "TASKS", _schedstat(tmp_path, t7="0 0 0\n"))  # schedstats off: nothing ran
    threads = cpushare.Threads()
    assert cpushare.computing(threads.read(), threads.read()) is None


def test_the_share_is_on_core_time_over_ready_time_summed_over_spans():
    assert cpushare.had_cpu([[3.0, 1.0]]) == 0.75  # ran 3 s, waited 1 s
    assert cpushare.had_cpu([[2.0, 0.0]]) == 1.0  # never waited
    assert cpushare.had_cpu([[3.0, 0.0], [1.0, 4.0]]) == 0.5  # 4 of 8 s: the sums, not the mean of 100 % and 20 %
    assert cpushare.had_cpu([[0.0, 0.5]]) is None  # did not run at all: no share to tell
    assert cpushare.had_cpu([[1.0, -1.0]]) is None  # counters that went back: not one thread set
    assert cpushare.had_cpu([]) is None and cpushare.had_cpu(None) is None


def test_contention_is_named_below_nine_tenths_only():
    assert cpushare.contended([0.9]) is None
    assert cpushare.contended([0.89]) == ("rank 0 had a core 89 % of the time it was ready to run: other work "
                                          "shared its cores")


@pytest.mark.slow
def test_a_run_beside_busy_cores_says_so_and_the_report_blames_contention(tmp_path):
    spinners = _spinners(sorted(os.sched_getaffinity(0)))  # every core this run may use
    try:
        proc = run_script("train.py", "--model", "mlp", "--devices", "1", "--max_steps", "300",
                          "--output_dir", tmp_path, timeout=300)
    finally:
        for p in spinners:
            p.kill()
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = load_results(tmp_path)
    share = result["timing"]["had_cpu"][0]
    assert 0.3 < share < 0.7, share
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"scalelab: ! rank 0 had a core {share * 100:.0f} % of the time it was ready to run: "
                           "other work shared its cores (host load "), last
    report = run_script("benchmark.py", "--output_dir", tmp_path).stdout
    assert f"! {result['run_id']}: rank 0 had a core {share * 100:.0f} % of the time it was ready to run" in report
