"""Memory target: the end of a run (gather, result, teardown) needs no more host memory than training did.

Runs train.py at 2 CPU processes and reads the kernel's figure for the peak resident memory of every process over
its whole life (ru_maxrss of the waited children), against the peak each rank recorded in result.json when its
loop and validation had ended (`max_rss_bytes`). Target: the lifetime peak is within 1 % + 4 MB of the recorded
one, i.e. nothing after the loop raised it. (On a GPU the same end used to copy the model and optimizer state to
host memory inside the Trainer's teardown, before the result was written: xl, 16 GB per rank.)

    python benchmarks/end_of_run_memory.py
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {"tiny GPT": ["--config", "gpt-tiny", "--max_steps", "20"],
             "MLP 2048x2048": ["--model", "mlp", "--hidden_dims", "2048", "2048", "--max_steps", "20"]}

CHILD = """import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"""


def measure(args, out):
    """(lifetime peak of any process of the run, the ranks' recorded peaks) in bytes."""
    cmd = [sys.executable, os.path.join(ROOT, "src", "train.py"), *args, "--warmup_steps", "2", "--devices", "2",
           "--output_dir", out]
    lifetime = int(subprocess.run([sys.executable, "-c", CHILD, *cmd], check=True, capture_output=True,
                                  text=True).stdout)
    (path,) = glob.glob(os.path.join(out, "*", "result.json"))
    return lifetime, [r["max_rss_bytes"] for r in json.load(open(path))["ranks"]]


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(f"2 CPU processes, 1 core each; {os.cpu_count()} cores")
    print(f"{'workload':>14} {'lifetime peak MB':>17} {'recorded MB (rank 0, 1)':>24} {'end adds':>9} {'target':>7}")
    for name, args in WORKLOADS.items():
        lifetime, recorded = measure(args, tempfile.mkdtemp(prefix="scalelab-memory-"))
        adds = lifetime - max(recorded)
        ok = lifetime <= max(recorded) * 1.01 + 4e6
        shown = ", ".join(f"{r / 1e6:.0f}" for r in recorded)
        print(f"{name:>14} {lifetime / 1e6:>17.0f} {shown:>24} {adds / 1e6:>7.1f} MB {'met' if ok else 'MISSED':>7}")


if __name__ == "__main__":
    main()
