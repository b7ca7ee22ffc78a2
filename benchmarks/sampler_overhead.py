"""Speed target: what the device sampler costs a step, within 0.5 % of it.

Each rank samples its device from a thread beside the loop (measure/devices.py: NVML every 0.1 s on a GPU, the
process's CPU seconds every 0.5 s on a CPU); the loop itself is unchanged, but the thread wakes on the rank's cores
and takes Python's lock. This runs the same job with the sampler (scalelab's default) and without it
(SCALELAB_NO_SAMPLER=1) as interleaved pairs, sampler first in one pair and second in the next (slow phases of a
shared machine hit both alike), and prints the median step of each, the median of the pairs' ratios (with /
without; target <= 1.005) and their range (the noise), and the sampler thread's own CPU seconds per step.

    python benchmarks/sampler_overhead.py --repeats 7                      # the tiny GPT at 2 CPU devices
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
DEFAULT = ["--config", "gpt-tiny", "--max_steps", "100"]


def step_ms(args, devices, hook, out) -> tuple:
    """The median step of one run (train.py's own figure), in ms, and its sampler threads' CPU ms per step."""
    env = {**os.environ, "SCALELAB_NO_SAMPLER": "0" if hook else "1"}
    before = set(glob.glob(os.path.join(out, "*", "result.json")))
    subprocess.run([sys.executable, os.path.join(ROOT, "src", "train.py"), *args, "--devices", str(devices),
                    "--output_dir", out], check=True, capture_output=True, env=env)
    (path,) = set(glob.glob(os.path.join(out, "*", "result.json"))) - before
    r = json.load(open(path))
    busy = sum((k.get("devices") or {}).get("sampler_cpu_s") or 0 for k in r["ranks"]) / len(r["ranks"])
    return r["timing"]["step_s"]["median"] * 1e3, busy * 1e3 / max(1, r["timing"]["steps"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--args", nargs=argparse.REMAINDER, default=DEFAULT, help="train.py's flags (default: %(default)s)")
    a = p.parse_args()
    out = tempfile.mkdtemp(prefix="scalelab-sampler-")
    print(f"train.py {' '.join(a.args)} --devices {a.devices}: {a.repeats} interleaved pairs, {os.cpu_count()} cores")
    on, off, ratios, busy = [], [], [], []
    for i in range(a.repeats):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {hook: step_ms(a.args, a.devices, hook, out) for hook in order}
        on.append(got[True][0])
        off.append(got[False][0])
        busy.append(got[True][1])
        ratios.append(on[-1] / off[-1])
        print(f"  pair {i + 1}: with the sampler {on[-1]:.2f} ms, without {off[-1]:.2f} ms "
              f"({(ratios[-1] - 1) * 100:+.2f} %; its thread {busy[-1] * 1e3:.1f} us of CPU a step)", flush=True)
    ratio = statistics.median(ratios)
    share = statistics.median(busy) / statistics.median(on)
    spread = max(ratios) - min(ratios)  # the machine's noise between two runs of one job
    print(f"median step: with the sampler {statistics.median(on):.2f} ms, without {statistics.median(off):.2f} ms; "
          f"median pair ratio {ratio:.4f} ({(ratio - 1) * 100:+.2f} % of the step; range "
          f"{(min(ratios) - 1) * 100:+.2f} to {(max(ratios) - 1) * 100:+.2f} %); the thread's own CPU "
          f"{statistics.median(busy) * 1e3:.1f} us a step ({share * 100:.3f} % of it)")
    noisy = " (the pairs' noise is larger than the target)" if spread > 0.01 else ""
    print(f"target <= +0.5 %: the thread's own cost {'met' if share <= 0.005 else 'NOT met'}; end to end "
          f"{'met' if ratio <= 1.005 else 'NOT met'}{noisy}")


if __name__ == "__main__":
    main()
