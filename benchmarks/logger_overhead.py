"""Speed target of the loggers: `--logger csv` adds at most 1 % to the step time of `--logger none`.

Two measurements. End to end: the same train.py run with each logger, alternating, `--repeats` times; prints the
median over repeats of each run's median step time (from its result.json) and their ratio. Direct: the per-step
cost of what the logger adds (train.metrics.StepMetrics turning the timer's figures into a row, Lightning's
CSVLogger buffering it and writing the file every 100 steps), timed alone over many steps, and that cost as a share
of the measured step time. On a small shared CPU the end-to-end ratio moves by more than 1 % from run to run; the
direct cost is the one that resolves the target.

    python benchmarks/logger_overhead.py --repeats 5
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))
WORKLOADS = {"mlp": ["--config", "mlp"], "gpt-tiny": ["--config", "gpt-tiny"]}


def step_ms(workload, logger, steps, out):
    """One train.py run: its median step time (ms) as its result.json records it."""
    cmd = [sys.executable, os.path.join(ROOT, "src", "train.py"), *WORKLOADS[workload], "--max_steps", str(steps),
           "--max_epochs", "100", "--warmup_steps", "10", "--logger", logger, "--output_dir", out]
    before = set(glob.glob(os.path.join(out, "*", "result.json")))
    subprocess.run(cmd, check=True, capture_output=True)
    (path,) = set(glob.glob(os.path.join(out, "*", "result.json"))) - before
    return json.load(open(path))["timing"]["step_s"]["median"] * 1e3


def callback_us(steps, folder):
    """Per-step cost (microseconds) of StepMetrics + CSVLogger, with a stand-in for the step clock's lists."""
    from lightning.pytorch.loggers import CSVLogger

    from scalelab.train.metrics import StepMetrics

    t = SimpleNamespace(step_times=[], ready_times=[], comm_times=[], step_ends=[], probe_steps=[], losses=[])
    logger = CSVLogger(folder, name="", version="")
    cb = StepMetrics(t, [logger], 64, 0, 2, warmup_steps=10)
    cb.log_hyperparams({"workload": {"model": "mlp"}})
    spent = 0.0
    for i in range(steps):
        t.step_times.append(0.001)  # what the clock appends when it reads a step (not part of the logger's cost)
        t.ready_times.append(0.0008)
        t.comm_times.append(0.0002)
        t.step_ends.append(i)
        t.losses.append(0.5)
        if i % 5 == 4:
            t.probe_steps.append(i)
        start = time.perf_counter()
        cb.flush()  # the loop flushes every SYNC_EVERY steps; here every step: an upper bound
        spent += time.perf_counter() - start
    start = time.perf_counter()
    logger.finalize("success")  # the last rows to disk: once per run, counted per step here too
    return (spent + time.perf_counter() - start) / steps * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--workloads", nargs="+", choices=tuple(WORKLOADS), default=list(WORKLOADS))
    a = p.parse_args()
    out = tempfile.mkdtemp(prefix="scalelab-logger-")
    cost = statistics.median(callback_us(5000, os.path.join(out, f"direct{i}")) for i in range(5))
    print(f"direct: StepMetrics + CSVLogger cost {cost:.1f} us per step (median of 5 x 5000 steps)")
    print(f"end to end: 1 CPU process, {a.steps} steps (10 warm-up), {a.repeats} repeats alternating, "
          f"{os.cpu_count()} cores")
    print(f"{'workload':>9} {'none ms':>9} {'csv ms':>9} {'csv/none':>9} {'direct/step':>12} {'runs none':>24}")
    for workload in a.workloads:
        runs = {"none": [], "csv": []}
        for _ in range(a.repeats):
            for logger in ("none", "csv"):
                runs[logger].append(step_ms(workload, logger, a.steps, out))
        none, csv = statistics.median(runs["none"]), statistics.median(runs["csv"])
        spread = f"{min(runs['none']):.3f}-{max(runs['none']):.3f} ms"
        print(f"{workload:>9} {none:>9.3f} {csv:>9.3f} {csv / none:>9.3f} {cost / 1e3 / none * 100:>11.2f}% "
              f"{spread:>24}")


if __name__ == "__main__":
    main()
