"""Where a series of runs changed level: binary segmentation on log(value), each split tested by permutation.

A site's nightly series of one configuration (throughput, busbw, compute) scatters from night to night; a change is
a lasting step in its level (a link lost, a driver updated), not one bad night. The statistic of a split at k is
the sum of squares of log(value) that a step at k explains, k (n − k) / n (mean before − mean after)²: its
largest is the most likely place of one step (least squares; Welch's t, tried first, put a step of 4 scatters 5 or
more runs from its place in 1 to 4 % of series split 1:4). A segment's best split is kept where (1) no more than ALPHA
of the segment's shuffles reach so large a best statistic (shuffled, the series has no change: the test is
calibrated on the series itself, whatever its scatter, with the same multiple looks; stopped once the share is past
ALPHA), and (2) each side holds MIN_SEGMENT runs; each side is then searched again. Of the splits kept, a change is
one whose step is (3) at least STEP_SCATTERS runs' own scatter between the segments its neighbouring splits leave (a
significant 0.5 % is not "got slower", nor is a step most single nights reach): the weakest is dropped and its
segments merged until each step left passes. Judged between the final segments, not at the first split, so a
level that goes and comes back (a bad week, then fixed) names both its steps: at its first split one side holds
both levels, whose median is neither. On change-free series the first two rules alone name a change in about ALPHA
of them; with the third, none of 600 (3 % scatter, 30 to 400 runs; tests/unit/test_history.py holds 400 series of
1 to 10 % scatter to at most 2.5 %). Shuffles assume the nights are exchangeable without a change: a slow drift is
not a step and may be cut into several. Deterministic: each segment's shuffles come from a generator seeded by its
place in the series (`significant`).
Torch- and pandas-free: report/history.py feeds it each configuration's series.
"""

import math
from typing import NamedTuple, Sequence

import numpy as np

MIN_SEGMENT = 5  # runs on each side of a change: fewer is a bad night or two, not a lasting step
ALPHA = 0.01  # the share of a change-free segment's shuffles allowed to reach the statistic (a false alarm)
SHUFFLES = 199  # the shuffles a split is tested against: p = (1 + reached) / 200
SEED = 20261202
TIE = 1e-9  # statistics this close (relative) are one: rounding, never a difference a series shows
STEP_SCATTERS = 2.0  # the least step named, in the segments' own run-to-run scatter (sd of log value)


class Change(NamedTuple):
    """A lasting step: the first run after it (its index in the series), the level before and after (medians of
    the segments either side), and the step as after ÷ before − 1."""
    index: int
    before: float
    after: float

    @property
    def size(self) -> float:
        return self.after / self.before - 1


def statistics_of_splits(logs: np.ndarray) -> np.ndarray:
    """The sum of squares a step explains at each split k (before: logs[:k], after: logs[k:]) for k in
    [MIN_SEGMENT, n − MIN_SEGMENT]: k (n − k) / n × (mean before − mean after)², 0 where the means agree."""
    n = len(logs)
    k = np.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
    total = np.cumsum(logs)
    gap = total[k - 1] / k - (total[-1] - total[k - 1]) / (n - k)
    return np.where(np.abs(gap) > 1e-12, k * (n - k) / n * gap ** 2, 0.0)


def _best(logs: np.ndarray) -> tuple:
    """(the best split's index, its statistic), or (None, 0) where no split moves the mean."""
    stats = statistics_of_splits(logs)
    if not (stats > 0).any():
        return None, 0.0
    i = int(np.argmax(stats))
    return i + MIN_SEGMENT, float(stats[i])


def scatter(logs: np.ndarray) -> float:
    """One run's scatter in a segment: the sd of log(value) (≈ relative sd), 0 for fewer than two runs."""
    return float(np.std(logs, ddof=1)) if len(logs) > 1 else 0.0


def find(values: Sequence[float]) -> list:
    """[Change] in the series (each value > 0, in time order), earliest first."""
    logs = np.log(np.asarray(values, dtype=float))
    found = []
    _segment(logs, 0, found)
    found = _large_enough(logs, sorted(found))
    return [Change(i, _level(logs, found, i, -1), _level(logs, found, i, +1)) for i in found]


def _segment(logs: np.ndarray, offset: int, found: list) -> None:
    """Each significant split (rules 1 and 2), searched again on each side: the step rule waits for the segments
    all splits leave (_large_enough), or a level that goes and comes back would hide both its steps."""
    if len(logs) < 2 * MIN_SEGMENT:
        return
    k, stat = _best(logs)
    if k is None or not significant(logs, stat, offset):
        return
    found.append(offset + k)
    _segment(logs[:k], offset, found)
    _segment(logs[k:], offset + k, found)


def _large_enough(logs: np.ndarray, found: list) -> list:
    """The splits that pass the step rule (3) between the segments their neighbours leave: the one whose step is
    the fewest scatters goes first, its two segments merged, until every step left is STEP_SCATTERS or more."""
    while found:
        edges = [0, *found, len(logs)]
        ratios = [_steps(logs[edges[j - 1]:edges[j]], logs[edges[j]:edges[j + 1]]) for j in range(1, len(edges) - 1)]
        weakest = int(np.argmin(ratios))
        if ratios[weakest] >= STEP_SCATTERS:
            break
        found = found[:weakest] + found[weakest + 1:]
    return found


def _steps(before: np.ndarray, after: np.ndarray) -> float:
    """The step between two segments' medians in their pooled run scatter (inf where neither scatters)."""
    step = abs(float(np.median(after) - np.median(before)))
    within = math.sqrt((scatter(before) ** 2 + scatter(after) ** 2) / 2)
    return step / within if within > 0 else math.inf if step > 0 else 0.0


def significant(logs: np.ndarray, stat: float, offset: int) -> bool:
    """Whether at most ALPHA of the segment's SHUFFLES shuffles reach its best statistic, p = (1 + reached) /
    (SHUFFLES + 1): stopped at the shuffle that makes it more (a change-free segment's first few, mostly). Each
    segment shuffles with a generator of its own (seeded by its place in the series), so where one stops moves no
    other segment's shuffles."""
    rng = np.random.default_rng([SEED, offset, len(logs)])
    reached = 0
    for _ in range(SHUFFLES):
        reached += reaches(_best(rng.permutation(logs))[1], stat)
        if (1 + reached) / (SHUFFLES + 1) > ALPHA:
            return False
    return True


def reaches(shuffled: float, stat: float) -> bool:
    """Whether a shuffle's statistic reaches the series' own, ties within TIE of it counted: a shuffle that puts the
    same values on each side sums them in another order, and the statistic (a difference of means of logs, squared)
    comes out some 1e-14 off. Counted strictly, ties among repeated values make significant a step that is not."""
    return shuffled >= stat * (1 - TIE)


def _level(logs: np.ndarray, found: list, i: int, side: int) -> float:
    """The median value of the segment before (side −1) or after (+1) change i, between its neighbours."""
    edges = [0, *found, len(logs)]
    j = edges.index(i)
    lo, hi = (edges[j - 1], i) if side < 0 else (i, edges[j + 1])
    return float(np.exp(np.median(logs[lo:hi])))


def regime(values: Sequence[float], changes: list) -> list:
    """The values since the last change (the series' current level)."""
    return list(values[changes[-1].index:]) if changes else list(values)
