"""The embedded default sweep (`make demo`): the scaling ladder on one machine, then the report.

1 device → 2 devices on one node → 2 nodes × 1 device over an emulated link, at a rate where the all-reduce
costs a fifth of the step and one where it dominates; one CPU device is one core (launch/cores.py), so every rung has
the same compute per device and the ladder shows what a real cluster shows: one node scales almost linearly,
the interconnect takes the rest. The all-reduce benchmark runs over each link for the report's predicted
columns. Each run is the real training entry point (`python -m scalelab.train`, what src/train.py runs; under
`python -m scalelab.launch.emulate` for the nodes), from a checkout or an installed wheel alike; logs go to
<output_dir>/logs/. Where this machine cannot make network namespaces the link rungs are
skipped, saying why.
"""

import os
import subprocess
import sys
import time
from typing import NamedTuple, Optional

from tqdm import tqdm

from scalelab import config, entry
from scalelab.entry import GBIT, OneLineParser, run_main
from scalelab.errors import UsageError
from scalelab.perfmodel.network import human_rate
from scalelab.report.cli import main as report_main
from scalelab.workloads import gpt, mlp

# the entry points as modules: they run wherever scalelab imports (a checkout's src/ or an installed wheel)
TRAIN, BENCH, EMULATE = (["-m", m] for m in ("scalelab.train", "scalelab.bench", "scalelab.launch.emulate"))
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # put on PYTHONPATH for the runs


class Part(NamedTuple):
    """A workload of the ladder: what it runs (the named config the sbatch scripts run) and which rungs take it."""
    flags: list
    over_links: bool  # its all-reduce is long enough for a link's rate to change its step: it takes the 2-node rungs
    follows_precision: bool  # --precision reaches it (the MLP trains in fp32 anywhere, as on GPUs)


# by the workload's name (--models): the MLP's gradients are 11 KB (no link rate changes its step), the GPT's 13 MB
WORKLOADS = {mlp.SPEC.name: Part(["--config", "mlp"], over_links=False, follows_precision=False),
             gpt.SPEC.name: Part(["--config", "gpt-tiny"], over_links=True, follows_precision=True)}
LINK_RATES = (2.0, 0.2)  # Gbit/s: tiny GPT's 13 MB all-reduce takes ~60 ms at the first, ~550 ms at 0.2
# the benchmark over a link: every size DDP's buckets use, few repeats (16 MiB at 0.2 Gbit/s takes 0.7 s each)
BENCH_ARGS = ["--min_bytes", "4K", "--max_bytes", "16M", "--iters", "10"]
SLOW_LINK_BENCH = ["--max_bytes", "4M", "--iters", "5", "--warmup_iters", "1"]
# A lever sweep (--lever): the GPT at 1 device and over each link, per setting; fewer steps (K=16 makes a step
# 16 batches): 2 warm-up steps, then probes at steps 5 and 8 and 6 timed steps.
LEVER_MODEL = gpt.SPEC.name
LEVER_WORKLOAD = [*WORKLOADS[LEVER_MODEL].flags, "--max_steps", "10", "--warmup_steps", "2"]
LEVER_PROBES = ["--comm_probe_every", "3"]
SHARDED_COLLECTIVES = ("all_gather", "reduce_scatter")  # what an FSDP step runs instead of DDP's all-reduce
# the levers --lever sweeps: those that take a value (--static_graph is a switch, on or off)
# Each training rung twice: the report's 80 % bands stand on the scatter between repeats (one degree of freedom per
# configuration, 6 in all here), for ~80 s more on 2 cores; a third pass would add 6 more for another ~80 s.
REPEATS = 2
SWEPT_LEVERS = tuple(name for name, default in config.LEVER_DEFAULTS.items() if not isinstance(default, bool))


class Rung(NamedTuple):
    model: str  # a WORKLOADS key, or "allreduce"
    devices: int
    link_gbit: Optional[float] = None  # 2 emulated nodes × `devices` over this link; None = one node
    lever: tuple = ()  # ("--comm_hook", "bf16"): one setting of a lever sweep (LEVER_MODEL's shorter run)
    precision: str = "32"  # of a workload that follows it (--precision bf16-mixed: a GPU's default)

    @property
    def name(self) -> str:
        where = f"{self.devices} device(s)" if self.link_gbit is None else f"2 nodes over {human_rate(self.link_gbit)}"
        if self.model == "allreduce" and self.lever:  # the benchmark of another collective: named by it
            return f"{self.lever[1]} at {where}"
        return f"{self.model} at {where}" + (f" with {self.lever[0][2:]} {self.lever[1]}" if self.lever else "")

    def command(self, output_dir: str) -> list:
        if self.model == "allreduce":  # lever: ("--collective", "all_gather") for another collective than it
            script = [*BENCH, *BENCH_ARGS, *(SLOW_LINK_BENCH if self.link_gbit and self.link_gbit < 1 else []),
                      *self.lever]
        elif self.lever:
            # FSDP takes no probe step (config._check_strategy): the sweep's probe cadence is DDP's
            probes = [] if self.lever == ("--strategy", "fsdp") else LEVER_PROBES
            script = [*TRAIN, *LEVER_WORKLOAD, *probes, *self.lever]
        else:
            script = [*TRAIN, *WORKLOADS[self.model].flags]
        if self.model != "allreduce" and WORKLOADS[self.model].follows_precision and self.precision != "32":
            script += ["--precision", self.precision]
        script += ["--output_dir", output_dir]
        if self.link_gbit is None:
            return [sys.executable, *script, "--devices", str(self.devices)]
        return [sys.executable, *EMULATE, "--link_gbit", f"{self.link_gbit:g}", "--devices", str(self.devices),
                "--", *script]


def ladder(models, link_rates, links_ok: bool, precision: str = "32", repeats: int = 1) -> list:
    """The rungs in order; with repeats > 1 the training rungs run again, pass after pass (a repeat minutes later,
    not back to back: the scatter the report's bands are built from is the one between runs)."""
    rungs = [Rung(m, n, precision=precision) for m in models for n in (1, 2)] + [Rung("allreduce", 2)]
    if links_ok:
        rungs += [Rung(m, 1, g, precision=precision) for m in models if WORKLOADS[m].over_links for g in link_rates]
        rungs += [Rung("allreduce", 1, g) for g in link_rates]
    return rungs + [r for _ in range(repeats - 1) for r in rungs if r.model != "allreduce"]


def lever_rungs(lever: tuple, link_rates, precision: str = "32") -> list:
    """One lever at a fixed shape: LEVER_MODEL at 1 device and at 2 nodes over each link, for each setting; the
    all-reduce benchmark over each link, and where FSDP is swept its all-gather and reduce-scatter (the report
    prices its step with them: gloo's reduce-scatter costs a whole all-reduce)."""
    name, values = lever
    collectives = [()] + ([("--collective", c) for c in SHARDED_COLLECTIVES] if "fsdp" in values else [])
    return ([Rung(LEVER_MODEL, n, g, (f"--{name}", v), precision) for v in values for n, g in [(1, None)] +
             [(1, g) for g in link_rates]] + [Rung("allreduce", 1, g, c) for c in collectives for g in link_rates])


def runs_of(rungs: list, training: str) -> str:
    """'9 runs: 6 training (...) and 3 of the all-reduce benchmark': the report then counts the 6 only."""
    bench = sum(r.model == "allreduce" for r in rungs)
    return f"{len(rungs)} runs: {len(rungs) - bench} training ({training}) and {bench} of the all-reduce benchmark"


def repeated(repeats: int) -> str:
    """How often each training rung runs, and why (the report's 80 % bands stand on the scatter between them)."""
    return "" if repeats == 1 else f"; each {'twice' if repeats == 2 else f'{repeats} times'}: the run-to-run scatter"


def parse_lever(text: str) -> tuple:
    """'accumulate_grad_batches=1,4,16' -> ('accumulate_grad_batches', ['1', '4', '16']), each value checked as
    train.py would check it."""
    name, _, values = text.partition("=")
    if name not in SWEPT_LEVERS or not values:
        raise UsageError(f"--lever {text!r}: expected NAME=V1,V2,... with NAME one of {', '.join(SWEPT_LEVERS)}")
    values = values.split(",")
    for value in values:
        config.parse_config([*LEVER_WORKLOAD, f"--{name}", value])
    return name, values


def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bf16 itself (AVX512-BF16 or AMX, as the kernel lists its flags, which oneDNN uses
    under torch's CPU autocast); elsewhere bf16 is emulated, and slower than fp32."""
    try:
        with open(cpuinfo) as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def links_unavailable() -> Optional[str]:
    """Why this machine cannot emulate two nodes (no namespaces, no tc, ...), or None: tried, not guessed."""
    from scalelab.launch import netns

    try:
        with netns.emulated_nodes(2, 1.0):
            return None
    except UsageError as exc:
        return str(exc)


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="scalelab.demo", description=__doc__.splitlines()[0])
    p.add_argument("--output_dir", default="outputs/demo")
    p.add_argument("--models", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    p.add_argument("--link_gbit", type=GBIT, nargs="*", default=list(LINK_RATES),
                   help="rates of the emulated link between 2 nodes (none: skip the 2-node rungs)")
    p.add_argument("--precision", choices=("32", "bf16-mixed"), default="32",
                   help="the GPT's precision: bf16-mixed rehearses a GPU's default (autocast at every scale; the "
                        "MLP stays fp32, as on GPUs); 32, the default, gives the same figures on any CPU (docs/10)")
    p.add_argument("--repeats", type=entry.REPEATS, default=REPEATS,
                   help=f"runs of each training rung of the ladder (default {REPEATS}: the report's 80 %% bands are "
                        "built from the scatter between repeats; 1 leaves them to an assumed scatter)")
    p.add_argument("--lever", type=parse_lever, metavar="NAME=V1,V2,...",
                   help="instead of the ladder, sweep one lever at a fixed shape (the GPT at 1 device and 2 nodes "
                        f"over each --link_gbit), e.g. accumulate_grad_batches=1,4,16 or comm_hook=none,bf16; "
                        f"NAME: {', '.join(SWEPT_LEVERS)}")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logs = os.path.join(args.output_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    wants_links = bool(args.link_gbit) and (args.lever or any(WORKLOADS[m].over_links for m in args.models))
    why_not = links_unavailable() if wants_links else None
    over = (f"2 nodes over an emulated {' and '.join(human_rate(g) for g in args.link_gbit)} link"
            if wants_links and not why_not else "")
    if args.lever:
        if not over:
            raise UsageError(f"--lever needs the emulated link (--link_gbit RATE): {why_not or 'no rate given'}")
        rungs = lever_rungs(args.lever, args.link_gbit, args.precision)
        what = (f"the tiny GPT at 1 device and {over}, for {args.lever[0]} = {', '.join(args.lever[1])}")
        print(f"CPU rehearsal of one lever: {runs_of(rungs, what)}; 1 device = 1 core, gloo; results in "
              f"{args.output_dir}/")
    else:
        rungs = ladder(args.models, args.link_gbit, wants_links and not why_not, args.precision, args.repeats)
        what = f"{', '.join(args.models)} at 1 and 2 devices on one node{'; ' + over if over else ''}" + (
            f"; the GPT in {args.precision}" if args.precision != "32" else "") + repeated(args.repeats)
        print(f"CPU rehearsal of the scaling ladder: {runs_of(rungs, what)}; 1 device = 1 core, gloo; results in "
              f"{args.output_dir}/")
    if why_not:
        print(f"scalelab.demo: skipping the 2-node rungs: {why_not}", file=sys.stderr)
    if args.precision == "bf16-mixed" and not native_bf16():
        print("scalelab.demo: warning: this CPU has no native bf16 (AVX512-BF16 or AMX): bf16 is emulated here, "
              "slower than fp32; the path is a GPU's, the figures are not", file=sys.stderr)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (PKG_PARENT, os.environ.get("PYTHONPATH")) if p)}
    start = time.time()
    for rung in tqdm(rungs, desc="runs", unit="run"):
        log = os.path.join(logs, f"{rung.name.replace(' ', '-').replace('/', '')}-"
                                 f"{time.strftime('%Y%m%d-%H%M%S')}.log")
        with open(log, "w") as fh:
            rc = subprocess.run(rung.command(args.output_dir), stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
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
    sys.exit(run_main("scalelab.demo", main))


if __name__ == "__main__":
    cli()
