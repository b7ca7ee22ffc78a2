"""`benchmark.py --history`: a site's nightly series, the latest run against the series' own scatter, and the date and
size of a lasting change (measure/changes.py's rule, held to its false-alarm rate on series no one planted)."""

import contextlib
import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from scalelab.errors import UsageError
from scalelab.measure import changes
from scalelab.report import cli, history, perflog
from scalelab.testing import nightly

_night, _site = nightly.night, nightly.site


def _report(folder, *args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--output_dir", str(folder), "--history", *map(str, args)]) == 0
    return out.getvalue()


def test_a_planted_step_is_named_with_its_date_and_size(tmp_path):
    """Busbw on the 2-device runs fell 18 % on night 50 (2026-07-21) of 80: the history says that date and size for
    throughput, efficiency and busbw, and nothing for the 1-device runs."""
    _site(tmp_path, 80, planted=(50, -0.18))
    out = _report(tmp_path)
    lines = [line for line in out.splitlines() if line.startswith("  A 2 device(s), 1 node(s): 20")]
    assert lines and all("2026-07-21" in line for line in lines), out
    said = lines[0]
    for name in ("throughput", "efficiency", "busbw"):  # efficiency in points (94 % → 77 %: -17 points)
        size = int(said.split(f"{name} ")[1].split(" ")[0])
        assert -22 <= size <= -14, said
    assert not any(line.startswith("  A 1 device(s)") for line in out.splitlines()), out


def test_a_bad_week_then_fixed_is_named_on_the_night_it_began_and_the_night_it_ended(tmp_path):
    """The 2-device runs 20 % slower for nights 60-66 of 120 (2026-07-31 to 2026-08-06): two changes, each dated by
    the first night after it, their sizes as the report prints them (searched for single steps, none was named)."""
    _site(tmp_path, 120, planted=(60, -0.2, 67))
    out = _report(tmp_path)
    lines = [line for line in out.splitlines() if line.startswith("  A 2 device(s), 1 node(s): 20")]
    assert [line.split(": ")[1] for line in lines] == ["2026-07-31", "2026-08-07"], out
    sizes = [int(line.split("throughput ")[1].split(" %")[0]) for line in lines]
    assert -25 <= sizes[0] <= -15 and 18 <= sizes[1] <= 33, out  # 1 / 0.8 - 1 = +25 %


def test_a_night_at_half_speed_is_named_as_taken_at_its_neighbours_median_not_as_a_change(tmp_path):
    """60 nights, the 2-device run of night 30 (2026-07-01) at half speed: no change, and a line under the table
    names that night and what it measured; before, the report left it out of the search and the band in silence."""
    _site(tmp_path, 60)
    path = next(tmp_path.glob("night0030-gpt-2x*/result.json"))
    data = json.loads(path.read_text())
    data["timing"]["tokens_per_s"] /= 2
    data["timing"]["samples_per_s"] /= 2
    path.write_text(json.dumps(data))
    out = _report(tmp_path)
    said = [line for line in out.splitlines() if line.startswith("  A 2 device(s), 1 node(s): throughput: ")
            and ": the latest " not in line]  # (the latest night may lie outside its band by chance: said apart)
    assert len(said) == 2 and "No change in any series" in out, out
    assert said[0].endswith(" 1 run(s) over 5 scatters from the runs around them, taken at their neighbours' "
                            f"median in the search for changes: 2026-07-01 "
                            f"({history._cell(data['timing']['tokens_per_s'], 'throughput', 'tokens/s')})"), said
    halved = history._cell(data["timing"]["tokens_per_s"], "throughput", "tokens/s")
    assert said[1].endswith(" 1 run(s) since the last change left out of the band: over 3.5 scatters from their "
                            f"median: 2026-07-01 ({halved})"), said


def test_a_series_without_a_step_names_none(tmp_path):
    _site(tmp_path, 60)
    out = _report(tmp_path)
    assert "No change in any series" in out and " 60 " in out.split("History")[1], out


@pytest.mark.parametrize("nights, said", [(10, "No change can be named yet: a series is judged from 11 runs on (a "
                                                 "change: 5 or more on each side); the longest here has 10."),
                                            (12, "No change in any series")])
def test_a_history_too_short_to_show_a_change_says_so_not_that_every_level_held(tmp_path, nights, said):
    """Fewer runs than a change can be significant in (10 runs: a perfect step's p is 0.8 %, found or not by the
    draw) name no change because none can be found: the report says that, never "every level held"; a mix says
    how many series were judged (unit: no_change)."""
    _site(tmp_path, nights)
    out = _report(tmp_path).split("History")[1]
    held = "every level held" in out or "but the latest is outside its band" in out  # (its latest said apart)
    assert said in out and held == (nights >= changes.SHORTEST), out
    rows = [{"runs": n, "band": (90.0, 110.0), "latest": 100.0} for n in (12, 3, 11, 10)]
    assert history.no_change(rows) == ("No change in the 2 series of 11 runs or more: each level held within its "
                                       "own scatter; 2 shorter series not judged.")
    rows[0]["latest"] = 80.0  # a latest below its band: no level held it
    assert history.no_change(rows) == ("No change in the 2 series of 11 runs or more, but the latest is outside its "
                                       "band in 1 of them (the lines above say how far and since when); 2 shorter "
                                       "series not judged.")
    rows[0]["latest"], rows[1]["latest"] = 100.0, 80.0  # a shorter series' latest below: not one of those judged
    assert history.no_change(rows) == ("No change in the 2 series of 11 runs or more: each level held within its "
                                       "own scatter; 2 shorter series not judged (the latest of 1 outside its band).")


@pytest.mark.parametrize("n", range(changes.SHORTEST, 3 * changes.MIN_SEGMENT))
def test_a_perfect_step_in_the_shortest_series_judged_is_named_whatever_the_draw(n):
    """From SHORTEST runs on, a level that doubles (every run after above every run before) is named at every
    place a series of n runs allows and for any offset its shuffles are seeded by: its p is at most ALPHA / 2,
    and the draw of SHORT_SHUFFLES decides nothing (with 199, a perfect step in 10 to 12 runs was named or not by
    the seed)."""
    rng = np.random.default_rng(n)
    for at in range(changes.MIN_SEGMENT, n - changes.MIN_SEGMENT + 1):
        logs = rng.normal(0, 0.02, n) + np.where(np.arange(n) >= at, math.log(2), 0)
        assert [c.index for c in changes.find(np.exp(logs))] == [at], (n, at)


def test_the_band_holds_about_four_latest_runs_in_five():
    """The band is made from the runs before the latest (never from it): over 1,000 series of 5 to 200 runs at 1 to
    10 % scatter, the latest lands inside 80 % of the time, within the sampling error (76–84 %)."""
    rng = np.random.default_rng(5)
    inside = 0
    for _ in range(1000):
        values = np.exp(rng.normal(0, rng.uniform(0.01, 0.1), int(rng.integers(5, 200)))) * 1000
        low, high = history.band(list(values[:-1]))
        inside += low <= values[-1] <= high
    assert 760 <= inside <= 840, inside


@pytest.mark.parametrize("factor, said", [(0.7, "NO, below"), (1.4, "NO, above")])
def test_the_latest_run_outside_its_band_says_no_and_on_which_side(tmp_path, factor, said):
    """One night far off: not a change (one run), but outside its band, and which side of it (a night faster than
    its band is no slowdown: a bare NO read as one)."""
    _site(tmp_path, 30)
    _night(tmp_path, 30, 2, 6400 * factor, busbw=0.8)
    out = _report(tmp_path).split("History")[1]
    row = next(line for line in out.splitlines() if line.strip().startswith("A") and " 2 " in line)
    assert f" {said} " in f"{row} " and "No change in any series" in out, out


def test_history_draws_each_group_with_its_changes(tmp_path):
    _site(tmp_path, 40, planted=(20, -0.3))
    plots = tmp_path / "plots"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--output_dir", str(tmp_path), "--history", "--plot", str(plots)]) == 0
    assert (plots / "history_A.png").stat().st_size > 10_000


@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])  # a shrink: minutes
@given(nights=st.integers(12, 60), at=st.floats(0.2, 0.8), step=st.sampled_from([None, -0.3, -0.15, 0.2]),
       seed=st.integers(0, 10**6))
def test_history_exports_what_it_prints(tmp_path_factory, nights, at, step, seed):
    """--history --export: history.csv holds each printed row (its runs, latest, band, inside) and
    history_changes.csv each printed change (its date, metric and size), in the CSVs' units; report.md holds the
    printed history; an export without --history writes no history file."""
    folder, export = tmp_path_factory.mktemp("nights"), tmp_path_factory.mktemp("export")
    _site(folder, nights, planted=None if step is None else (int(nights * at), step), seed=seed)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--output_dir", str(folder), "--history", "--export", str(export), "--markdown"]) == 0
    printed = out.getvalue().split("History (")[1].split("\nwritten: ")[0].rstrip()  # its table and lines
    assert printed in (export / "report.md").read_text()
    rows, said = pd.read_csv(export / "history.csv"), pd.read_csv(export / "history_changes.csv")
    table = [[cell.strip() for cell in line.strip("|").split("|")] for line in printed.splitlines()[3:]
             if line.startswith("| ")]
    assert len(table) == len(rows) == 2, printed
    for r, cells in zip(rows.itertuples(), table):
        band = "too few runs" if math.isnan(r.band_low) else f"{r.band_low:,.0f}–{r.band_high:,.0f}"
        assert cells[:9] == [r.letter, str(r.world_size), str(r.num_nodes), str(r.runs), r.first[:10], r.last[:10],
                             f"{r.latest:,.0f} {r.unit}", band, "—" if pd.isna(r.inside) else r.inside], (cells, r)
        # no band: the CSV's cell empty, not a dash
        assert r.inside in ("yes", "NO, below", "NO, above") or math.isnan(r.band_low)
    units = {"throughput": "tokens/s", "efficiency": "fraction", "busbw": "GB/s", "compute": "s", "waited": "s"}
    lines = [line for line in printed.splitlines() if line.startswith("  A ")]
    assert len(said) == sum(line.count(" % (") + line.count(" points (") for line in lines)
    for c in said.itertuples():
        line = next(line for line in lines if line.startswith(f"  {c.letter} {c.world_size} device(s)")
                    and f": {c.date[:10]}: " in line)
        size = f"{int(f'{c.after * 100:.0f}') - int(f'{c.before * 100:.0f}'):+d} points" if c.metric == "efficiency" \
            else f"{c.size * 100:+.0f} %"  # efficiency: the difference of the levels as printed
        assert f"{c.metric} {size} (" in line and c.unit == units[c.metric], (c, line)
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["--output_dir", str(folder), "--export", str(export / "plain")]) == 0
    assert not list((export / "plain").glob("history*"))


# --- the rule, on series no one planted a step in, and on steps of any size and place ---------------------------

def test_the_false_alarm_rate_is_what_the_rule_says():
    """Of 400 change-free series (30 to 400 nights, 1 to 10 % scatter), at most ALPHA name a change (the step floor
    makes it rarer still): at most 2.5 %, the sampling error's reach above 1 %."""
    rng = np.random.default_rng(11)
    alarms = sum(bool(changes.find(np.exp(rng.normal(0, rng.uniform(0.01, 0.1), int(rng.integers(30, 400))))))
                 for _ in range(400))
    assert alarms <= 0.025 * 400, alarms


@settings(max_examples=60, deadline=None)
@given(n=st.integers(30, 300), where=st.floats(0.2, 0.8), sigma=st.floats(0.005, 0.08),
       sigmas=st.floats(4, 12), down=st.booleans(), seed=st.integers(0, 2**32 - 1))
@example(n=227, where=0.203125, sigma=0.0625, sigmas=4.0, down=True, seed=268683)  # Welch's t put it at 41, not 46
def test_a_step_of_four_scatters_or_more_is_found_where_it_is(n, where, sigma, sigmas, down, seed):
    """A lasting step of ≥ 4 run scatters, with ≥ 6 runs on each side, is named: within one run of its place from 8
    scatters on, within four at 4 (noise moves the best split by a few runs then), its size within two scatters."""
    k = min(max(int(n * where), 6), n - 6)
    logs = np.random.default_rng(seed).normal(0, sigma, n)
    step = (-1 if down else 1) * sigmas * sigma
    logs[k:] += step
    found = changes.find(np.exp(logs))
    assert len(found) >= 1 and min(abs(c.index - k) for c in found) <= (1 if sigmas >= 8 else 4), (k, found)
    best = min(found, key=lambda c: abs(c.index - k))
    assert abs(math.log1p(best.size) - step) <= 2 * sigma, (best, step)


_LEVELS = st.lists(st.sampled_from([1.0, 1.5, 2.0]) | st.floats(0.5, 2.0), min_size=2 * changes.MIN_SEGMENT,
                   max_size=60)


@settings(max_examples=200, deadline=None)
@given(values=_LEVELS, offset=st.integers(0, 10 ** 6), part=st.floats(0.0, 1.0))
def test_a_permutation_test_stopped_early_decides_as_all_its_shuffles_would(values, offset, part):
    """significant() stops at the shuffle that puts p past ALPHA: its answer is what counting all its shuffles
    (shuffles_for: more up to SHORT_RUNS runs) of its generator gives, for a split's own statistic and for any
    threshold below it (most shuffles reach it)."""
    logs = np.log(np.array(values))
    stat = changes._best(logs)[1] * part
    rng = np.random.default_rng([changes.SEED, offset, len(logs)])
    shuffles = changes.shuffles_for(len(logs))
    reached = sum(changes.reaches(changes._best(rng.permutation(logs))[1], stat) for _ in range(shuffles))
    assert changes.significant(logs, stat, offset) is ((1 + reached) / (shuffles + 1) <= changes.ALPHA)


def test_one_shuffle_in_200_reaching_the_split_is_significant_and_the_shuffles_are_the_segment_s_own():
    """p = (1 + 1) / 200 is ALPHA itself: a change (the rule is p ≤ ALPHA). This segment's own generator (seeded by
    its place) has one shuffle reach its split; a generator seeded by its length alone would have five."""
    r = np.random.default_rng(140)
    n = int(r.integers(changes.SHORT_RUNS + 1, 80))
    logs = r.normal(0, 0.03, n)
    logs[n // 2:] -= r.uniform(0, 0.05)
    stat = changes._best(logs)[1]
    def reached(rng):
        return sum(changes.reaches(changes._best(rng.permutation(logs))[1], stat) for _ in range(changes.SHUFFLES))

    assert reached(np.random.default_rng([changes.SEED, 0, n])) == 1
    assert reached(np.random.default_rng([changes.SEED, n])) == 5
    assert changes.significant(logs, stat, 0)


def _stretch_named(n: int, a: int, b: int, sigma: float, sigmas: float, seed: int, within: int):
    """find on n runs of `sigma` scatter whose runs a..b−1 are moved `sigmas` scatters: True where both ends are named
    within `within` runs, else what was named (the assertion's message)."""
    logs = np.random.default_rng(seed).normal(0, sigma, n)
    logs[a:b] += sigmas * sigma
    found = [c.index for c in changes.find(np.exp(logs))]
    named = found and min(abs(i - a) for i in found) <= within and min(abs(i - b) for i in found) <= within
    return True if named else (a, b, found)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(100, 300), start=st.floats(0.2, 0.4), length=st.floats(0.3, 0.5), sigma=st.floats(0.005, 0.08),
       sigmas=st.floats(8, 12), down=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_a_level_that_goes_and_comes_back_names_both_its_steps(n, start, length, sigma, sigmas, down, seed):
    """A bad stretch, then fixed: both steps are named within two runs of their places. Judged at the first split
    (the step rule there), the side holding both levels has a median of neither: 77 % of these were named."""
    a = int(n * start)
    b = a + int(n * length)
    assert _stretch_named(n, a, b, sigma, (-1 if down else 1) * sigmas, seed, within=2) is True


@settings(max_examples=60, deadline=None)
@given(n=st.integers(30, 150), at=st.floats(0, 1), length=st.integers(changes.MIN_SEGMENT + 2, 20),
       sigma=st.floats(0.005, 0.08), sigmas=st.floats(6, 12), down=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_a_short_bad_stretch_anywhere_in_a_short_series_names_both_its_steps(n, at, length, sigma, sigmas, down,
                                                                              seed):
    """7 to 20 bad runs of 6 scatters or more, with 6 or more good runs on each side, in 30 to 150: both steps named
    within two runs. Searched for one step only, the first split of such a series moves the mean too little: 228 of
    300 series of 40 with a stretch of 11 to 14 were named at both ends, 174 of 300 of 60 with 7 to 10."""
    length = min(length, n - 12)  # 6 good runs after it too (30 runs and 20 bad left 4: no change yet)
    a = 6 + int(at * (n - length - 12))
    b = a + length
    assert _stretch_named(n, a, b, sigma, (-1 if down else 1) * sigmas, seed, within=2) is True


@settings(max_examples=30, deadline=None)
@given(n=st.integers(changes.ARC_MAX + 1, 3 * changes.ARC_MAX), at=st.floats(0, 1),
       length=st.integers(changes.STRETCH_MAX + 1, 5 * changes.STRETCH_MAX), sigma=st.floats(0.005, 0.08),
       sigmas=st.floats(8, 12), down=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_a_bad_stretch_longer_than_those_searched_is_named_where_it_starts_and_ends(n, at, length, sigma, sigmas,
                                                                                     down, seed):
    """Past ARC_MAX runs only stretches of up to STRETCH_MAX are tested: a longer bad one is matched best by a piece
    of it, whose ends lie inside it by fewer runs than a part may hold. Its ends are placed within one run (before
    a search of stretches without placing them put both exactly in 36 of 100 series of 365 with 31 to 45 bad runs
    of 10 scatters)."""
    a = 6 + int(at * (n - length - 12))
    b = a + length
    assert _stretch_named(n, a, b, sigma, (-1 if down else 1) * sigmas, seed, within=1) is True


def test_a_long_bad_stretch_found_by_a_piece_off_its_centre_is_placed_at_its_ends():
    """730 runs, 75 bad (244-318, 6 scatters): the piece tested is 276-305, so its ends may move only to 246 and
    306 within STRETCH_MAX; placed again from there, they reach 244 and 319 (placed once, 246 stayed: 2 bad runs
    that no part could hold)."""
    rng = np.random.default_rng(77000 + 100 * 75 + 3)
    start = int(rng.integers(100, 730 - 75 - 100))
    logs = rng.normal(0, 0.03, 730)
    logs[start:start + 75] -= 6 * 0.03
    assert start == 244 and changes._best(logs)[0] == (276, 306)
    assert [c.index for c in changes.find(np.exp(logs))] == [244, 319]


def test_a_bad_week_in_a_year_is_named_at_both_ends():
    """365 nights at 3 % scatter, a week of them 20 % down: found as a stretch unlike the rest. Searched for a single
    step, 49 of 200 such years (any week, 6 to 10 scatters) were named at both ends."""
    logs = np.random.default_rng(7).normal(0, 0.03, 365)
    logs[200:207] -= 0.2
    found = changes.find(np.exp(logs))
    assert [c.index for c in found] == [200, 207]
    assert [math.log1p(c.size) for c in found] == pytest.approx([-0.2, 0.2], abs=0.03)


@settings(max_examples=100, deadline=None)
@given(logs=st.lists(st.floats(-1, 1), min_size=2 * changes.MIN_SEGMENT, max_size=40),
       longer_than=st.sampled_from([None, 0, 15]), stretch_max=st.integers(changes.MIN_SEGMENT, 12))
def test_each_stretch_s_statistic_is_its_sum_of_squares_against_the_rest(logs, longer_than, stretch_max):
    """statistics_of_arcs against the arithmetic done one stretch at a time: every stretch of MIN_SEGMENT or more
    runs whose rest, and each side it leaves, hold MIN_SEGMENT or more (or none: a step), m (n − m) / n × (mean
    inside − mean outside)²; in a segment longer than ARC_MAX (longer_than: None, as it is), the steps and the
    stretches of up to STRETCH_MAX runs only."""
    logs, n, m = np.array(logs), len(logs), changes.MIN_SEGMENT
    limited = longer_than is not None and n > longer_than
    want = {}
    for first in range(n + 1):
        for after in range(first + m, n + 1):
            step = first == 0 or after == n
            if n - (after - first) >= m and first in (0, *range(m, n)) and after in (n, *range(0, n - m + 1)) \
                    and not (limited and (after == n or not step and after - first > stretch_max)):
                inside, outside = logs[first:after], np.concatenate([logs[:first], logs[after:]])
                gap = inside.mean() - outside.mean()
                want[first, after] = len(inside) * len(outside) / n * gap ** 2 if abs(gap) > 1e-12 else 0.0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(changes, "ARC_MAX", changes.ARC_MAX if longer_than is None else longer_than)
        patch.setattr(changes, "STRETCH_MAX", stretch_max)
        first, after, *_ = changes._arcs(n)
        got = dict(zip(zip(first.tolist(), after.tolist()), changes.statistics_of_arcs(logs).tolist()))
    assert got.keys() == want.keys()
    assert list(got.values()) == pytest.approx([want[k] for k in got], rel=1e-9, abs=1e-12)


def test_steps_that_partly_undo_each_other_are_each_named():
    """Five years of nights: -15 % at 400, +10 % at 900, -20 % at 1500. At the first split (1500) the runs before
    it hold three levels; each step is named between the segments the others leave, not there (which named 1500
    alone)."""
    logs = np.random.default_rng(12).normal(0, 0.03, 1825)
    logs[400:] -= 0.15
    logs[900:] += 0.1
    logs[1500:] -= 0.2
    found = changes.find(np.exp(logs))
    assert [c.index for c in found] == [400, 900, 1500]
    assert [math.log1p(c.size) for c in found] == pytest.approx([-0.15, 0.1, -0.2], abs=0.01)


_QUANTIZED = st.lists(st.sampled_from([88.2, 90.9, 100.0, 101.0]), min_size=2 * changes.MIN_SEGMENT, max_size=40)


@settings(max_examples=200, deadline=None)
@given(values=_QUANTIZED, seed=st.integers(0, 2**32 - 1), arcs=st.booleans())
def test_a_shuffle_that_keeps_each_side_s_values_reaches_the_split(values, seed, arcs):
    """A shuffle that keeps the best split's values inside its stretch and outside (either side of a step), in any
    order, ties it: summed in another order its statistic comes out some 1e-14 below, and counted strictly such a
    tie is not counted (p too small). In a segment of up to ARC_MAX runs (every stretch) and in a longer one (steps and
    stretches of up to STRETCH_MAX)."""
    logs = np.log(np.array(values))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(changes, "ARC_MAX", changes.ARC_MAX if arcs else 0)
        cuts, stat = changes._best(logs)
        if not cuts:
            return
        first, after = (0, *cuts) if len(cuts) == 1 else cuts
        inside = np.zeros(len(logs), dtype=bool)
        inside[first:after] = True
        rng, shuffled = np.random.default_rng(seed), logs.copy()
        shuffled[inside], shuffled[~inside] = rng.permutation(logs[inside]), rng.permutation(logs[~inside])
        assert changes.reaches(changes._best(shuffled)[1], stat)


def test_ties_among_repeated_values_count_against_a_step():
    """Twelve runs of four values: 12 of the segment's 999 shuffles reach its split, 9 of them in a tie, p = 13 /
    1000 > ALPHA. Counted strictly, 3 did (p = 4 / 1000: a change)."""
    logs = np.log([100.0, 101, 100, 100, 101, 100, 90.9, 100, 90.9, 88.2, 88.2, 88.2])
    stat, rng = changes._best(logs)[1], np.random.default_rng([changes.SEED, 0, len(logs)])
    shuffled = [changes._best(rng.permutation(logs))[1] for _ in range(changes.shuffles_for(len(logs)))]
    assert (sum(changes.reaches(s, stat) for s in shuffled), sum(s >= stat for s in shuffled)) == (12, 3)
    assert not changes.significant(logs, stat, 0)


def test_a_significant_step_smaller_than_two_scatters_is_no_change():
    """400 nights, a step of 1.5 scatters: the shuffles find it significant, the third rule names no change; at 3
    scatters it is named where it is."""
    rng = np.random.default_rng(5)
    logs = rng.normal(0, 0.03, 400)
    small, large = logs - np.where(np.arange(400) >= 200, 1.5 * 0.03, 0), logs - np.where(np.arange(400) >= 200,
                                                                                              3 * 0.03, 0)
    assert changes.significant(small, changes._best(small)[1], 0)
    assert changes.find(np.exp(small)) == []
    assert [abs(c.index - 200) <= 4 for c in changes.find(np.exp(large))] == [True]


def test_a_bad_night_or_a_series_too_short_is_no_change():
    values = [100.0] * 20 + [60.0] + [100.0] * 20
    noisy = [v * math.exp(0.01 * math.sin(i)) for i, v in enumerate(values)]
    assert changes.find(noisy) == []
    assert changes.find([100.0, 50.0] * 4) == []  # fewer than MIN_SEGMENT runs on a side


@pytest.mark.parametrize("values, expected", [([], None), ([5.0, 5.0], None), ([1.0, 1.0, 1.0], (1.0, 1.0))])
def test_a_band_needs_three_runs(values, expected):
    assert history.band(values) == (pytest.approx(expected) if expected else None)


def test_two_flat_levels_change_where_they_meet():
    """No scatter on either side: the split between them is the change, not one beside it."""
    assert [c.index for c in changes.find([0.1] * 10 + [0.3] * 10)] == [10]


def test_a_change_is_dated_by_its_own_run_where_runs_before_it_had_no_value():
    """Runs without a value (not finite, not above 0) are left out of the series, never out of the dates: the
    change's date is the first run after it, not the date of the run as many places later."""
    values = [float("nan"), 0.0, -1.0] + [100.0] * 10 + [70.0] * 10
    dates = pd.Series(pd.date_range("2026-01-01", periods=len(values), freq="D", tz="UTC"),
                      index=np.arange(len(values))[::-1] * 7)  # a groupby's slice: labels are not places
    (when, change), = history.judge(np.array(values), dates)["changes"]
    assert when == pd.Timestamp("2026-01-14", tz="UTC") and change.size == pytest.approx(-0.3)


def test_a_newest_run_without_a_throughput_is_not_judged(tmp_path):
    _site(tmp_path, 20)
    path = nightly.night(str(tmp_path), 20, 2, 6400.0)
    data = json.loads(open(path).read())
    data["timing"]["tokens_per_s"] = data["timing"]["samples_per_s"] = None
    with open(path, "w") as fh:
        json.dump(data, fh)
    out = _report(tmp_path).split("History")[1]
    row = next(line for line in out.splitlines() if line.strip().startswith("A") and " 2 " in line)
    assert " NO" not in f"{row} ", out


def test_each_groups_plot_names_its_own_unit():
    """Two groups in other units (samples/s, tokens/s): each history plot labels its own axis."""
    dates = pd.to_datetime(["2026-06-01", "2026-06-02"], utc=True)
    rows = [dict(letter=letter, unit=unit, world_size=1, num_nodes=1, link="", changes={"throughput": []},
                 dates=dates, throughput=[1.0, 2.0], band=None, far=[], last=dates[-1])
            for letter, unit in (("A", "samples/s"), ("B", "tokens/s"))]
    assert [fig.axes[0].get_ylabel() for _, fig in history.figures(rows)] == ["samples/s", "tokens/s"]


def test_the_plot_draws_the_latest_s_band_and_the_nights_far_from_their_neighbours(tmp_path):
    """What the table says of a series, drawn: its latest's band as a bar at its last date (where `inside` comes
    from) and each night taken at its neighbours' median as an x at what it measured."""
    _site(tmp_path, 60)
    _night(tmp_path, 30, 2, 3200.0, busbw=0.6)  # night 30 at half speed: far from its neighbours
    rows = history.follow(cli.build(str(tmp_path)).runs)
    (_, fig), = history.figures(rows)
    drawn = {line.get_label(): line for line in fig.axes[0].get_lines()}
    bar, far = drawn["80 % band for the latest"], drawn["far from its neighbours"]
    first = rows[0]
    assert list(bar.get_ydata()) == list(first["band"]) and len(set(bar.get_xdata())) == 1
    assert list(far.get_ydata()) == [v for _, v in rows[1]["far"]] == [pytest.approx(3200.0)]


def test_a_history_of_one_night_is_drawn_over_days_not_years():
    """matplotlib's own limits for a single date span four years (2024 to 2028 for one night of 2026)."""
    dates = pd.to_datetime(["2026-06-01"], utc=True)
    row = dict(letter="A", unit="tokens/s", world_size=1, num_nodes=1, link="", changes={"throughput": []},
               dates=dates, throughput=[1.0], band=None, far=[], last=dates[-1])
    (_, fig), = history.figures([row])
    low, high = fig.axes[0].get_xlim()
    assert 1.5 <= high - low <= 2.5, (low, high)  # days (matplotlib's date unit)


@settings(max_examples=300, deadline=None)
@given(times=st.lists(st.integers(0, 40), min_size=1, max_size=30), when=st.lists(st.integers(-5, 45), max_size=30))
def test_the_nearest_baseline_is_the_one_the_whole_matrix_names(times, when):
    """The baseline run nearest in time to each run, as argmin over every pair names it (the earliest of equals,
    at a tie the earlier), found without the pairs' matrix (which 30,000 runs of a site made 2 GB). Small integers
    draw the ties: repeated times, and a run halfway between two baselines."""
    base = np.array(sorted(times), dtype="datetime64[s]").astype("datetime64[ns]")
    at = np.array(when, dtype="datetime64[s]").astype("datetime64[ns]")
    expected = np.abs(base[None, :] - at[:, None]).argmin(axis=1) if len(at) else np.array([], dtype=int)
    assert history.nearest_in_time(base, at).tolist() == expected.tolist()


@settings(max_examples=300, deadline=None)
@given(value=st.floats(1e-6, 1e12), runs=st.integers(history.MIN_BAND_RUNS, 40))
def test_a_series_of_one_value_holds_its_latest_inside_its_band(value, runs):
    """A series that never moved (a count, a replicated folder): its band is exp(log mean ± 0), which rounding may
    put a few ulps off the value itself; the latest run, that same value, is inside it, never "NO"."""
    low_high = history.band([value] * runs)
    assert history.inside({"band": low_high, "latest": value}) == "yes"
    assert history.inside({"band": low_high, "latest": value * 1.000001}) == "NO, above"
    assert history.inside({"band": low_high, "latest": value * 0.999999}) == "NO, below"


@pytest.mark.parametrize("mode", [["--ranks"], ["--compare", "a", "b"], ["--reference", "r.yaml"],
                                  ["--write_reference", "r.yaml"]])
def test_a_mode_that_prints_no_history_refuses_history_in_one_line(tmp_path, mode):
    """--ranks, --compare and the reference modes print no history: --history beside them was dropped in silence."""
    _site(tmp_path, 12)
    with pytest.raises(UsageError, match="--history"):
        cli.main(["--output_dir", str(tmp_path), "--history", *mode] if mode[0] != "--compare" else
                 ["--history", *mode])


def test_a_changes_two_values_keep_three_digits_each():
    """'busbw +28 % (0.939 GB/s → 1.2 GB/s)' read as if the second were known to fewer digits: each value keeps 3
    significant digits, a trailing 0 too; from 100 on, whole numbers (never '100.' of a 99.96)."""
    values = (0.939, 1.2, 12, 99.94, 99.96, 1234.5, 0.0, -200.0, -0.5, 2e12, float("nan"))
    shown = ["0.939", "1.20", "12.0", "99.9", "100", "1,234", "0", "-200", "-0.500", "2.00e+12", "—"]
    assert [history._cell(v, "ddp_busbw_GBps", "GB/s") for v in values] == [f"{s} GB/s" for s in shown]
    # a perflog's variables, judged as the history's series are, print their values alike
    assert [perflog.cell(v, "GB/s") for v in values] == [f"{s} GB/s" if s != "—" else s for s in shown]


@pytest.mark.parametrize("flags", [[], ["--forecast"], ["--details"], ["--markdown"]])
def test_a_section_with_nothing_to_say_leaves_no_blank_lines_behind(tmp_path, flags):
    """A site's nightly folder has no benchmark and no multi-device prediction to judge: the track record and the
    nccl-tests logs printed nothing but a blank line each (three in a row before the History table), and --forecast
    a blank line alone (these results record no gradient size to calibrate on)."""
    _site(tmp_path, 20)
    out = _report(tmp_path, *flags)
    assert "History (" in out and "\n\n\n" not in out, out
    assert (cli.FORECAST_NONE in out) is ("--forecast" in flags), out  # asked for, and nothing to forecast: said


def test_markdown_and_report_md_end_each_table_before_the_notes_under_it(tmp_path):
    """--markdown and --export's report.md: GitHub reads a line right under a table's last row as one more row, so
    the history's change lines (and the Scaling table's notes) rendered as rows of the tables above them."""
    _site(tmp_path, 60, planted=(40, -0.2))
    out = _report(tmp_path, "--markdown", "--export", tmp_path / "export")
    md = (tmp_path / "export" / "report.md").read_text()
    for text in (out, md):
        lines = text.splitlines()
        assert "| group " in text and any(line.startswith("  A 2 device(s)") for line in lines), text
        assert not any(a.startswith("|") and b.strip() and not b.startswith("|") for a, b in zip(lines, lines[1:]))


def test_a_configuration_that_stopped_running_says_so_one_that_runs_weekly_does_not(tmp_path):
    """The 1-device runs of the last 20 of 60 nights gone: its latest is 20 nights old and its row said `yes` as if
    it were last night's. A line now says since when it has not run (it ran every day); the 2-device series, and a
    weekly one 10 days behind the newest run (within twice its own gap), say nothing of the kind."""
    _site(tmp_path, 60)
    for path in tmp_path.glob("night00[4-5]?-gpt-1x*"):
        for inner in path.iterdir():
            inner.unlink()
        path.rmdir()
    for index in range(0, 54, 7):  # a weekly 4-device configuration, its last run 10 days before the newest
        _night(tmp_path, index, 4, 12000.0)
    out = _report(tmp_path)
    said = [line for line in out.splitlines() if "no run since" in line]
    assert said == ["  A 1 device(s), 1 node(s): no run since 2026-07-10, where it ran every 1 day(s) and the "
                    "folder's newest run is of 2026-07-30: its latest is not the newest night's"], out


def test_a_configuration_run_several_times_a_night_is_not_taken_for_one_that_stopped():
    """A review's case: 3 repeats a night minutes apart made the usual gap minutes, and a configuration that ended
    a few minutes before the folder's newest run was said to have stopped; the gap is now between the days it ran."""
    times = [pd.Timestamp("2026-12-01 18:43", tz="UTC") + pd.Timedelta(days=d, minutes=2 * m)
             for d in range(10) for m in range(3)]
    row = dict(letter="A", world_size=2, num_nodes=1, link="", unit="tokens/s", runs=30, dates=pd.Series(times),
               last=times[-1], changes={column: [] for column, _, _ in history.METRICS}, scaling="weak",
               not_above_0=0, band=None, latest=1.0, far=[], left_out=[], left_out_of_band=0)
    assert not [line for line in history._row_lines(row, [], times[-1] + pd.Timedelta(minutes=8)) if "no run" in line]
    said = history._row_lines(row, [], times[-1] + pd.Timedelta(days=3))
    assert [line for line in said if "no run since 2026-12-10, where it ran every 1 day(s)" in line], said


def test_a_series_at_141_percent_efficiency_throughout_is_flagged_though_it_names_no_change(tmp_path):
    """The 2-device runs 1.5 times as fast on every night: no change, so no change's level to flag, and the
    series' own efficiency (about 141 %) said nothing; weak scaling cannot reach it."""
    _site(tmp_path, 30, planted=(0, 0.5))
    out = _report(tmp_path)
    flagged = [line for line in out.splitlines() if line.startswith("  ! A 2 device(s), 1 node(s): efficiency ")]
    assert len(flagged) == 1 and " % over its 30 runs cannot be weak scaling" in flagged[0], out


@pytest.mark.parametrize("scaling", ["weak", "strong"])
def test_a_level_past_100_percent_efficiency_is_flagged_in_weak_scaling_and_said_in_points(tmp_path, scaling):
    """The 2-device runs 50 % faster from night 60: efficiency 94 % → about 141 %, which weak scaling cannot reach
    (each device does what one baseline device did); it printed as "+50 %" with nothing said. Its level is marked !
    with a line saying why, and the change is said in points (the difference of the two levels); under strong
    scaling (each device a smaller share: a faster memory may explain it) nothing is flagged."""
    _site(tmp_path, 120, planted=(60, 0.5))
    if scaling == "strong":
        for path in tmp_path.glob("*/result.json"):
            data = json.loads(path.read_text())
            data["workload"]["scaling"] = "strong"
            path.write_text(json.dumps(data))
    out = _report(tmp_path)
    line = next(line for line in out.splitlines() if line.startswith("  A 2 device(s), 1 node(s): 2026-07-31: "))
    before, after = (int(v) for v in line.split("efficiency ")[1].split("(")[1].split(")")[0]
                     .replace(" %", "").replace(" !", "").split(" → "))
    assert f"efficiency {after - before:+d} points (" in line and after > 130, line
    flagged = [x for x in out.splitlines() if x.startswith("  ! A 2 device(s), 1 node(s): efficiency ")]
    assert (f"{after} % !" in line) == (scaling == "weak") and len(flagged) == (scaling == "weak"), out
    assert not flagged or f"efficiency {after} % from 2026-07-31 cannot be weak scaling" in flagged[0], flagged
