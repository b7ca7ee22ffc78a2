"""Where a series of runs changed level: segmentation on log(value), each split tested by permutation.

A site's nightly series of one configuration (throughput, busbw, compute) scatters from night to night; a change is a
lasting step in its level (a link lost, a driver updated), not one bad night. A split is a stretch of runs against the
rest of its segment (circular binary segmentation: a stretch that touches an end is a single step), and its statistic
the sum of squares of log(value) it explains, m (n − m) / n (mean inside − mean outside)² for m runs of n: the largest
is the most likely place of a change (least squares; Welch's t, tried first, put a step of 4 scatters 5 or more runs
from its place in 1 to 4 % of series split 1:4). Every stretch is searched in a segment of up to ARC_MAX runs; in a
longer one, the steps and the stretches of up to STRETCH_MAX runs (all would be O(n²) a shuffle), and a stretch
significant there has its ends placed where they fit best, moved up to STRETCH_MAX runs at a time until none within
reach fits better (a longer bad stretch is found by a piece of it). Searched for a step alone, a bad week that ended
was rarely found: a step where it starts moves the mean of all the runs after by the week's step × 7 ÷ their number
(365 nights, a week of 6 to 10 scatters: 45 to 54 of 200 named at both ends; with stretches, 200).

A segment's best split is kept where (1) no more than ALPHA of the segment's shuffles reach so large a best statistic
(shuffled, the series has no change: the test is calibrated on the series itself, whatever its scatter, with the same
multiple looks; stopped once the share is past ALPHA), and (2) each part it leaves holds MIN_SEGMENT runs; each part is
then searched again. Of the splits kept, a change is one whose step is (3) at least STEP_SCATTERS runs' own scatter
between the segments its neighbouring splits leave (a significant 0.5 % is not "got slower", nor is a step most single
nights reach): the weakest is dropped and its segments merged until each step left passes. Judged between the final
segments, not at the first split, so a level that goes and comes back (a bad month, then fixed) names both its steps. On
change-free series the first two rules alone name a change in about ALPHA of them; with the third, 6 of 2,400 (3 %
scatter, 30 to 400 runs), each a stretch of 5 to 11 runs some 2 scatters off (searched for steps
alone, none); tests/unit/test_history.py holds 400 series of 1 to 10 % scatter to at most 2.5 %. Shuffles assume the
nights are exchangeable without a change: a slow drift is not a step and may be cut into several. Deterministic: each
segment's shuffles come from a generator seeded by its place in the series (`significant`). Torch- and pandas-free:
report/history.py feeds it each configuration's series.
"""

import functools
import math
from typing import NamedTuple, Sequence

import numpy as np

MIN_SEGMENT = 5  # runs on each side of a change: fewer is a bad night or two, not a lasting step
ALPHA = 0.01  # the share of a change-free segment's shuffles allowed to reach the statistic (a false alarm)
SHUFFLES = 199  # the shuffles a split is tested against: p = (1 + reached) / 200
SEED = 20261202
TIE = 1e-9  # statistics this close (relative) are one: rounding, never a difference a series shows
STEP_SCATTERS = 2.0  # the least step named, in the segments' own run-to-run scatter (sd of log value)
ARC_MAX = 200  # a segment of up to this many runs is searched for a stretch of any length unlike the rest
STRETCH_MAX = 30  # a longer one for steps and for stretches of up to this many runs (a bad week, a bad month)


class Change(NamedTuple):
    """A lasting step: the first run after it (its index in the series), the level before and after (medians of
    the segments either side), and the step as after ÷ before − 1."""
    index: int
    before: float
    after: float

    @property
    def size(self) -> float:
        return self.after / self.before - 1


def _arcs(n: int) -> tuple:
    """Every stretch i..j−1 searched in a segment of n runs (i < j: its first run and the first after it) as arrays
    (i, j, 1 / (j − i), 1 / (n − j + i), (j − i)(n − j + i) / n): at least MIN_SEGMENT runs inside it, in the rest,
    and on each side it leaves within the segment (one touching an end is a single step). Past ARC_MAX runs, the
    steps and the stretches of up to STRETCH_MAX runs (all of them would be too many to shuffle: O(n²) each)."""
    return _stretches(n, ARC_MAX, STRETCH_MAX)


@functools.lru_cache(maxsize=8)
def _stretches(n: int, arc_max: int, stretch_max: int) -> tuple:
    if n <= arc_max:
        i, j = np.triu_indices(n + 1, k=MIN_SEGMENT)
    else:
        steps = np.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
        i = np.concatenate([np.zeros_like(steps), *(np.arange(MIN_SEGMENT, n - MIN_SEGMENT - d + 1)
                                                    for d in range(MIN_SEGMENT, stretch_max + 1))])
        j = np.concatenate([steps, *(np.arange(MIN_SEGMENT + d, n - MIN_SEGMENT + 1)
                                     for d in range(MIN_SEGMENT, stretch_max + 1))])
    return _allowed(i, j, n)


def _allowed(i: np.ndarray, j: np.ndarray, n: int) -> tuple:
    """Of the stretches i..j−1, those a segment of n runs may hold (each part they leave MIN_SEGMENT runs or none),
    with their factors: (i, j, 1 / (j − i), 1 / (n − j + i), (j − i)(n − j + i) / n)."""
    inside = j - i
    keep = (i >= 0) & (j <= n) & (inside >= MIN_SEGMENT) & (n - inside >= MIN_SEGMENT) \
        & ((i == 0) | (i >= MIN_SEGMENT)) & ((j == n) | (n - j >= MIN_SEGMENT))
    i, j, inside = i[keep], j[keep], inside[keep]
    return i, j, 1.0 / inside, 1.0 / (n - inside), inside * (n - inside) / n


def statistics_of_arcs(logs: np.ndarray) -> np.ndarray:
    """The sum of squares a stretch explains against the rest of the segment, for each of _arcs's stretches:
    m (n − m) / n × (mean inside − mean outside)², m its runs; 0 where the means agree."""
    return _explained(logs, *_arcs(len(logs)))


def _explained(logs: np.ndarray, i, j, per_inside, per_outside, weight) -> np.ndarray:
    """statistics_of_arcs for the stretches i..j−1 given, with their factors (_allowed's)."""
    total = np.concatenate(([0.0], np.cumsum(logs)))
    inside = total[j] - total[i]
    gap = inside * per_inside - (total[-1] - inside) * per_outside
    return np.where(np.abs(gap) > 1e-12, weight * gap ** 2, 0.0)


def _placed(logs: np.ndarray, cuts: tuple) -> tuple:
    """A significant stretch's ends where they fit best: the best of every stretch whose ends lie within STRETCH_MAX
    of those the test found, then of those within reach of that, until a stretch fits better than all within reach
    of it. Placement only, its shuffles already drawn: past ARC_MAX runs, a bad stretch longer than STRETCH_MAX is
    matched best by a piece of it, ends inside it, and the few bad runs left at each end (fewer than MIN_SEGMENT)
    could never be split off."""
    n = len(logs)
    if n <= ARC_MAX:
        return cuts
    near = np.arange(-STRETCH_MAX, STRETCH_MAX + 1)
    while len(cuts) == 2:
        within = _allowed(*(a.ravel() for a in np.meshgrid(cuts[0] + near, cuts[1] + near, indexing="ij")), n)
        i, j, stats = within[0], within[1], _explained(logs, *within)
        best, here = int(np.argmax(stats)), int(np.flatnonzero((i == cuts[0]) & (j == cuts[1]))[0])
        if stats[best] <= stats[here]:  # none within reach fits better (a tie: the ends stay)
            return cuts
        cuts = _cuts(int(i[best]), int(j[best]), n)
    return cuts


def _cuts(first: int, after: int, n: int) -> tuple:
    """A stretch first..after−1 of n runs as the cuts it makes: (k,) where it touches an end (a step), else both."""
    return (after,) if first == 0 else (first,) if after == n else (first, after)


def _best(logs: np.ndarray) -> tuple:
    """(the best split's cuts, its statistic), or ((), 0) where no split moves the mean: of _arcs's stretches, the
    one most unlike the rest: (k,) where it touches an end (a step), else (i, j)."""
    stats = statistics_of_arcs(logs)
    if not (stats > 0).any():
        return (), 0.0
    best = int(np.argmax(stats))
    i, j, *_ = _arcs(len(logs))
    return _cuts(int(i[best]), int(j[best]), len(logs)), float(stats[best])


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
    """Each significant split (rules 1 and 2), each part it leaves searched again: the step rule waits for the
    segments all splits leave (_large_enough), or a level that goes and comes back would hide both its steps."""
    if len(logs) < 2 * MIN_SEGMENT:
        return
    cuts, stat = _best(logs)
    if not cuts or not significant(logs, stat, offset):
        return
    cuts = _placed(logs, cuts)
    found += [offset + k for k in cuts]
    edges = [0, *cuts, len(logs)]
    for start, end in zip(edges, edges[1:]):
        _segment(logs[start:end], offset + start, found)


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
    same values inside and outside the stretch sums them in another order, and the statistic (a difference of means
    of logs, squared) comes out some 1e-14 off. Counted strictly, ties among repeated values make significant a step
    that is not."""
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
