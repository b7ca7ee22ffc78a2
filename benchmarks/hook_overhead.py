"""Speed target: what the timing comm hook costs a step, within 1 % of it.

scalelab times DDP's gradient all-reduce through a comm hook (train/comm.py). Any registered hook turns off DDP's
divide-while-copying into its buckets; the hook sums (ReduceOp.SUM, the benchmark's op) gradients whose loss the
loop divided by the ranks (one scalar operation instead of that pass), and works out each bucket's bytes on the
wire once. This runs the same job with the hook (scalelab's default) and without it (SCALELAB_NO_COMM_TIMING=1:
DDP's built-in all-reduce, untimed) as interleaved pairs, hook first in one pair and second in the next (slow phases
of a shared machine hit both alike), and prints the median step of each and the median of the pairs' ratios (with
/ without; target <= 1.01), and the reduce op each side's step recorded.

    python benchmarks/hook_overhead.py --repeats 7                      # the tiny GPT at 2 CPU devices
    python benchmarks/hook_overhead.py --repeats 7 --args --model mlp --num_samples 200000 --max_steps 1000
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["--config", "gpt-tiny", "--max_steps", "60"]


def step_ms(args, devices, hook, out) -> tuple:
    """(the median step of one run, train.py's own figure, in ms; the reduce op its step's gradient collective
    recorded: SUM both ways, the hook's after a divided loss, DDP's own after dividing as it copies)."""
    env = {**os.environ, "SCALELAB_NO_COMM_TIMING": "0" if hook else "1"}
    before = set(glob.glob(os.path.join(out, "*", "result.json")))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "src", "train.py"), *args, "--devices", str(devices),
                           "--output_dir", out], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"hook_overhead.py: train.py {'with' if hook else 'without'} the hook failed "
                 f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    (path,) = set(glob.glob(os.path.join(out, "*", "result.json"))) - before
    result = json.load(open(path))
    ops = {w.get("op") for w in ((result.get("fingerprint") or {}).get("wire") or {}).values()} - {None}
    return result["timing"]["step_s"]["median"] * 1e3, "+".join(sorted(ops)) or "not seen"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--args", nargs=argparse.REMAINDER, default=DEFAULT, help="train.py's flags (default: %(default)s)")
    a = p.parse_args()
    out = tempfile.mkdtemp(prefix="scalelab-hook-")
    print(f"train.py {' '.join(a.args)} --devices {a.devices}: {a.repeats} interleaved pairs, {os.cpu_count()} cores")
    on, off, ratios = [], [], []
    for i in range(a.repeats):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {hook: step_ms(a.args, a.devices, hook, out) for hook in order}
        (with_ms, with_op), (without_ms, without_op) = got[True], got[False]
        on.append(with_ms)
        off.append(without_ms)
        ratios.append(with_ms / without_ms)
        print(f"  pair {i + 1}: with the hook {with_ms:.2f} ms (op {with_op}), without {without_ms:.2f} ms "
              f"(op {without_op}) ({(ratios[-1] - 1) * 100:+.1f} %)", flush=True)
    ratio = statistics.median(ratios)
    print(f"median step: with the hook {statistics.median(on):.2f} ms, without {statistics.median(off):.2f} ms; "
          f"median pair ratio {ratio:.4f} ({(ratio - 1) * 100:+.1f} % of the step; range "
          f"{(min(ratios) - 1) * 100:+.1f} to {(max(ratios) - 1) * 100:+.1f} %); target <= +1 %: "
          f"{'met' if ratio <= 1.01 else 'NOT met'}")


if __name__ == "__main__":
    main()
