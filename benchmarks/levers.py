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

import os
import sys

from tabulate import tabulate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # emulated_sweep, which puts src/ on the path

import emulated_sweep

from scalelab import demo
from scalelab.perfmodel.network import human_rate
from scalelab.report.cli import build

SWEEPS = (("accumulate_grad_batches", ["1", "4", "16"]), ("comm_hook", ["bf16"]))  # K=1 is the hook's "none"


def rungs(rates) -> list:
    out = [r for lever in SWEEPS for r in demo.lever_rungs(lever, rates)]
    return list({r.name: r for r in out}.values())  # one all-reduce benchmark per link


def setting(r) -> str:
    return "bf16 hook" if r["comm_hook"] == "bf16" else f"K = {int(r['accumulate_grad_batches'])}"


def linked(scaling, gbit):
    return scaling[(scaling["num_nodes"] > 1) & (scaling["link_gbit"] == gbit)]


def predictions(scaling, rates) -> list:
    rows = []
    for gbit in rates:
        for _, r in linked(scaling, gbit).sort_values(["comm_hook", "accumulate_grad_batches"]).iterrows():
            ratio = r["predicted_allreduce_s"] / r["allreduce_s"]
            lo, hi = r["predicted_efficiency_no_overlap"], r["predicted_efficiency_overlap"]
            inside = lo - 0.02 <= r["efficiency"] <= hi + 0.02  # a rounding's slack: the table shows whole %
            rows.append([setting(r), human_rate(gbit), f"{r['runs']:.0f}", f"{r['step_s'] * 1e3:,.0f}",
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
    args = emulated_sweep.parse_args(__doc__)
    out = emulated_sweep.run("levers", rungs(args.link_gbit), args)
    scaling = build(out).scaling
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
