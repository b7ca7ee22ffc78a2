"""What one night does to a history: a contended night, a drop too young to be a change, a run that measured 0.

"Did last night get slower?" is asked of series whose nights are not all alike. One night at half speed must not
hide a level's step nor widen the band the latest is judged by; a drop of fewer than MIN_SEGMENT nights is no change
yet, and each of its nights says NO; a change found before its neighbour was is moved back to its place.
"""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scalelab.measure import changes, outliers
from scalelab.report import history

_DATES = pd.Series(pd.date_range("2026-01-01", periods=2000, freq="D", tz="UTC"))


def _series(n: int, sigma: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, sigma, n)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(60, 250), at=st.floats(0.2, 0.6), step=st.floats(5, 10), down=st.booleans(),
       night=st.floats(0, 1), factor=st.sampled_from([0.2, 0.33, 0.5, 2.0, 3.0, 20.0]), seed=st.integers(0, 2**32 - 1))
@example(n=120, at=0.75, step=6, down=True, night=0.3, factor=0.5, seed=3)  # the chapter's drop at night 90
@example(n=60, at=0.203125, step=5.0, down=True, night=0.0, factor=2.0, seed=9598)  # its first night after it
@example(n=60, at=0.203125, step=5.0, down=True, night=0.0, factor=2.0, seed=312)  # the step's first night 3.1
# scatters toward the level before, the wild night next: named 2 nights late, as the data place it
# judged against a median the wild night next to it pulled to the level before: named 3 nights late (outliers.tamed)
def test_one_contended_night_after_a_change_neither_hides_it_nor_widens_the_band(n, at, step, down, night, factor,
                                                                                 seed):
    """A step of 5 to 10 scatters, and one night after it 0.2 to 20 times as fast: the step is named within one
    run of its place (two where its first night drew nearer the level before), and the band for the latest (an
    ordinary night) is the new level's, so it holds the latest. With the sd of every run, a night at half speed
    among 30 made an 18 % drop fewer than two scatters: no change, and a band that spans both levels."""
    sigma = 0.03
    logs = _series(n, sigma, seed)
    k = int(at * n)
    logs[k:] += (-1 if down else 1) * step * sigma
    odd = k + 1 + int(night * (n - k - 3))  # never the latest, nor the change's first night (then no one can
    # tell which night it began: the night before it and the one after are each a level's)
    logs[odd] += math.log(factor)
    judged = history.judge(np.exp(logs), _DATES[:n])
    shift = (-1 if down else 1) * step * sigma
    looks_before = abs(logs[k]) < abs(logs[k] - shift)  # the step's first night drew nearer the level before: the
    # data place the step a night later, and the wild night beside it may be either level's
    assert any(abs(c.index - k) <= 1 + looks_before for _, c in judged["changes"]), (k, judged["changes"])
    low, high = judged["band"]
    new_level = math.exp(np.median(logs[k:]))
    assert low < new_level < high and high / low < math.exp(8 * sigma), (low, high, new_level)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(2 * changes.MIN_SEGMENT + 2, 150), at=st.floats(0, 1), step=st.floats(8, 20),
       up=st.booleans(), where=st.floats(0, 1), wild=st.floats(math.log(3), 3), high=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_a_wild_night_is_put_at_its_own_level_and_no_other_night_moves(n, at, step, up, where, wild, high, seed):
    """A step of 8 to 20 scatters (of noise bounded by one) between two levels of 6 nights or more, one night 3 to 20
    times too fast or too slow anywhere but the last night before the step and its first (there either level is the
    night's): taming moves that night alone, to its own level. A night beside the wild one is judged without it:
    the first night after a drop, the next one fast, was judged against a median of the level before and moved too
    (the change named nights late)."""
    sigma = 0.01
    k = changes.MIN_SEGMENT + 1 + int(at * (n - 2 * changes.MIN_SEGMENT - 2))  # each level MIN_SEGMENT good nights
    level = np.where(np.arange(n) >= k, (1 if up else -1) * step * sigma, 0.0)
    logs = level + np.random.default_rng(seed).uniform(-sigma, sigma, n)
    odd = [i for i in range(n) if i not in (k - 1, k)][int(where * (n - 2.0001))]
    logs[odd] += wild if high else -wild
    out = outliers.tamed(logs)
    assert np.array_equal(np.delete(out, odd), np.delete(logs, odd)), np.flatnonzero(out != logs)
    assert abs(out[odd] - level[odd]) <= sigma, (out[odd], level[odd])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2 * changes.MIN_SEGMENT + 4, 150), at=st.floats(0, 1), step=st.floats(8, 20),
       up=st.booleans(), where=st.floats(0, 1), wild=st.floats(math.log(3), 3), high=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
@example(n=48, at=0.5, step=8.0, up=False, where=0.0, wild=2.0, high=False, seed=300)  # the first night wild, and a
# rare alarm 11 nights after the step: the level after it ends there
def test_a_wild_night_moves_neither_level_of_a_change(n, at, step, up, where, wild, high, seed):
    """A change's before and after are the medians of its levels' nights but a wild one: a night 3 to 20 times too
    fast or too slow in either level pulled that level's median a night's worth toward it (6,397 where the folder
    without that night gave 6,435)."""
    sigma = 0.01
    k = changes.MIN_SEGMENT + 2 + int(at * (n - 2 * changes.MIN_SEGMENT - 4))
    logs = np.where(np.arange(n) >= k, (1 if up else -1) * step * sigma, 0.0)
    logs = logs + np.random.default_rng(seed).uniform(-sigma, sigma, n)
    odd = [i for i in range(n) if i not in (k - 1, k)][int(where * (n - 2.0001))]
    good, nights = np.delete(logs, odd), np.delete(np.arange(n), odd)
    logs[odd] += wild if high else -wild
    found = changes.find(np.exp(logs))
    at_k = [i for i, c in enumerate(found) if c.index == k]
    assert at_k, (found, k)
    cuts = [0, *(c.index for c in found), n]  # a level lies between a change and its neighbours (a rare alarm too)
    start, end = cuts[at_k[0]], cuts[at_k[0] + 2]
    change = found[at_k[0]]
    assert change.before == pytest.approx(math.exp(np.median(good[(nights >= start) & (nights < k)])), rel=1e-12)
    assert change.after == pytest.approx(math.exp(np.median(good[(nights >= k) & (nights < end)])), rel=1e-12)


def test_a_wild_night_the_night_after_a_step_leaves_the_step_named_at_its_own_night():
    """200 series of 30 to 400 nights (1 to 6 % scatter), a step of 5 to 10 scatters, and the night after it 0.2 to
    3 times as fast: the step is named at its own night in at least 196 (here 199). The night before the wild one,
    judged against a median the wild night pulled to the level before, was moved too: 128 (the change named a night
    or two late)."""
    exact = 0
    for seed in range(200):
        rng = np.random.default_rng([seed, 62])
        n, sigma = int(rng.integers(30, 401)), rng.uniform(0.01, 0.06)
        k = int(rng.integers(changes.MIN_SEGMENT + 2, n - changes.MIN_SEGMENT - 2))
        step = rng.choice([-1, 1]) * rng.uniform(5, 10) * sigma
        logs = rng.normal(0, sigma, n) + np.where(np.arange(n) >= k, step, 0.0)
        logs[k + 1] += math.log(rng.choice([0.2, 0.33, 0.5, 2.0, 3.0]))
        exact += k in [c.index for c in changes.find(np.exp(logs))]
    assert exact >= 196, exact


def test_nights_an_ordinary_scatter_off_stay_in_a_short_level_s_band_though_the_rest_lie_close():
    """A review's case (nightly_series.py --nights 30 --planted 20:-0.2): since the change, 13 nights within a
    tenth of a scatter of their median and 2 a scatter high. Judged by that level's own deviation alone, the 2 were
    left out as unusual and the band was a fraction of the series' scatter; the series' noise is the least scatter
    a night is judged by, so it holds them."""
    sigma = 0.03
    before = np.resize([0.5, -0.5], 25) * sigma
    after = np.insert(np.linspace(-0.1, 0.1, 13), [5, 9], 1.0) * sigma - 8 * sigma
    values = np.exp(np.r_[before, after, -8 * sigma])
    judged = history.judge(values, _DATES[:len(values)])
    assert [c.index for _, c in judged["changes"]] == [25], judged["changes"]
    assert judged["band"] == history.band(values[25:-1], noise=1.0), judged["band"]  # a floor past every night
    assert judged["band"] != history.band(values[25:-1]), "no longer a case where the level's own deviation drops"


def test_a_drop_fewer_nights_old_than_a_change_needs_is_no_change_and_its_latest_night_says_no():
    """200 series of 30 to 400 nights whose last 1 to 4 moved 6 to 12 scatters: a change is named before the drop in
    at most 2 (here 0; other seeds 2 and 1), and the latest is outside the band of the level before in all but 2
    (0; 1 and 1); before, a change was named a night or more early in 83 (100 with other seeds: its last segment of
    5 holding ordinary nights) and the latest was inside its band as often. A fifth night makes it a change,
    named within one run of its place, in at least 196 (199; 200, 200)."""
    early = inside = named = 0
    for seed in range(200):
        rng = np.random.default_rng([seed, 61])
        n, young, sigma = int(rng.integers(30, 401)), int(rng.integers(1, changes.MIN_SEGMENT)), rng.uniform(0.01, 0.06)
        logs = rng.normal(0, sigma, n + changes.MIN_SEGMENT)
        logs[n - young:] += rng.choice([-1, 1]) * rng.uniform(6, 12) * sigma
        judged = history.judge(np.exp(logs[:n]), _DATES[:n])
        early += bool(judged["changes"])
        inside += not history.inside(judged).startswith("NO")
        lasted = history.judge(np.exp(logs[:n - young + changes.MIN_SEGMENT]), _DATES)["changes"]
        named += [abs(c.index - n + young) <= 1 for _, c in lasted] == [True]
    assert (early, inside, named) <= (2, 2, 200) and named >= 196, (early, inside, named)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(60, 500), at=st.floats(0.2, 0.7), short=st.integers(changes.MIN_SEGMENT + 1, 12),
       first=st.floats(8, 12), second=st.floats(8, 12), seed=st.integers(0, 2**32 - 1))
@example(n=150, at=100 / 150, short=8, first=10, second=10, seed=23)
def test_two_steps_a_few_nights_apart_are_each_named_where_it_is(n, at, short, first, second, seed):
    """A level of 6 to 12 nights between two steps of 8 to 12 scatters, the same way: both named within one run
    (and, rarely, a change elsewhere: the false alarms' rate is changes.py's).
    The first split of such a series falls inside the short level (its best single step), and its runs before the
    second step were fewer than MIN_SEGMENT: never split off, the change named 2 or more nights late (23 of 200 at
    150 runs, 55 of 200 at 400)."""
    sigma = 0.02
    logs = _series(n, sigma, seed)
    a = int(at * n)
    logs[a:] += first * sigma
    logs[a + short:] += second * sigma
    found = [c.index for c in changes.find(np.exp(logs))]
    assert min(abs(i - a) for i in found) <= 1 and min(abs(i - a - short) for i in found) <= 1, (a, a + short, found)


@given(nights=st.integers(changes.SHORTEST + 3, 60), latest=st.sampled_from([0.0, -1.0, math.nan]))
@settings(max_examples=20, deadline=None)
def test_a_latest_run_that_measured_0_is_shown_and_outside_its_band(nights, latest):
    """A last night whose throughput is 0 (or below) is the latest, shown as it is and NO, not the night before's
    figure with a yes; it is counted among the values left out of the changes. A night that measured nothing (NaN)
    is no latest: the night before's is judged, against the band of those before it."""
    values = np.array([100.0, 101.0] * nights)[:nights]  # two levels that alternate: no change in them
    values[-1] = latest
    judged = history.judge(values, _DATES[:nights])
    if math.isnan(latest):
        assert judged["latest"] == values[-2] and judged["band"] == history.band(values[:-2]), judged
        assert judged["not_above_0"] == 0
        return
    assert judged["latest"] == latest and history.inside(judged) == "NO, below" and judged["not_above_0"] == 1
    assert judged["band"] == history.band(values[:-1])


def test_a_bad_stretch_of_five_nights_is_named_at_both_ends():
    """A review's series: 30 to 149 good nights, 5 nights 4 or 5 scatters slower, 40 good: both ends named within
    two nights in all 200 (within one in 199). An end of the stretch was dropped as a level too young (a side of
    exactly MIN_SEGMENT), the refit then cycled (a drop, a refit, a split) to its cap: 14 and 6 of 300 named nothing
    (2 and 0 before the refit)."""
    missed = []
    for scatters, base in ((4, 100000), (5, 200000)):
        for seed in range(base, base + 100):
            n = int(np.random.default_rng(seed).integers(30, 150))
            logs = np.r_[np.zeros(n), np.full(changes.MIN_SEGMENT, -scatters * 0.03), np.zeros(40)]
            logs += np.random.default_rng(seed).normal(0, 0.03, len(logs))
            found = [c.index for c in changes.find(np.exp(logs))]
            if not (found and min(abs(i - n) for i in found) <= 2 and min(abs(i - n - 5) for i in found) <= 2):
                missed.append((seed, n, found))
    assert not missed, missed


@settings(max_examples=60, deadline=None)
@given(levels=st.lists(st.tuples(st.integers(1, 60), st.floats(-0.3, 0.3)), min_size=1, max_size=6),
       sigma=st.sampled_from([0.0, 0.01, 0.03]), step=st.sampled_from([0.0, 1.0, 0.25]), seed=st.integers(0, 99))
def test_the_changes_found_are_where_the_refit_and_the_step_rule_leave_them(levels, sigma, step, seed):
    """What find names is a fixed point: refitted and judged by the step rule again, the changes stay (a series
    without scatter, quantized values among them, once split and merged on every pass until a cap)."""
    values = np.concatenate([np.full(n, 100 * math.exp(level)) for n, level in levels])
    values = values * np.exp(np.random.default_rng(seed).normal(0, sigma, len(values)))
    if step:
        values = np.maximum(np.round(values / step) * step, step)
    logs = outliers.tamed(np.log(values))
    found = [c.index for c in changes.find(values)]
    assert changes._large_enough(logs, changes._refit(logs, found)) == found


def test_a_series_without_scatter_settles_in_a_few_passes(monkeypatch):
    """Quantized nights, most neighbours equal: the series' noise is 0, and a short level beside a change needed
    no margin, so each pass split a change and the next dropped it, until a pass per run (2,000 here: 8 s at
    10,000 runs, against 1 s). Counted in passes, not timed."""
    values = np.r_[np.full(1000, 100.0), np.full(1000, 90.0)]
    values = np.round(values + np.random.default_rng(3).normal(0, 0.3, 2000))
    calls, moved = [], changes._moved
    monkeypatch.setattr(changes, "_moved", lambda logs, found: calls.append(1) or moved(logs, found))
    assert [c.index for c in changes.find(values)] == [1000] and len(calls) <= 10, len(calls)


@pytest.mark.parametrize("end", ["first", "last"])
def test_a_step_is_named_whatever_the_few_odd_nights_at_an_end_of_the_series(end):
    """A step of 4 to 6 scatters, and the first or last 4 nights at half speed (a level too young to name): the
    step is named within two nights in all 60 series (seeds of a review). The young level's best place was taken for
    the step's own, and the step dropped with it: 22 and 23 of 60 lost (0 at 53c263a)."""
    lost = []
    for seed in range(90000, 90060):
        rng = np.random.default_rng(seed)
        before, after, step = int(rng.integers(30, 301)), int(rng.integers(20, 201)), rng.uniform(4, 6) * 0.03
        logs = np.r_[np.zeros(before), np.full(after, step)]
        logs[slice(0, 4) if end == "first" else slice(-4, None)] += math.log(0.5)
        found = [c.index for c in changes.find(np.exp(logs + rng.normal(0, 0.03, len(logs))))]
        if not any(abs(i - before) <= 2 for i in found):
            lost.append((seed, before, found))
    assert not lost, lost


@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 80), off=st.integers(0, 6), factor=st.floats(0.5, 1.6), sigma=st.floats(0.005, 0.08),
       seed=st.integers(0, 2**32 - 1))
def test_no_change_never_says_every_level_held_where_a_latest_is_outside_its_band(n, off, factor, sigma, seed):
    """The summary under a history without a change: "every level held" only where each series' latest is inside
    its band (or has none); one below its band printed "No change in any series: every level held" under NO,
    below. Where one is outside, the summary counts those series, and the latest's own line says how far from its
    level and for how many runs in a row."""
    values = np.exp(np.random.default_rng(seed).normal(0, sigma, n))
    values[max(0, n - off):] *= factor
    row = {"runs": n, **history.judge(values, _DATES[:n])}
    steady = {"runs": 40, "band": (90.0, 110.0), "latest": 100.0}
    said, outside = history.no_change([row, steady]), history.inside(row).startswith("NO")
    judged = n >= changes.SHORTEST  # a shorter series is no level the summary says held: said apart
    assert ("held" not in said) == (outside and judged), (said, row)
    assert ("outside its band in 1 of them" in said) == (outside and judged), (said, row)
    assert ("(the latest of 1 outside its band)" in said) == (outside and not judged), (said, row)
    latest = history.latest_lines(row, str)
    assert bool(latest) == outside
    if outside:
        k = row["streak"]
        assert 1 <= k <= n and latest[0].startswith(f"the latest {abs(row['latest'] / row['level'] - 1) * 100:.0f} %")
        assert (f"; {k} runs in a row" in latest[0]) == (k > 1), latest  # its first date: the first of them
        assert k == 1 or f"since {_DATES[n - k].strftime('%Y-%m-%d')}" in latest[0], (latest, k)


@pytest.mark.parametrize("low", [1, 2, 3, 4])
def test_the_last_nights_below_the_band_are_counted_from_their_first_date(tmp_path, low):
    """The last 1 to 4 of 60 nights 20 % slow on 2 devices: no change yet (5 runs name one); the latest's line says
    how far below its level and, from 2 on, how many nights in a row since which date; the summary never says
    that every level held."""
    from scalelab.testing import nightly

    nightly.site(tmp_path, 60, planted=(60 - low, -0.2))
    out = _report(tmp_path)
    said = [line for line in out.splitlines() if line.startswith("  A 2 device(s), 1 node(s): throughput: the latest")]
    assert len(said) == 1 and "every level held" not in out and "No change in any series, but" in out, out
    assert " below its level (" in said[0] and 10 <= int(said[0].split("the latest ")[1].split(" %")[0]) <= 30, said
    first = (nightly.START + pd.Timedelta(days=60 - low)).strftime("%Y-%m-%d")
    assert (f"; {low} runs in a row below the band, since {first}" in said[0]) == (low > 1), said
    assert low > 1 or "one run so far, far from the runs around it" in said[0], said


def _report(folder) -> str:
    import contextlib
    import io

    from scalelab.report import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--output_dir", str(folder), "--history"]) == 0
    return out.getvalue()


def test_the_latest_s_line_says_where_the_run_before_it_lies_and_none_for_a_run_that_measured_nothing():
    """A review's cases: the run before the latest above the band while the latest is below ("the run before it
    inside" was said), and a latest of 0 (said "by chance": it measured nothing, and has a line of its own)."""
    level = 100 * np.exp(np.resize([0.01, -0.01, 0.005, -0.005], 30))
    row = history.judge(np.r_[level, 102.5, 97.5], _DATES[:32])
    (line,) = history.latest_lines(row, lambda v: f"{v:.0f}")
    assert history.inside(row) == "NO, below" and "; the run before it above it: one run in 5 lies outside" in line
    row = history.judge(np.r_[level, 100.0, 97.5], _DATES[:32])
    assert "; the run before it inside: " in history.latest_lines(row, str)[0]
    row = history.judge(np.r_[level, 0.0], _DATES[:31])
    assert history.inside(row) == "NO, below" and history.latest_lines(row, str) == [] and row["not_above_0"] == 1


def test_a_change_in_efficiency_is_the_difference_of_the_levels_as_printed():
    """94.4 % → 76.6 % printed as "-18 points (94 % → 77 %)": the points are now those of the two printed levels."""
    row = {"changes": {column: [] for column, _, _ in history.METRICS}, "unit": "tokens/s", "scaling": "weak"}
    row["changes"]["efficiency"] = [(pd.Timestamp("2026-07-01", tz="UTC"), changes.Change(10, 0.944, 0.766))]
    assert history.change_lines(row) == ["2026-07-01: efficiency -17 points (94 % → 77 %)"]
