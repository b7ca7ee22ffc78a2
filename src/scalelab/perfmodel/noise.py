"""What a forecast's band promises, and the run-to-run scatter it is built from.

A band is an 80 % prediction interval for one new run's step: of the runs the model predicts, four in five should
land inside it. Two things move a run's step that no model of the all-reduce knows: the run-to-run scatter of one
configuration (placement, the machine's other work, a bad launch), measured on a folder's repeats, and the model's
own ranges (which exposed factor applies, the ring fit's error), kept as ranges. perfmodel/forecast.py widens the
second by the first. Pure arithmetic: the track record and benchmarks/forecast_accuracy.py measure the coverage.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Optional

from scalelab.perfmodel.calibrate import Band

COVERAGE = 0.8  # the share of new runs a band promises to hold
# Student's t at 0.9 (two-sided 80 %) by degrees of freedom: a scatter measured on few repeats is itself uncertain,
# so the band widens by more than the normal quantile until many repeats back it (30's 1.310 beyond 30; the normal
# 1.282 only for the prior, measured on many)
T_90 = {1: 3.078, 2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397, 9: 1.383, 10: 1.372,
        12: 1.356, 15: 1.341, 20: 1.325, 30: 1.310}
# The scatter a workload without repeats is assumed to have: the standard deviation of log(step) over the repeats of
# one configuration, as the report's "run-to-run" line reads it over five fresh-clone `make demo` folders merged
# into one, on a 2-core VM (docs/appendix-b): the GPT's 4 configurations (steps of 0.25-0.8 s) 2.6 % (16 degrees
# of freedom), the MLP's 2 (steps under 2 ms) 9.9 % (8): a step of a few milliseconds is at the mercy of every
# scheduler tick, a long one averages them out.
PRIOR_SCATTER = 0.026
PRIOR_SCATTER_SHORT = 0.099
SHORT_STEP_S = 0.010  # below this a step takes the short steps' prior
# How far (log) an a-priori band reaches below and above its range and a run's scatter: the model's own error on
# clusters it was not fitted on, on each side the 90 % conformal quantile of how far published runs fell beyond
# that end when their publisher was held out (benchmarks/predictor_validation.py, its training part; docs/12).
MODEL_REACH = (0.049, 0.0)


@dataclass(frozen=True)
class Scatter:
    """The run-to-run scatter of one configuration's step: sd of log(step) (≈ relative sd), and the degrees of
    freedom it was measured with (0: none here, the prior)."""
    sigma: float
    dof: int

    @property
    def quantile(self) -> float:
        """How many sigmas an 80 % band reaches either side: Student's t for a measured scatter (the table's
        nearest degrees of freedom at or below: never narrower than its own), normal for the prior (measured on
        24 degrees of freedom elsewhere: known, not this folder's)."""
        if self.dof <= 0:
            return statistics.NormalDist().inv_cdf(0.5 + COVERAGE / 2)
        return T_90[max(d for d in T_90 if d <= self.dof)]

    def describe(self) -> str:
        if self.dof:
            return (f"run-to-run scatter {self.sigma * 100:.1f} % (sd of the step over repeats, {self.dof} degree(s) "
                    "of freedom)")
        return f"run-to-run scatter {self.sigma * 100:.1f} % (assumed: this workload has no repeats here)"


def prior(step_s: float) -> Scatter:
    """The scatter assumed for a workload whose step (seconds) has no repeats to measure it."""
    return Scatter(PRIOR_SCATTER_SHORT if step_s < SHORT_STEP_S else PRIOR_SCATTER, 0)


def pooled(configurations: Iterable[Iterable[float]], assumed: Optional[Scatter] = None) -> Scatter:
    """The scatter of the configurations' steps (seconds; one iterable per configuration, its repeats): the pooled
    sd of log(step) about each configuration's own mean; `assumed` (else the long steps' prior) where none has two
    runs."""
    squares, dof = 0.0, 0
    for steps in configurations:
        logs = [math.log(s) for s in steps if s > 0]
        if len(logs) > 1:
            mean = statistics.fmean(logs)
            squares += sum((v - mean) ** 2 for v in logs)
            dof += len(logs) - 1
    if dof == 0:
        return assumed or Scatter(PRIOR_SCATTER, 0)
    return Scatter(math.sqrt(squares / dof), dof)


def widen(band: Band, scatter: Scatter, relative_sd: float) -> Band:
    """A model's range made an 80 % band for one run: each end moved out by the scatter's quantile times
    relative_sd (the prediction's sd ÷ its middle: the new run's own scatter and those it was predicted from, in
    quadrature). The middle stays."""
    reach = math.exp(scatter.quantile * relative_sd)
    return Band(band.low / reach, band.mid, band.high * reach)


def one_run_band(no_overlap: float, overlap: float, step_s: float, baseline_step_s: float) -> Band:
    """An a-priori prediction's 80 % band for one run's efficiency against one baseline run (src/predict.py): the
    model's range (no overlap to full overlap) widened by the two runs' prior scatter, each by its own step's
    length, in quadrature. benchmarks/predictor_validation.py measures how often such bands hold published runs."""
    run, base = prior(step_s), prior(baseline_step_s)
    return widen(Band(no_overlap, (no_overlap + overlap) / 2, overlap), run, math.hypot(run.sigma, base.sigma))


def a_priori_band(no_overlap: float, overlap: float, step_s: float, baseline_step_s: float) -> Band:
    """What src/predict.py prints: one run's band (`one_run_band`) widened by the model's own error on each side,
    MODEL_REACH, so that it holds 80 % of runs on clusters the model never saw."""
    band = one_run_band(no_overlap, overlap, step_s, baseline_step_s)
    return Band(band.low / math.exp(MODEL_REACH[0]), band.mid, band.high * math.exp(MODEL_REACH[1]))
