"""Speed target 3: `benchmark.py` over 10,000 result files in under 3 s.

Writes N synthetic results (realistic size: 2 ranks x 50 step times each) and times the CLI end to end.

    python benchmarks/report_speed.py --files 10000
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
from scalelab import results  # noqa: E402


def synthetic(i: int, rng: random.Random) -> dict:
    world = rng.choice([1, 2, 4, 8])
    steps = [round(rng.uniform(0.09, 0.11), 6) for _ in range(50)]  # as timing.py stores them
    data = results.envelope("training", f"synthetic-{i:05d}")
    data.update(
        status="completed", error=None,
        workload={"model": "gpt", "preset": "tiny", "batch_size": 8, "scaling": "weak",
                  "precision": "32", "describe": "gpt tiny", "params": 3323392, "seq_len": 128,
                  "tokens_per_sample": 128,
                  "group": i % 20, "batch_per_device": 8, "global_batch": 8 * world},
        launch={"launcher": "slurm", "world_size": world, "num_nodes": max(1, world // 4),
                "devices": min(world, 4), "accelerator": "cpu", "device_names": ["cpu"],
                "threads": 1},
        timing={"samples_per_s": 80.0 * world * rng.uniform(0.7, 1.0), "tokens_per_s": 10240.0 * world,
                "train_time_s": sum(steps[5:]), "step_s": {"median": 0.1}, "epoch_times_s": [5.0],
                "first_step_s": 4.0, "whole_run_s": 12.0,
                # what a real multi-device run records: the forecast's track record calibrates on it
                "comm": None if world == 1 else {"compute_s": 0.09, "allreduce_s": 0.01, "waited_s": 0.008,
                                                 "allreduce_alone_s": 0.009 * world ** 0.5, "grad_bytes": 13293568,
                                                 "bucket_bytes": [13293568], "buckets": 1, "probe_steps": 8}},
        metrics={"train_loss": 5.0, "val_loss": None, "val_acc": None},
        ranks=[{"rank": r, "step_times_s": steps, "losses": [5.0] * 50} for r in range(2)],
    )
    return data


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=10000)
    a = p.parse_args()
    folder = tempfile.mkdtemp(prefix="scalelab-report-speed-")
    rng = random.Random(0)
    for i in range(a.files):
        results.write(folder, synthetic(i, rng))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "src", "benchmark.py"), "--output_dir", folder],
                          capture_output=True, text=True)
    took = time.perf_counter() - start
    print(f"benchmark.py over {a.files:,} result files: {took:.2f} s end to end (exit {proc.returncode}, "
          f"{proc.stdout.count('Group ')} groups printed); target < 3 s")


if __name__ == "__main__":
    main()
