"""The embedded default sweep (`make demo`): the scaling ladder on one machine, then the report.

1 device → 2 devices on one node → 2 nodes × 1 device over an emulated link, at a rate where the all-reduce
costs a fifth of the step and one where it dominates; one CPU device is one core (launch/cores.py), so every rung has
the same compute per device and the ladder shows what a real cluster shows: one node scales almost linearly,
the interconnect takes the rest. The all-reduce benchmark runs over each link for the report's predicted
columns. Each run is the real `src/train.py` (under `src/emulate.py` for the nodes), exactly what a user would
type; logs go to <output_dir>/logs/. Where this machine cannot make network namespaces the link rungs are
skipped, saying why.
"""

import os
import subprocess
import sys
import time
from typing import NamedTuple, Optional

from tqdm import tqdm

from scalelab.cli import OneLineParser, positive_float, run_main
from scalelab.errors import UsageError
from scalelab.perfmodel.network import human_rate
from scalelab.report.cli import main as report_main

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN, BENCH, EMULATE = (os.path.join(SRC, f) for f in ("train.py", "allreduce_bench.py", "emulate.py"))
WORKLOADS = {
    "mlp": ["--model", "mlp", "--num_samples", "20000", "--max_epochs", "3", "--warmup_steps", "5"],
    "transformer": ["--model", "transformer", "--preset", "tiny", "--max_steps", "25", "--warmup_steps", "5"],
}
LINK_MODELS = ("transformer",)  # the MLP's gradients are 11 KB: no link rate changes its step
LINK_RATES = (2.0, 0.2)  # Gbit/s: tiny GPT's 13 MB all-reduce takes ~60 ms at the first, ~550 ms at 0.2
# the benchmark over a link: every size DDP's buckets use, few repeats (16 MiB at 0.2 Gbit/s takes 0.7 s each)
BENCH_ARGS = ["--min_bytes", "4K", "--max_bytes", "16M", "--iters", "10"]
SLOW_LINK_BENCH = ["--max_bytes", "4M", "--iters", "5", "--warmup_iters", "1"]


class Rung(NamedTuple):
    model: str  # a WORKLOADS key, or "allreduce"
    devices: int
    link_gbit: Optional[float] = None  # 2 emulated nodes × `devices` over this link; None = one node

    @property
    def name(self) -> str:
        where = f"{self.devices} device(s)" if self.link_gbit is None else f"2 nodes over {human_rate(self.link_gbit)}"
        return f"{self.model} at {where}"

    def command(self, output_dir: str) -> list:
        if self.model == "allreduce":
            script = [BENCH, *BENCH_ARGS, *(SLOW_LINK_BENCH if self.link_gbit and self.link_gbit < 1 else [])]
        else:
            script = [TRAIN, *WORKLOADS[self.model]]
        script += ["--output_dir", output_dir]
        if self.link_gbit is None:
            return [sys.executable, *script, "--devices", str(self.devices)]
        return [sys.executable, EMULATE, "--link_gbit", f"{self.link_gbit:g}", "--devices", str(self.devices),
                "--", *script]


def ladder(models, link_rates, links_ok: bool) -> list:
    rungs = [Rung(m, n) for m in models for n in (1, 2)] + [Rung("allreduce", 2)]
    if links_ok:
        rungs += [Rung(m, 1, g) for m in models if m in LINK_MODELS for g in link_rates]
        rungs += [Rung("allreduce", 1, g) for g in link_rates]
    return rungs


def links_unavailable() -> Optional[str]:
    """Why this machine cannot emulate two nodes (no namespaces, no tc, ...), or None: tried, not guessed."""
    from scalelab.launch import netns

    try:
        with netns.two_node_link(1.0):
            return None
    except UsageError as exc:
        return str(exc)


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="scalelab.demo", description=__doc__.splitlines()[0])
    p.add_argument("--output_dir", default="outputs/demo")
    p.add_argument("--models", nargs="+", choices=sorted(WORKLOADS), default=["mlp", "transformer"])
    p.add_argument("--link_gbit", type=positive_float, nargs="*", default=list(LINK_RATES),
                   help="rates of the emulated link between 2 nodes (none: skip the 2-node rungs)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logs = os.path.join(args.output_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    wants_links = bool(args.link_gbit) and any(m in LINK_MODELS for m in args.models)
    why_not = links_unavailable() if wants_links else None
    rungs = ladder(args.models, args.link_gbit, wants_links and not why_not)
    over = (f"; 2 nodes over an emulated {' and '.join(human_rate(g) for g in args.link_gbit)} link"
            if wants_links and not why_not else "")
    print(f"CPU rehearsal of the scaling ladder: {len(rungs)} runs ({', '.join(args.models)} at 1 and 2 devices on "
          f"one node{over}; 1 device = 1 core, gloo), results in {args.output_dir}/")
    if why_not:
        print(f"scalelab.demo: skipping the 2-node rungs: {why_not}", file=sys.stderr)
    start = time.time()
    for rung in tqdm(rungs, desc="runs", unit="run"):
        log = os.path.join(logs, f"{rung.name.replace(' ', '-').replace('/', '')}-"
                                 f"{time.strftime('%Y%m%d-%H%M%S')}.log")
        with open(log, "w") as fh:
            rc = subprocess.run(rung.command(args.output_dir), stdout=fh, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            with open(log) as fh:
                tail = fh.read().splitlines()[-15:]
            print("\n".join(tail), file=sys.stderr)
            print(f"scalelab.demo: error: {rung.name} failed (exit {rc}); full log: {log}", file=sys.stderr)
            return 1
    print(f"sweep took {time.time() - start:.0f} s\n")
    return report_main(["--output_dir", args.output_dir, "--plot", os.path.join(args.output_dir, "plots"),
                        "--export", os.path.join(args.output_dir, "export")])


def cli():
    """Console-script entry point (see setup.cfg)."""
    sys.exit(run_main("scalelab-demo", main))


if __name__ == "__main__":
    cli()
