"""The levers' targets: the model follows accumulation and compression, and compression buys what it promises.

Runs `--repeats` times, into one folder, the demo's lever sweeps (scalelab.demo's rungs: src/train.py under
src/emulate.py, exactly as a user types them): --accumulate_grad_batches 1, 4, 16 and --comm_hook bf16, the tiny
GPT at 1 device and at 2 nodes over each emulated link; then the report's own pipeline (report.cli.build,
medians of the repeats) gives:

  prediction   per lever setting and rate: predicted ÷ measured all-reduce per optimizer step (target within
               15 %), and the measured 2-node efficiency inside the predicted range
  bytes        the bf16 hook's bytes on the wire ÷ the buckets' bytes (target 0.5, recorded per bucket)
  bf16 time    the bf16 hook's measured all-reduce ÷ no hook's, on the slowest link (target <= 0.6)

    python benchmarks/levers.py --repeats 3          # about 7 minutes per repeat on 2 cores
    python benchmarks/levers.py --output_dir outputs/levers --report_only
"""

import argparse
import os
import subprocess
import sys
import tempfile

from tabulate import tabulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from scalelab import demo  # noqa: E402
from scalelab.perfmodel.network import human_rate  # noqa: E402
from scalelab.report.cli import build  # noqa: E402

SWEEPS = (("accumulate_grad_batches", ["1", "4", "16"]), ("comm_hook", ["bf16"]))  # K=1 is the hook's "none"


def rungs(rates) -> list:
    out = [r for lever in SWEEPS for r in demo.lever_rungs(lever, rates)]
    return list({r.name: r for r in out}.values())  # one all-reduce benchmark per link


def run_all(rates, repeats: int, out: str):
    if why := demo.links_unavailable():
        sys.exit(f"levers.py: error: cannot emulate nodes here: {why}")
    for k in range(repeats):
        for rung in rungs(rates):
            proc = subprocess.run(rung.command(out), capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                sys.exit(f"levers.py: error: repeat {k + 1}, {rung.name} failed: {last}")
        print(f"repeat {k + 1}/{repeats} done", file=sys.stderr, flush=True)


def setting(r) -> str:
    return "bf16 hook" if r["comm_hook"] == "bf16" else f"K = {int(r['accumulate_grad_batches'])}"


def linked(scaling, gbit):
    return scaling[(scaling["nodes"] > 1) & (scaling["link_gbit"] == gbit)]


def predictions(scaling, rates) -> list:
    rows = []
    for gbit in rates:
        for _, r in linked(scaling, gbit).sort_values(["comm_hook", "accumulate_grad_batches"]).iterrows():
            ratio = r["predicted_allreduce_s"] / r["allreduce_s"]
            lo, hi = r["predicted_efficiency_no_overlap"], r["predicted_efficiency_overlap"]
            inside = lo - 0.02 <= r["efficiency"] <= hi + 0.02  # a rounding's slack: the table shows whole %
            rows.append([setting(r), human_rate(gbit), f"{r['runs']:.0f}", f"{r['step_ms']:,.0f}",
                         f"{r['allreduce_s'] * 1e3:.1f}", f"{r['predicted_allreduce_s'] * 1e3:.1f}", f"{ratio:.2f}",
                         f"{r['efficiency'] * 100:.0f} %", f"{lo * 100:.0f}–{hi * 100:.0f} %",
                         "PASS" if abs(ratio - 1) <= 0.15 and inside else "FAIL"])
    return rows


def compression(scaling, rates) -> list:
    rows = []
    slowest = min(rates)
    for gbit in rates:
        g = linked(scaling, gbit)
        plain = g[(g["comm_hook"] == "none") & (g["accumulate_grad_batches"] == 1)]
        bf16 = g[g["comm_hook"] == "bf16"]
        if plain.empty or bf16.empty:
            rows.append([human_rate(gbit), "—", "—", "FAIL"])
            continue
        b = bf16.iloc[0]
        wire = sum(b["wire_bytes"]) / sum(b["bucket_bytes"])
        time = b["allreduce_s"] / plain.iloc[0]["allreduce_s"]
        ok = wire == 0.5 and (time <= 0.6 or gbit != slowest)
        rows.append([human_rate(gbit), f"{wire:.2f}", f"{time:.2f}" + (" (target ≤ 0.60)" if gbit == slowest else ""),
                     "PASS" if ok else "FAIL"])
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--link_gbit", type=float, nargs="+", default=list(demo.LINK_RATES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--output_dir", default=None, help="default: a temporary folder")
    p.add_argument("--report_only", action="store_true", help="only report an --output_dir filled before")
    args = p.parse_args()
    out = args.output_dir or tempfile.mkdtemp(prefix="scalelab-levers-")
    if not args.report_only:
        run_all(args.link_gbit, args.repeats, out)
    _, scaling, _, _ = build(out)
    print(f"CPU rehearsal, 1 device = 1 core, gloo, tiny GPT; medians of the runs in {out}/ (python src/benchmark.py "
          f"--output_dir {out} shows them all)\n")
    print(tabulate(predictions(scaling, args.link_gbit),
                   headers=["2 nodes", "link", "runs", "step ms", "all-reduce ms/step", "predicted ms", "pred ÷ meas",
                            "efficiency", "predicted eff.", "±15 % and inside"]))
    print()
    print(tabulate(compression(scaling, args.link_gbit),
                   headers=["bf16 hook", "wire ÷ buckets (0.5)", "all-reduce ÷ no hook", ""]))


if __name__ == "__main__":
    main()
