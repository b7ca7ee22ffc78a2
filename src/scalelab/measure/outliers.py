"""Runs no level holds: a night far from the nights around it taken at their median, a run unusual for its band.

A site's nightly series (measure/changes.py searches it for lasting steps; report/history.py judges its latest
against a band) holds now and then a night no level explains: a contended node at half speed, a link that failed
and came back. Least squares takes such a night for a stretch of its own, and a band's sd widens past a level's
step; so the search takes it at its neighbours' median (`tamed`, WILD scatters off) and a band leaves out what is
OUTLIER robust scatters from its level's median (`usual`), each judged by at least the series' own night-to-night
noise (`noise`). What either took otherwise than measured, history.py says under its table. Torch- and pandas-free.
"""

import math

import numpy as np

LEVEL = 5  # the fewest runs a level holds (changes.MIN_SEGMENT): a night is judged in a window of 2 LEVEL − 1, so a
# level's runs are their own windows' median and only a night or a few, no level, can be far from it
OUTLIER = 3.5  # a run this many robust sds (1.4826 × the median absolute deviation) from its level's median
WILD = 5.0  # a night this many sds from its neighbours' median is no level's: one contended node, a failed link


def usual(logs, floor: float = 0.0) -> np.ndarray:
    """A segment's runs but those OUTLIER robust sds (1.4826 × the median absolute deviation, or `floor` where that
    is less: the whole series' noise) from its median, what a normal scatter gives once in 2,000 runs; all where
    both are 0 (more than half the runs equal). A short segment's own deviation may be a fraction of its scatter by
    chance: 7 of 9 nights close together left out 2 an ordinary scatter high, and its band was ±0.85 % at 3 %."""
    logs = np.asarray(logs, dtype=float)
    return logs[usual_mask(logs, floor)]


def usual_mask(logs: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Which of a segment's runs `usual` keeps (True), in their order: what says which nights a band left out."""
    off = np.abs(logs - np.median(logs)) if len(logs) else logs
    reach = OUTLIER * max(1.4826 * float(np.median(off)), floor) if len(logs) else 0.0
    return off <= reach if reach > 0 else np.ones(len(logs), dtype=bool)


def tamed(logs: np.ndarray) -> np.ndarray:
    """The series with each run WILD sds from the median of the 2 LEVEL − 1 runs around it put at the median of
    its window (the sd: the larger of noise's and the runs' distances from those medians'; noise's alone was a third
    of the series' own in 1 of 44 of 17 to 60 runs). A level of LEVEL runs is its runs' neighbours' median, so
    only a night or a few move: least squares (and each shuffle) took one night at a fifth of the speed for a
    stretch. A wild night is no other night's neighbour: of the nights far at first, the farthest within reach of
    each other is set aside, and the others judged again in windows without it (their nearest others), until none
    is far; each set aside goes to the median of itself and its 2 LEVEL − 2 nearest others. Judged in one
    pass, the first night after a change, a wild night the next, was judged against a median of the level before:
    both moved, and the change was named 1 to 3 nights late."""
    reach = LEVEL - 1
    if len(logs) <= 2 * reach:
        return logs
    off = np.abs(logs - _window(logs, np.arange(len(logs)), np.nanmedian))
    sd = max(noise(logs), 1.4826 * float(np.median(off)) / 0.86)  # 0.86: that median's share of a normal sd
    if not sd > 0:
        return logs
    wild, candidate = np.zeros(len(logs), dtype=bool), off > WILD * sd  # far at first: judged again and again,
    kept = np.arange(len(logs))  # a level's edge might be eaten away a night at a time
    while candidate.any():
        far = candidate[kept] & (off[kept] > WILD * sd)
        candidate[kept[~far]] = False  # no longer far: stays as it is
        at = np.flatnonzero(far)
        score = np.where(far, off[kept], 0.0)
        worst = kept[at[score[at] >= _window(score, at, np.nanmax)]]  # the farthest within reach
        wild[worst], candidate[worst] = True, False
        kept = np.flatnonzero(~wild)
        places = np.searchsorted(kept, worst)  # the others judged again where one set aside was among their
        moved = np.unique((places[:, None] + np.arange(-reach, reach)).ravel())  # nearest: only those windows
        moved = moved[(moved >= 0) & (moved < len(kept))]  # (each pass over every window: 20 s for 1,000 in a row)
        off[kept[moved]] = np.abs(logs[kept[moved]] - _window(logs[kept], moved, np.nanmedian))
    if not wild.any():
        return logs
    kept, out = np.flatnonzero(~wild), logs.copy()
    for night in np.flatnonzero(wild):
        at = int(np.searchsorted(kept, night))
        out[night] = np.median(logs[np.r_[kept[max(0, at - reach):at], night, kept[at:at + reach]]])
    return out


def _window(values: np.ndarray, at: np.ndarray, statistic) -> np.ndarray:
    """statistic (np.nanmedian, np.nanmax) of the window of each place `at` in values: itself and the LEVEL − 1 values
    on either side (fewer at the ends: those there are)."""
    reach = LEVEL - 1
    padded = np.pad(values, reach, constant_values=np.nan)
    return statistic(padded[at[:, None] + np.arange(2 * reach + 1)], axis=1)


def noise(logs: np.ndarray) -> float:
    """One run's scatter in a whole series, its changes and outliers aside: 1.4826 × the median distance between
    neighbours ÷ √2 (a step moves one distance of many)."""
    return 1.4826 * float(np.median(np.abs(np.diff(logs)))) / math.sqrt(2) if len(logs) > 1 else 0.0
