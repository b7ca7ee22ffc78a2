"""The embedded default sweep (`make demo`): MLP and tiny transformer at 1 and 2 CPU processes, then the report.

Each run is the real `src/train.py` in its own processes (Lightning launches the second rank),
exactly what a user would type; logs go to <output_dir>/logs/.
"""

import os
import subprocess
import sys
import time

from tqdm import tqdm

from scalelab.cli import OneLineParser, positive_int, run_main
from scalelab.report.cli import main as report_main

TRAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train.py")
BENCH = os.path.join(os.path.dirname(TRAIN), "allreduce_bench.py")
WORKLOADS = {
    "mlp": ["--model", "mlp", "--num_samples", "20000", "--max_epochs", "3", "--warmup_steps", "5"],
    "transformer": ["--model", "transformer", "--preset", "tiny", "--max_steps", "30", "--warmup_steps", "5"],
}


def main(argv=None) -> int:
    p = OneLineParser(prog="scalelab.demo", description=__doc__.splitlines()[0])
    p.add_argument("--output_dir", default="outputs/demo")
    p.add_argument("--devices", type=positive_int, nargs="+", default=[1, 2])
    p.add_argument("--models", nargs="+", choices=sorted(WORKLOADS), default=["mlp", "transformer"])
    args = p.parse_args(argv)
    logs = os.path.join(args.output_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    jobs = [(m, n) for m in args.models for n in args.devices]
    if max(args.devices) > 1:  # the network's busbw, for the report's predicted columns
        jobs.append(("allreduce", max(args.devices)))
    start = time.time()
    print(f"CPU rehearsal of the scaling sweep: {len(jobs)} runs ({', '.join(args.models)} at "
          f"{' and '.join(map(str, args.devices))} processes, gloo), results in {args.output_dir}/")
    for model, n in tqdm(jobs, desc="runs", unit="run"):
        log = os.path.join(logs, f"{model}-{n}proc-{time.strftime('%Y%m%d-%H%M%S')}.log")
        cmd = ([sys.executable, BENCH, "--min_bytes", "4K", "--max_bytes", "16M"] if model == "allreduce"
               else [sys.executable, TRAIN, *WORKLOADS[model]]) + ["--devices", str(n), "--output_dir", args.output_dir]
        with open(log, "w") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            with open(log) as fh:
                tail = fh.read().splitlines()[-15:]
            print("\n".join(tail), file=sys.stderr)
            print(f"scalelab.demo: error: {model} at {n} process(es) failed (exit {rc}); full log: {log}",
                  file=sys.stderr)
            return 1
    print(f"sweep took {time.time() - start:.0f} s\n")
    return report_main(["--output_dir", args.output_dir, "--plot", os.path.join(args.output_dir, "plots"),
                        "--export", os.path.join(args.output_dir, "export")])


def cli():
    """Console-script entry point (see setup.cfg)."""
    sys.exit(run_main("scalelab-demo", main))


if __name__ == "__main__":
    cli()
