"""Two outputs side by side (`benchmark.py --compare A B`): gpu vs gpu-bw nodes, before/after an NCCL setting.

Each side is an outputs folder or a `summary.json` from `--export` (how results travel between
sites). Configurations match when they ran the identical workload at the same devices × nodes;
the hardware may differ, since that is usually the point. The ratio is B ÷ A throughput:
above 1, B is faster.
"""

import json
import os

import pandas as pd
from tabulate import tabulate

from scalelab import redaction, results
from scalelab.errors import UsageError
from scalelab.keys import SCALE
from scalelab.report.cells import fmt_num, fmt_pct

KEY = ["workload_key", *SCALE]  # the workload across hardware, and where it ran


def load_side(path: str, build) -> tuple:
    """(label, configurations frame) of a folder (via `build`, the report pipeline) or of a summary.json."""
    if os.path.isdir(path):
        summary = build(path)
    elif os.path.isfile(path):
        try:
            summary = results.load_summary(path)
        except results.ResultError as exc:
            raise UsageError(f"--compare {path}: {exc}") from None
    else:
        raise UsageError(f"--compare {path}: no such folder or summary.json")
    frame = pd.DataFrame(summary["configurations"])
    if frame.empty:
        raise UsageError(f"--compare {path}: no completed training runs there")
    # a null workload field is one left out (not recorded): summaries from before results.group_key left nulls out
    frame["workload_key"] = [json.dumps(results.recorded(w) if isinstance(w, dict) else w, sort_keys=True)
                             for w in frame["workload"]]
    frame["link"] = frame["link"].fillna("") if "link" in frame else ""  # summaries from before emulated links
    detail = frame["hardware_detail"] if "hardware_detail" in frame else frame["hardware"]
    frame["hardware_key"] = [json.dumps(d, sort_keys=True) for d in detail]
    if (frame.groupby(KEY)["hardware_key"].nunique() > 1).any():
        kinds = sorted({f"{d.get('accelerator')} {d.get('device')}" if isinstance(d, dict) else str(d) for d in detail})
        raise UsageError(f"--compare {path}: the same workload ran on several kinds of hardware there "
                         f"({', '.join(kinds)}); give one folder per hardware")
    return f"{path} ({', '.join(sorted(set(frame['hardware'])))})", frame


def side_by_side(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration in both; ratio = B ÷ A throughput; only-in-one rows kept with NaN."""
    cols = KEY + ["describe", "scaling", "unit", "throughput", "efficiency", "baseline_world_size", "step_s",
                  "comm_share"]
    a, b = (f if "baseline_world_size" in f else f.assign(baseline_world_size=float("nan")) for f in (a, b))
    both = a[cols].merge(b[cols], on=KEY, how="outer", suffixes=("_a", "_b"), indicator=True)
    both["describe"] = both["describe_a"].fillna(both["describe_b"])
    both["unit"] = both["unit_a"].fillna(both["unit_b"])
    both["scaling"] = both["scaling_a"].fillna(both["scaling_b"])
    both["ratio"] = both["throughput_b"] / both["throughput_a"]
    return both.sort_values(["describe", "world_size", "num_nodes"]).reset_index(drop=True)


def render(label_a: str, label_b: str, both: pd.DataFrame, fmt: str = "simple") -> str:
    out = [f"A = {label_a}", f"B = {label_b}", "ratio = B ÷ A throughput (above 1: B is faster)", ""]
    for (workload, _), g in both.groupby(["describe", "workload_key"], sort=False):
        unit = g["unit"].iloc[0]
        out.append(f"{workload} · {g['scaling'].iloc[0]} scaling")
        rows = [[int(r.world_size), f"{int(r.num_nodes)}" + (f" ({r.link})" if r.link else ""),
                 fmt_num(r.throughput_a, ",.0f"), fmt_num(r.throughput_b, ",.0f"),
                 fmt_num(r.ratio, ".2f") + ("×" if pd.notna(r.ratio) else ""), fmt_pct(r.efficiency_a),
                 fmt_pct(r.efficiency_b),
                 fmt_num(r.step_s_a * 1e3, ",.1f"), fmt_num(r.step_s_b * 1e3, ",.1f"), fmt_pct(r.comm_share_a),
                 fmt_pct(r.comm_share_b)] for r in g.itertuples()]
        out.append(tabulate(rows, headers=["world size", "nodes", f"A {unit}", f"B {unit}", "B ÷ A", "A eff.", "B eff.",
                                           "A step ms", "B step ms", "A comm share", "B comm share"],
                            tablefmt=fmt, disable_numparse=True))
        only = g[g["_merge"] != "both"]
        if len(only):
            out.append("  (— : that configuration ran on one side only)")
        base_a, base_b = g["baseline_world_size_a"].dropna(), g["baseline_world_size_b"].dropna()
        if len(base_a) and len(base_b) and base_a.iloc[0] != base_b.iloc[0]:
            out.append(f"  (each efficiency is against its own side's baseline: A {base_a.iloc[0]:.0f} device(s), "
                       f"B {base_b.iloc[0]:.0f}; compare throughput, not efficiency)")
        out.append("")
    return "\n".join(out)


def main(args, build) -> int:
    label_a, a = load_side(args.compare[0], build)
    label_b, b = load_side(args.compare[1], build)
    both = side_by_side(a, b)
    if not (both["_merge"] == "both").any():
        raise UsageError(f"--compare: no configuration ran the same workload at the same devices × nodes in "
                         f"{args.compare[0]} and {args.compare[1]}")
    if args.export:
        results.ensure_output_dir(args.export, "--export")
    print(render(label_a, label_b, both, fmt="github" if args.markdown else "simple"))
    if args.export:
        table = both[["describe", "scaling", "unit", "world_size", "num_nodes", "throughput_a", "throughput_b", "ratio",
                      "efficiency_a", "efficiency_b", "baseline_world_size_a", "baseline_world_size_b", "step_s_a",
                      "step_s_b", "comm_share_a", "comm_share_b",
                      "workload_key"]]
        paths = [results.atomic_write_text(os.path.join(args.export, "compare.csv"), redaction.csv_text(table)),
                 results.atomic_write_text(os.path.join(args.export, "compare.md"),
                                           render(label_a, label_b, both, fmt="github"))]
        print("\n".join(f"written: {p}" for p in paths))
    return 0
