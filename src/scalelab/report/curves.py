"""`benchmark.py --plot`: the training loss against time, one figure per scaling group and one curve per
configuration: does 8 GPUs reach the same loss sooner? Read from the metrics.csv that `train.py --logger csv` (the
default) writes beside each result.json; a run without one is left out, and one note line says how many were.

The time axis is the run's own training clock (elapsed_s: the sum of its step times, so start-up and validation are
not in it); the loss is rank 0's, per optimizer step, drawn faintly, with its running mean over SMOOTH steps on top.
"""

import io
import os

import pandas as pd
from matplotlib.figure import Figure

from scalelab import files
from scalelab.errors import ResultError
from scalelab.keys import SCALE
from scalelab.report import labels, plots
from scalelab.results import METRICS_FILE

SMOOTH = 10  # steps in the running mean drawn over the raw loss
COLUMNS = ("elapsed_s", "train_loss")


def metrics_files(output_dir: str) -> dict:
    """Run folder name (= its run id, results.write) -> its metrics.csv, anywhere below output_dir."""
    found = {}
    for folder, _, names in files.walk(output_dir, []):  # the report names what it could not list (results.scan)
        if METRICS_FILE in names:
            found.setdefault(os.path.basename(folder), os.path.join(folder, METRICS_FILE))
    return found


def read_curve(path: str, root=None):
    """(elapsed_s, train_loss) rows of one run's metrics.csv, in step order; None when it has none (or it is no
    regular file of a metrics file's size: files.read_bytes)."""
    try:
        frame = pd.read_csv(io.BytesIO(files.read_bytes(path, "metrics", root)))
    except (ResultError, ValueError):
        return None
    if not set(COLUMNS) <= set(frame.columns):
        return None
    frame = frame.dropna(subset=list(COLUMNS))
    return frame.sort_values("elapsed_s")[list(COLUMNS)] if not frame.empty else None


def loss_figure(label: str, curves: list, scaling: pd.DataFrame) -> Figure:
    """curves: [(configuration label, frame of elapsed_s and train_loss)], fewest devices first; scaling: the
    group's rows (what the report warns of them goes under the axes, not another group's)."""
    fig = Figure(figsize=(7, 4.8))
    ax = fig.subplots()
    for where, frame in curves:
        color = ax.plot(frame["elapsed_s"], frame["train_loss"], lw=0.8, alpha=0.3)[0].get_color()
        smooth = frame["train_loss"].rolling(SMOOTH, min_periods=1).mean()
        ax.plot(frame["elapsed_s"], smooth, lw=2, color=color, label=f"{where} (reached {smooth.iloc[-1]:.3g})")
    ax.set_xlabel("training time (s): the sum of the step times so far, start-up and validation left out")
    ax.set_ylabel(f"training loss (rank 0; line: mean over {SMOOTH} steps)")
    ax.set_title(f"Loss against training time\n{label}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    plots._finish(fig, scaling)
    return fig


def figures(output_dir: str, runs: pd.DataFrame, scaling: pd.DataFrame) -> tuple:
    """([(file name, Figure)] for every group with a curve, the note line on runs left out (None if none))."""
    found = metrics_files(output_dir)
    ok = runs[runs["status"] == "completed"].sort_values("created")
    out, missing = [], 0
    for group, g in scaling.groupby("group", sort=False):
        curves = []
        configs = ok[ok["group"] == group].groupby(SCALE, sort=True)
        names = labels.names(pd.DataFrame([key for key, _ in configs], columns=SCALE))
        for name, (_, c) in zip(names, configs):
            newest = [read_curve(found[r], output_dir) if r in found else None for r in c["run_id"]][::-1]
            frame = next((f for f in newest if f is not None), None)
            missing += len(c) - sum(f is not None for f in newest)
            if frame is not None:
                curves.append((name, frame))
        if curves:
            letter = g["letter"].iloc[0]
            out.append((f"loss_vs_wall_time_{letter}.png", loss_figure(plots._label(g, letter), curves, g)))
    note = (f"{missing} run(s) have no {METRICS_FILE} (train.py --logger csv writes one): not in the loss plots"
            if missing else None)
    return out, note
