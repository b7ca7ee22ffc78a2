"""How well the a-priori predictor (perfmodel.scaling.predict, what src/predict.py prints) brackets published
data-parallel scaling measured on real clusters.

benchmarks/data/published_scaling.json holds the measurements (each copied from the source its row names, with the
assumptions it took) and the hardware of each system (GPUs per node, the intra-node link per GPU, the inter-node
link per node, each figure with its source). For every point the script builds ScalingInputs from the row:
gradient bytes = parameters x bytes of the gradient dtype; the row's GPUs per node and nodes; the system's links;
compute = one batch on one GPU = per-GPU batch x items per sample / baseline throughput per GPU; accumulation K.
predict() then gives the no-overlap and the full-overlap efficiency: the band.

- Baseline '1 GPU': the band is the predictor's efficiency at the row's scale, as predict.py prints it.
- Baseline '1 node' (the source gives no 1-GPU figure): the band is the predictor's efficiency at N nodes divided
  by its efficiency at 1 node, each at the accumulation its run used, no overlap by no overlap and full by full.
  Compute then comes from the 1-node throughput per GPU, which already holds the 1-node all-reduce.

Printed per point: the published efficiency, the band, inside or not, and two signed errors in percentage points,
published - predicted (negative: the predictor was optimistic, the cluster did worse):

- to the nearest edge of the band (0 inside): the headline, because the band is the whole prediction; how much
  of the all-reduce hides behind backward is what the model does not know, so no point inside is an error.
- to the band's middle: what a forecaster who had to name one number (half the overlap) would have missed by.

Then the summary: coverage (share of points inside), median |error| to the edge and to the middle, and how many
misses were optimistic (published below the band) or pessimistic (above it). Pure arithmetic, no torch: a second.

    python benchmarks/predictor_validation.py
    python benchmarks/predictor_validation.py --system dgx-2h --system dgx-a100-80gb
"""

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass

from tabulate import tabulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from scalelab.perfmodel.network import GRAD_DTYPE_BYTES, gbit_to_GBps  # noqa: E402
from scalelab.perfmodel.scaling import ScalingInputs, predict  # noqa: E402

DATA = os.path.join(ROOT, "benchmarks", "data", "published_scaling.json")
BASELINES = ("1 GPU", "1 node")


def load(path=DATA) -> dict:
    with open(path) as f:
        return json.load(f)


def devices_per_node(point) -> int:
    return point["gpus"] // point["nodes"]


def baseline_gpus(point) -> int:
    """GPUs of the baseline run: 1, or one node of the row's GPUs per node."""
    if point["baseline"] not in BASELINES:
        raise ValueError(f"{point['id']}: baseline must be one of {BASELINES}, got {point['baseline']!r}")
    return 1 if point["baseline"] == "1 GPU" else devices_per_node(point)


def published_efficiency(point) -> float:
    """Speedup / GPUs against the baseline, from the two throughputs."""
    return point["throughput"] / (point["baseline_throughput"] * point["gpus"] / baseline_gpus(point))


def compute_s(point) -> float:
    """One batch (not one optimizer step) on one GPU, at the baseline's throughput per GPU."""
    per_gpu = point["baseline_throughput"] / baseline_gpus(point)
    return point["per_gpu_batch"] * point["items_per_sample"] / per_gpu


def inputs(point, system, nodes, accumulate) -> ScalingInputs:
    inter = gbit_to_GBps(system["nics_per_node"] * system["nic_gbit"])
    intra = system["intra_GBps"]
    if intra is None:
        if nodes == 1 or point["baseline"] == "1 node":
            raise ValueError(f"{point['id']}: the predictor needs the intra-node link of {point['system']}, "
                             "which the data leaves unknown")
        intra = inter  # never read: a ring over several nodes is priced at the inter-node link (ring_for)
    return ScalingInputs(devices=devices_per_node(point), num_nodes=(nodes,), n_params=point["params"],
                         grad_dtype_bytes=GRAD_DTYPE_BYTES[point["grad_dtype"]], intra_GBps=intra, inter_GBps=inter,
                         compute_s=compute_s(point), accumulate=accumulate)


def scale_row(point, system, nodes, accumulate):
    """The predictor's row at `nodes` nodes of the row's GPUs per node (1 node: the whole node)."""
    rows = predict(inputs(point, system, nodes, accumulate))
    (row,) = [r for r in rows if r.num_nodes == nodes and r.world_size == nodes * devices_per_node(point)]
    return row


def band(point, system) -> tuple:
    """(no overlap, full overlap) efficiency against the row's baseline, and the row at its scale."""
    row = scale_row(point, system, point["nodes"], point["accumulation"])
    if point["baseline"] == "1 GPU":
        return row.efficiency_no_overlap, row.efficiency_overlap, row
    base = scale_row(point, system, 1, point["baseline_accumulation"])
    return (row.efficiency_no_overlap / base.efficiency_no_overlap,
            row.efficiency_overlap / base.efficiency_overlap, row)


def inside(published, lo, hi) -> bool:
    return lo <= published <= hi


def edge_error(published, lo, hi) -> float:
    """published - the nearest edge of [lo, hi]; 0 inside. Negative: the predictor was optimistic."""
    if published < lo:
        return published - lo
    if published > hi:
        return published - hi
    return 0.0


def mid_error(published, lo, hi) -> float:
    """published - the middle of the band."""
    return published - (lo + hi) / 2


@dataclass(frozen=True)
class Summary:
    points: int
    inside: int
    coverage: float
    median_abs_edge_error: float
    median_abs_mid_error: float
    optimistic: int  # published below the band
    pessimistic: int  # published above the band


def score(triples) -> Summary:
    """Coverage and errors over (published, lo, hi) triples."""
    triples = list(triples)
    if not triples:
        raise ValueError("no points to score")
    n_in = sum(inside(*t) for t in triples)
    return Summary(points=len(triples), inside=n_in, coverage=n_in / len(triples),
                   median_abs_edge_error=statistics.median(abs(edge_error(*t)) for t in triples),
                   median_abs_mid_error=statistics.median(abs(mid_error(*t)) for t in triples),
                   optimistic=sum(p < lo for p, lo, _ in triples), pessimistic=sum(p > hi for p, _, hi in triples))


def evaluate(data, systems=None) -> list:
    """One dict per point (of `systems`, or all): the published efficiency, the band and the row it came from."""
    out = []
    for point in data["points"]:
        if systems and point["system"] not in systems:
            continue
        lo, hi, row = band(point, data["systems"][point["system"]])
        out.append(dict(point=point, published=published_efficiency(point), lo=lo, hi=hi, row=row))
    return out


def _pts(x) -> str:
    return f"{x * 100:+.1f}"


def table(results) -> str:
    body = []
    for r in results:
        p, row, t = r["point"], r["row"], (r["published"], r["lo"], r["hi"])
        body.append([p["id"], p["system"], f"{p['gpus']}/{p['nodes']}", p["baseline"], p["accumulation"],
                     f"{compute_s(p):.4g}", f"{row.comm_s:.3g}", f"{r['published']:.1%}",
                     f"{r['lo']:.1%}–{r['hi']:.1%}", "yes" if inside(*t) else "no", _pts(edge_error(*t)),
                     _pts(mid_error(*t))])
    headers = ["point", "system", "GPUs/\nnodes", "baseline", "K", "compute s\n(1 batch)", "all-reduce\ns",
               "published\nefficiency", "predicted\n(no – full overlap)", "inside", "error to\nedge (pts)",
               "error to\nmiddle (pts)"]
    return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True, stralign="right")


def summary_lines(s: Summary) -> list:
    misses = s.points - s.inside
    return [f"coverage: {s.inside} of {s.points} published points inside the predicted band ({s.coverage:.0%})",
            f"median |error| to the band's nearest edge: {s.median_abs_edge_error * 100:.1f} points; "
            f"to its middle: {s.median_abs_mid_error * 100:.1f} points",
            f"misses: {misses}, of which {s.optimistic} optimistic (published below the band) and "
            f"{s.pessimistic} pessimistic (above it)"]


def by_system(results) -> list:
    """One line per system, in the data's order: its coverage and median |error| to the edge."""
    lines = ["by system:"]
    for name in dict.fromkeys(r["point"]["system"] for r in results):
        s = score((r["published"], r["lo"], r["hi"]) for r in results if r["point"]["system"] == name)
        lines.append(f"  {name}: {s.inside} of {s.points} inside, median |error| to the edge "
                     f"{s.median_abs_edge_error * 100:.1f} points")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DATA, help="the measurements and hardware (default: %(default)s)")
    parser.add_argument("--system", action="append", default=None,
                        help="only this system's points (repeatable); default: all")
    args = parser.parse_args(argv)
    data = load(args.data)
    unknown = sorted(set(args.system or ()) - set(data["systems"]))
    if unknown:
        parser.error(f"unknown system {', '.join(unknown)}; the data has {', '.join(sorted(data['systems']))}")
    results = evaluate(data, args.system)
    print(table(results))
    print()
    print("\n".join(summary_lines(score((r["published"], r["lo"], r["hi"]) for r in results))))
    print("\n".join(by_system(results)))
    print("error = published - predicted, in percentage points; negative: the cluster did worse than predicted.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
