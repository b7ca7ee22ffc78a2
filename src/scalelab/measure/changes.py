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
multiple looks; stopped once the share is past ALPHA; SHORT_SHUFFLES in a short segment, whose p is near ALPHA for
any step), and (2) each part it leaves holds MIN_SEGMENT runs; each part is then searched again. Of the splits kept,
a change is one whose step is (3) at least STEP_SCATTERS runs' own scatter between the segments its neighbouring
splits leave, pooled with the whole series' as PRIOR_RUNS runs more (a significant 0.5 % is not "got slower", nor
is a step most single nights reach; nor a wobble inside a short level whose two halves of 5 runs each scattered
little by chance): the weakest is dropped and its segments merged until each step left passes. Judged between the
final segments, not at the first split, so a level that goes and comes back (a bad month, then fixed) names both its
steps. Then each change is moved to the best step between its neighbours, dropped where the others, moved, explain
the series as well, or split in two where a short level lies around it (a split made before its neighbour's may cut
off fewer than MIN_SEGMENT runs of a short level: never split off again, the change named nights late), until the
changes are as they were once before; and one at either end of the series is dropped where its level there has
lasted fewer than MIN_SEGMENT runs (a drop in the last 4 nights was named the night before it began, and the latest
judged inside a band that held both levels).

A night far from its neighbours (a contended node at half speed) is set to their median first (outliers.tamed):
least squares took one such night for a stretch, in the series and in every shuffle, and a step beside it was not
significant (a 6-scatter step among 1 to 3 such nights missed in 386 of 600 series; now 1). A segment's scatter
leaves such nights out as well (outliers.usual), and so does history.py's band for the latest.

On change-free series, 3 of 2,400 name a change (3 % scatter, 30 to 400 runs; 4 before these rules), each a stretch
of 5 runs some 2 scatters off; 0 of 600 at 1 to 10 % scatter, and 0 of 600 with 1 to 3 wild nights each;
tests/unit/test_history.py holds 400 series of 1 to 10 % scatter to at most 2.5 %. Shuffles assume the nights are
exchangeable without a change: a slow drift is not a step and may be cut into several. Deterministic: each segment's
shuffles come from a generator seeded by its place in the series (`significant`). Torch- and pandas-free:
report/history.py feeds it each configuration's series.
"""

import functools
import math
from math import comb
from typing import NamedTuple, Sequence

import numpy as np

from scalelab.measure.outliers import LEVEL, noise, tamed, usual

MIN_SEGMENT = LEVEL  # runs on each side of a change: fewer is a bad night or two, not a lasting step
ALPHA = 0.01  # the share of a change-free segment's shuffles allowed to reach the statistic (a false alarm)
SHUFFLES = 199  # the shuffles a split is tested against: p = (1 + reached) / 200
SHORT_RUNS, SHORT_SHUFFLES = 40, 999  # a segment this short is cheap to shuffle: p's steps 0.1 %, not 0.5 %
# the shortest series judged: a perfect step's p at most ALPHA / 2, 2 of C(n, n/2) arrangements (the high runs first
# or last; below 3 MIN_SEGMENT runs no stretch fits inside); at 10 runs, 0.8 %, it was found or not by the draw
SHORTEST = next(n for n in range(2 * MIN_SEGMENT, 100) if 2 / comb(n, n // 2) <= ALPHA / 2)
SEED = 20261202
TIE = 1e-9  # statistics this close (relative) are one: rounding, never a difference a series shows
STEP_SCATTERS = 2.0  # the least step named, in the segments' own run-to-run scatter (sd of log value)
PRIOR_RUNS = 10  # the series' scatter counts as this many runs' in a step's (a short segment's own is a guess)
EXTRA = 20.0  # what a short level found beside a change must explain more than the change alone, in runs' variance
ARC_MAX = 200  # a segment of up to this many runs is searched for a stretch of any length unlike the rest
STRETCH_MAX = 30  # a longer one for steps and for stretches of up to this many runs (a bad week, a bad month)


class Change(NamedTuple):
    """A lasting step: the first run after it (its index in the series), the level before and after (medians of
    the segments either side, of their nights not set aside as wild), and the step as after ÷ before − 1."""
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
    """One run's scatter in a segment: the sd of log(value) (≈ relative sd) of its usual runs, 0 for fewer than two:
    one contended night at half speed among 30 would make a step of 18 % fewer than 2 scatters."""
    usual_ = usual(logs)
    return float(np.std(usual_, ddof=1)) if len(usual_) > 1 else 0.0


def find(values: Sequence[float]) -> list:
    """[Change] in the series (each value > 0, in time order), earliest first."""
    raw = np.log(np.asarray(values, dtype=float))
    return found_in(raw, tamed(raw))


def found_in(raw: np.ndarray, logs: np.ndarray) -> list:
    """find's changes in a series' log values (raw), searched as `tamed` took them (logs): for a caller that says
    which nights were taken so (report/history.py), without taming the series twice."""
    found = []
    _segment(logs, 0, found)
    found = _large_enough(logs, sorted(found))
    been = set()
    while tuple(found) not in been:  # until the refit and the step rule leave the changes as they were (or as once)
        been.add(tuple(found))
        found = _large_enough(logs, _refit(logs, found))
    kept = raw == logs  # the nights taken as measured: a night set aside (outliers.tamed) is no level's
    return [Change(i, _level(raw, kept, found, i, -1), _level(raw, kept, found, i, +1)) for i in found]


def _refit(logs: np.ndarray, found: list) -> list:
    """The changes moved where they fit best (_moved), fewer where the rest explain as much (_fewer), then one split
    in two where a short level lies around it (_two_steps), until none of these changes them or a state repeats."""
    found, sd, been = list(found), noise(logs) or scatter(logs), set()
    while tuple(found) not in been:  # a state met before ends it: a drop and a split may undo each other
        been.add(tuple(found))
        moved = _moved(logs, found)
        if moved is None:
            moved = _fewer(logs, found)
        if moved is not None:
            found = moved
            continue
        for k in range(len(found)):  # once every change is where it fits best: a short level beside one?
            start, end = _around(found, k, len(logs))
            two = _two_steps(logs[start:end], found[k] - start, sd)
            if two:
                found[k:k + 1] = [start + c for c in two]
                break
        else:
            return found
    return found


def _fewer(logs: np.ndarray, found: list):
    """found less a change beside a level under 2 MIN_SEGMENT runs where the others, moved, explain the series as well
    (None: none can go). Splits of 5 runs a run off a short level lock each other: [179, 184, 189] for 181-187."""
    now = _unexplained(logs, found) if found else 0.0
    for k in range(len(found)):
        start, end = _around(found, k, len(logs))
        if min(found[k] - start, end - found[k]) >= 2 * MIN_SEGMENT:
            continue
        fewer, been = found[:k] + found[k + 1:], set()
        while fewer is not None and tuple(fewer) not in been:
            been.add(tuple(fewer))
            last, fewer = fewer, _moved(logs, fewer)
        if _unexplained(logs, last) <= now * (1 + TIE):
            return last
    return None


def _unexplained(logs: np.ndarray, found: list) -> float:  # the sum of squares left about each segment's mean
    return float(sum(((part - part.mean()) ** 2).sum() for part in np.split(logs, found)))


def _moved(logs: np.ndarray, found: list):
    """found with its first change that fits better elsewhere between its neighbours moved (or dropped, where the
    level it leaves at either end of the series is young); None where each fits best where it is. Between two
    changes a short level is rule 2's and 3's to judge: dropping one end of a bad week of 5 nights lost both."""
    for k in range(len(found)):
        start, end = _around(found, k, len(logs))
        part, now = logs[start:end], found[k] - start
        at = _step_at(part, now)
        if _young(part, at, first=start == 0, last=end == len(logs)):
            if abs(at - now) <= MIN_SEGMENT:  # this change is that young level's
                return found[:k] + found[k + 1:]
            continue  # another's: 4 odd last nights pulled a real step from 30 to 90, and it was dropped there
        if at != now:
            return [*found[:k], start + at, *found[k + 1:]]
    return None


def _around(found: list, k: int, n: int) -> tuple:
    """(start, end): the runs between change k's neighbours (the series' ends where it has none)."""
    return found[k - 1] if k else 0, found[k + 1] if k + 1 < len(found) else n


def _explained_by_step(logs: np.ndarray, at: np.ndarray) -> np.ndarray:
    """_explained's statistic of each step i of `at` (the stretch 0..i−1): i (n − i) / n (mean before − after)²."""
    rest = len(logs) - at
    return _explained(logs, np.zeros_like(at), at, 1.0 / at, 1.0 / rest, at * rest / len(logs))


def _step_at(logs: np.ndarray, now: int) -> int:
    """The single step that explains most of a segment (_explained_by_step), MIN_SEGMENT runs or more a side; `now`
    where none explains more (a tie moves nothing)."""
    at = np.arange(MIN_SEGMENT, len(logs) - MIN_SEGMENT + 1)
    stats = _explained_by_step(logs, at)
    best = int(np.argmax(stats))
    return int(at[best]) if stats[best] > stats[now - MIN_SEGMENT] * (1 + TIE) else now


def _young(logs: np.ndarray, at: int, first: bool, last: bool) -> bool:
    """Whether a side of just MIN_SEGMENT runs that a step at `at` leaves (the series' first runs where `first`, its
    last where `last`) is split better by a step past its edge: its level has lasted fewer than MIN_SEGMENT runs."""
    n, here = len(logs), _explained_by_step(logs, np.array([at]))[0]
    past = [np.arange(1, at)] if first and at == MIN_SEGMENT else []
    past += [np.arange(at + 1, n)] if last and n - at == MIN_SEGMENT else []
    return any(_explained_by_step(logs, p).max() > here * (1 + TIE) for p in past if len(p))


def _two_steps(logs: np.ndarray, at: int, sd: float) -> tuple:
    """(i, j) where a level of MIN_SEGMENT to 2 MIN_SEGMENT − 1 runs around the step at `at` explains EXTRA runs'
    variance (sd²) more than the step alone and its median stands STEP_SCATTERS sd from those either side; else ().
    A single step's noise does neither (EXTRA: a 4.5-sd chance for one look, 50 looked at)."""
    n, best = len(logs), ()
    if sd <= 0:  # a series without scatter: no margin to judge a short level by
        return best
    fit = _explained_by_step(logs, np.array([at]))[0] + EXTRA * sd ** 2
    total = np.concatenate(([0.0], np.cumsum(logs)))
    for i in range(max(MIN_SEGMENT, at - 2 * MIN_SEGMENT + 1), at + 1):
        for j in range(max(at, i + MIN_SEGMENT), min(n - MIN_SEGMENT, i + 2 * MIN_SEGMENT - 1) + 1):
            sums, counts = np.diff(total[[0, i, j, n]]), np.array([i, j - i, n - j])
            explained = float((sums ** 2 / counts).sum() - total[-1] ** 2 / n)
            middle = np.median(logs[i:j])
            if explained > fit and min(abs(middle - np.median(logs[:i])), abs(np.median(logs[j:]) - middle)) \
                    >= STEP_SCATTERS * sd:
                best, fit = (i, j), explained
    return best


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
    sd = noise(logs)
    while found:
        edges = [0, *found, len(logs)]
        ratios = [_steps(logs[edges[j - 1]:edges[j]], logs[edges[j]:edges[j + 1]], sd)
                  for j in range(1, len(edges) - 1)]
        weakest = int(np.argmin(ratios))
        if ratios[weakest] >= STEP_SCATTERS:
            break
        found = found[:weakest] + found[weakest + 1:]
    return found


def _steps(before: np.ndarray, after: np.ndarray, sd: float) -> float:
    """The step between two segments' medians in their run scatter, pooled with the series' (sd, as PRIOR_RUNS
    runs more: two segments of 5 runs scattered a third of it by chance, and a wobble of one sd inside a short
    level passed for a change); inf where none scatters."""
    step = abs(float(np.median(after) - np.median(before)))
    own = [(len(part) - 1, scatter(part)) for part in (before, after)]
    within = math.sqrt((sum(df * s ** 2 for df, s in own) + PRIOR_RUNS * sd ** 2) / (sum(df for df, _ in own)
                                                                                    + PRIOR_RUNS))
    return step / within if within > 0 else math.inf if step > 0 else 0.0


def significant(logs: np.ndarray, stat: float, offset: int) -> bool:
    """Whether at most ALPHA of the segment's shuffles (shuffles_for) reach its best statistic, p = (1 + reached) /
    (shuffles + 1): stopped at the shuffle that makes it more (a change-free segment's first few, mostly). Each
    segment shuffles with a generator of its own (seeded by its place in the series), so where one stops moves no
    other segment's shuffles."""
    rng = np.random.default_rng([SEED, offset, len(logs)])
    reached, shuffles = 0, shuffles_for(len(logs))
    for _ in range(shuffles):
        reached += reaches(_best(rng.permutation(logs))[1], stat)
        if (1 + reached) / (shuffles + 1) > ALPHA:
            return False
    return True


def shuffles_for(n: int) -> int:
    """A segment of n runs' shuffles: SHORT_SHUFFLES up to SHORT_RUNS (a 10-run p of 0.8 %: 199 let the draw decide)."""
    return SHORT_SHUFFLES if n <= SHORT_RUNS else SHUFFLES


def reaches(shuffled: float, stat: float) -> bool:
    """Whether a shuffle's statistic reaches the series' own, ties within TIE of it counted: a shuffle that puts the
    same values inside and outside the stretch sums them in another order, and the statistic (a difference of means
    of logs, squared) comes out some 1e-14 off. Counted strictly, ties among repeated values make significant a step
    that is not."""
    return shuffled >= stat * (1 - TIE)


def _level(logs: np.ndarray, kept: np.ndarray, found: list, i: int, side: int) -> float:
    """The median value of the segment before (side −1) or after (+1) change i, between its neighbours, of its
    nights kept (all of them where none is)."""
    start, end = _around(found, found.index(i), len(logs))
    part = slice(start, i) if side < 0 else slice(i, end)
    mine = logs[part][kept[part]]
    return float(np.exp(np.median(mine if len(mine) else logs[part])))


def regime(values: Sequence[float], changes: list) -> list:
    """The values since the last change (the series' current level)."""
    return list(values[changes[-1].index:]) if changes else list(values)
