"""What the benchmarks over emulated links share: their flags, running demo rungs into one folder, repeated.

Each rung is scalelab.demo's: src/train.py, src/allreduce_bench.py or src/emulate.py exactly as a user types them.
"""

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from scalelab import demo  # noqa: E402


def parse_args(doc: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--link_gbit", type=float, nargs="+", default=list(demo.LINK_RATES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--output_dir", default=None, help="default: a temporary folder")
    p.add_argument("--report_only", action="store_true", help="only report an --output_dir filled before")
    return p.parse_args()


def run(prog: str, rungs: list, args: argparse.Namespace) -> str:
    """Every rung `args.repeats` times into one folder (unless --report_only); the folder."""
    out = args.output_dir or tempfile.mkdtemp(prefix=f"scalelab-{prog}-")
    if args.report_only:
        return out
    if why := demo.links_unavailable():
        sys.exit(f"{prog}.py: error: cannot emulate nodes here: {why}")
    for k in range(args.repeats):
        for rung in rungs:
            proc = subprocess.run(rung.command(out), capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                sys.exit(f"{prog}.py: error: repeat {k + 1}, {rung.name} failed: {last}")
        print(f"repeat {k + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    return out
