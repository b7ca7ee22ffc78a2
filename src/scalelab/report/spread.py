"""Noise you can see: under a scaling table with repeats, the run-to-run scatter they show, and each two
configurations whose efficiencies differ by less than it can move them.

The forecast's arithmetic (perfmodel/noise.py: sd of log(step) between repeats of one configuration, pooled over the
group's configurations), on every completed run of the group (the forecast reads the newest five of each); two
efficiencies of medians of n_a and n_b runs differ by noise alone within the 80 % quantile times σ · √(1/n_a +
1/n_b).
"""

from __future__ import annotations

import math

import pandas as pd

from scalelab.keys import SCALE
from scalelab.perfmodel import noise
from scalelab.report.cells import config_words


def scatter(members: pd.DataFrame) -> noise.Scatter:
    """The group's run-to-run scatter, from its completed runs' steps (dof 0: no repeats)."""
    ok = members[(members["status"] == "completed") & members["step_s"].notna()]
    return noise.pooled([list(steps) for _, steps in ok.groupby(SCALE, sort=False)["step_s"]])


def lines(members: pd.DataFrame, g: pd.DataFrame) -> list:
    """The scatter, where the group has repeats, and the neighbouring configurations (the table's order) whose
    efficiencies lie within it of each other: a difference a reader would otherwise call scaling."""
    s = scatter(members)
    if not s.dof:
        return []
    out = [f"  run-to-run: the step scatters {s.sigma * 100:.1f} % between repeats ({s.dof} degree(s) of "
           f"freedom): {noise.COVERAGE * 100:.0f} % of one configuration's runs lie within a factor of "
           f"{math.exp(s.quantile * s.sigma):.3f} of its typical step, either way"]
    rows = [r for r in g.itertuples() if isinstance(r.efficiency, float) and r.efficiency > 0]
    for a, b in zip(rows, rows[1:]):
        reach = s.quantile * s.sigma * math.sqrt(1 / a.runs + 1 / b.runs)
        if abs(math.log(a.efficiency / b.efficiency)) <= reach:
            out.append(f"  within noise: {config_words(a)} ({a.efficiency * 100:.0f} %) and {config_words(b)} "
                       f"({b.efficiency * 100:.0f} %) differ by less than their repeats' scatter can move them "
                       f"(±{(math.exp(reach) - 1) * 100:.1f} %)")
    return out
