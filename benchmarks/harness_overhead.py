"""Speed targets 1 and 2: harness overhead vs a plain DDP loop, and honest whole-run clocks.

Runs the tiny GPT (and, with `--workloads gpt-tiny mlp`, the MLP, whose 1 ms step shows per-step cost the most)
through scalelab (`src/train.py`) and through benchmarks/plain_ddp.py (the same model, batch and data in a bare
torch loop), at 1 and 2 CPU processes (one pinned core each), as interleaved pairs (plain,
then scalelab, `--repeats` times: slow phases of a shared machine hit both alike). Prints the median tokens/s of
each, the median of the pairs' ratios (target >= 0.99), and scalelab's recorded whole-run time against the wall
time measured from outside (target within 5 %).

    python benchmarks/harness_overhead.py --repeats 5
    python benchmarks/harness_overhead.py --repeats 5 --workloads mlp
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import plain_ddp  # noqa: E402

# workload: (train.py's flags, plain_ddp's model, steps, warm-up, throughput field); the same batch in both loops
WORKLOADS = {"gpt-tiny": (["--config", "gpt-tiny"], "gpt-tiny", None, None, "tokens_per_s"),
             # the MLP's 1 ms step shows a loop's per-step cost the most; probes off: plain_ddp has none
             "mlp": (["--model", "mlp", "--num_samples", "200000", "--comm_probe_every", "0", "--logger", "none"],
                     "mlp", 1000, 50, "samples_per_s")}


def scalelab_run(workload, procs, steps, warmup, out):
    flags, _, _, _, field = WORKLOADS[workload]
    cmd = [sys.executable, os.path.join(ROOT, "src", "train.py"), *flags,
           "--max_steps", str(steps), "--warmup_steps", str(warmup), "--devices", str(procs), "--output_dir", out]
    before = set(glob.glob(os.path.join(out, "*", "result.json")))
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    (path,) = set(glob.glob(os.path.join(out, "*", "result.json"))) - before
    timing = json.load(open(path))["timing"]
    return timing[field], timing["whole_run_s"], wall


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=30, help="GPT steps (the MLP runs 1,000)")
    p.add_argument("--warmup", type=int, default=5, help="GPT warm-up steps (the MLP: 50)")
    p.add_argument("--workloads", nargs="+", choices=tuple(WORKLOADS), default=["gpt-tiny"],
                   help="gpt-tiny: tiny GPT, batch 8 (the target); mlp: the spiral MLP, batch 64")
    a = p.parse_args()
    out = tempfile.mkdtemp(prefix="scalelab-overhead-")
    for workload in a.workloads:
        steps, warmup = WORKLOADS[workload][2] or a.steps, WORKLOADS[workload][3] or a.warmup
        print(f"{workload}: {steps} steps ({warmup} warm-up), {a.repeats} interleaved pairs, {os.cpu_count()} cores; "
              f"throughput in {WORKLOADS[workload][4].replace('_per_s', '/s')}")
        compare(workload, steps, warmup, a.repeats, out)


def compare(workload, steps, warmup, repeats, out):
    print(f"{'procs':>5} {'plain':>12} {'scalelab':>15} {'pair ratios (median [min-max])':>31} "
          f"{'recorded s':>11} {'wall s':>7} {'clock err':>9}")
    for procs in (1, 2):
        plain, ours, ratios, errs, rec, walls = [], [], [], [], [], []
        for _ in range(repeats):
            plain.append(plain_ddp.measure(procs, steps, warmup, model=WORKLOADS[workload][1]))
            tps, recorded, wall = scalelab_run(workload, procs, steps, warmup, out)
            ours.append(tps)
            ratios.append(tps / plain[-1])
            rec.append(recorded)
            walls.append(wall)
            errs.append(abs(recorded - wall) / wall)
        spread = f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
        print(f"{procs:>5} {statistics.median(plain):>12,.0f} {statistics.median(ours):>15,.0f} {spread:>31} "
              f"{statistics.median(rec):>11.2f} {statistics.median(walls):>7.2f} {max(errs) * 100:>8.1f}%")


if __name__ == "__main__":
    main()
