"""Numbers that cannot be scaling, and runs that are not the same job: the report says so, never prints them quietly.

Two kinds of line under a group's scaling table (`lines`):

* Not the same job. Each run records what its step ran (scalelab/fingerprint.py); a run whose fingerprint differs
  from its group baseline's (bf16 matmuls against fp32 ones, a fused update against a for-loop) is named with the
  difference, and no speedup or efficiency is computed against it (frames.scaling_frame, `job_differs`).
* Impossible, or needing a reason. Weak-scaling efficiency above 100 % beyond the noise (each device does what the
  baseline's did: N of them can at most N times its throughput), strong-scaling efficiency above it (possible only
  where each device's smaller share fits a faster memory), MFU above 100 %, a busbw above the link's rate, an
  efficiency above what the all-reduce benchmark says the network alone allows (then the benchmark is wrong). Each
  line says why the figure cannot be scaling (or its prediction cannot be a ceiling) and what was checked: the
  fingerprints, the baseline's share of its cores and whether it had its node alone.

The noise of an efficiency: the repeats' spread of the configuration and of its baseline (half their min–max range,
relative), at least NOISE_FLOOR, what a single run of a configuration against a single baseline scatters.
"""

import collections
import functools
import json

import numpy as np
import pandas as pd

from scalelab import fingerprint
from scalelab.keys import SCALE
from scalelab.numeric import known as _ok

NOISE_FLOOR = 0.05  # one run against one baseline run: any pair of 5 tiny GPT repeats fell within 4.3 points of the
# pairs' median efficiency here (docs/06)
LINK_MARGIN = 0.05  # a busbw this far above a shaped link's rate is no rounding: tc's bucket lets small bursts by


def job_differences(runs: pd.DataFrame) -> pd.Series:
    """Per run, how its step differs from its group baseline's, and from what its own flags asked (--compile
    that ran eager: fingerprint.asked_differences); "" where it does not, or where no fingerprint was recorded. The
    baseline is the group's configuration frames.scaling_frame divides by: the fewest devices, then the fewest
    nodes, a real network before an emulated link; its reference fingerprint the one most of its runs recorded (the
    newest among equals)."""
    out, texts, compiled = [""] * len(runs), runs["fingerprint"].tolist(), runs["compile"].tolist()  # as lists:
    # a text column read cell by cell costs 10 times a list's (100,000 runs: 0.2 s)
    parsed = functools.lru_cache(maxsize=None)(json.loads)  # a folder's runs repeat a few fingerprints: each read once
    done = np.flatnonzero((runs["status"] == "completed").fillna(False))  # no status (NaN, NA): not completed
    completed = runs[["group", *SCALE, "fingerprint", "created"]].iloc[done]  # what is read of them, not 80 columns
    for at in completed.groupby("group").indices.values():
        members = completed.iloc[at]
        config = members.sort_values(SCALE).iloc[0]
        base = members[(members["world_size"] == config["world_size"]) & (members["num_nodes"] == config["num_nodes"])
                       & (members["link"] == config["link"]) & (members["fingerprint"] != "")].sort_values("created")
        if base.empty:  # a baseline that recorded none: nothing to hold the others against
            continue
        keys = [_comparable_key(text) for text in base["fingerprint"]]  # comparable's keys come in one order
        counts = collections.Counter(keys)
        reference = parsed(base["fingerprint"].iloc[max(range(len(keys)), key=lambda i: (counts[keys[i]], i))])
        said = functools.lru_cache(maxsize=None)(
            lambda text, reference=reference: "; ".join(fingerprint.differences(reference, parsed(text))))
        for i in done[at]:
            if texts[i]:
                out[i] = said(texts[i])
    both = functools.lru_cache(maxsize=None)(  # what each run's flags asked, after how it differs: a few pairs each
        lambda said, text, compiled: "; ".join(filter(None, [said, *(fingerprint.asked_differences(
            parsed(text), compiled) if text else [])])))
    for i in done:
        out[i] = both(out[i], texts[i], bool(compiled[i] == True))  # noqa: E712
    series = pd.Series("", index=runs.index)  # its dtype as pandas gives text (str in pandas 3)
    series[:] = out
    return series


@functools.lru_cache(maxsize=4096)
def _comparable_key(text: str) -> str:
    """A fingerprint's comparable part, as one text: equal texts are the same job."""
    return json.dumps(fingerprint.comparable(json.loads(text)))


def noise(r) -> float:
    """The efficiency's noise band, as a fraction (see the module's docstring)."""
    spread = 0.0
    for side in ("", "baseline_"):
        low, high, mid = (getattr(r, f"{side}throughput{end}", None) for end in ("_min", "_max", ""))
        spread += (high - low) / 2 / mid if _ok(low) and _ok(high) and _ok(mid) and mid > 0 else 0.0
    return max(NOISE_FLOOR, spread)


def flagged(r) -> bool:
    """Whether this configuration's efficiency is beyond what scaling can give (the table marks it "!"); a row
    without the fields (a reference check's own) is not."""
    eff, base = getattr(r, "efficiency", None), getattr(r, "baseline_world_size", None)
    return base is not None and getattr(r, "world_size", base) != base and _ok(eff) and eff > 1 + noise(r)


def lines(g: pd.DataFrame) -> list:
    """The lines under one group's scaling table, one per configuration and finding."""
    return [f"  ! {line}" for r in g.itertuples() for line in findings(r)]


def figure_warnings(g: pd.DataFrame, limit: int) -> list:
    """What a plot of these configurations must carry, as the report does ("! ..." lines, at most limit and a
    count of the rest): each finding, and each configuration whose ranks shared cores or had them only part of the
    time (a slide must not show a clean line)."""
    out = []
    for r in g.itertuples():
        group = f"{r.letter}, "  # the figure's legend names it
        busy = r.oversubscribed or r.starved
        if isinstance(busy, str) and busy:
            out.append(f"! {group}{where(r)}: {busy}; not this hardware's scaling")
        out += [f"! {group}{line}" for line in findings(r)]
    out = list(dict.fromkeys(out))  # two groups at one configuration: one line
    return out[:limit] + ([f"! ... {len(out) - limit} more in the report"] if len(out) > limit else [])


def findings(r) -> list:
    """One configuration's findings, each a sentence that starts with where ("2 devices on 1 node: ..."); the
    exported summary carries them as they are printed."""
    at, out = where(r), []
    if r.job_differs:
        out.append(f"{at}: not the same job as the baseline ({r.job_differs}): no speedup or efficiency against "
                   "it; run both again with one setup (docs/08)")
    if flagged(r):
        out.append(f"{at}: {_beyond(r)} Checked: {checks(r)}.")
    if _ok(r.mfu) and r.mfu > 1:
        out.append(f"{at}: MFU {r.mfu * 100:.0f} % cannot be: no device runs above its peak ({r.peak_tflops:g} "
                   "TFLOP/s); check the peak (--peak_tflops, or the datasheet's for this precision) and the FLOPs "
                   "counted per sample")
    if above_prediction(r):
        out.append(f"{at}: {_above_prediction(r)}")
    return out + [f"{at}: {line}" for line in _above_link(r)]


def above_prediction(r) -> bool:
    """Whether an efficiency is above the top of its `predicted eff.` (the benchmark's all-reduce fully hidden: what
    the network alone allows) by more than its noise (a row of the annotated scaling frame, as `findings` reads).
    Not where `flagged` speaks already: with the top at 100 %, that is every run above it."""
    return (_ok(r.efficiency) and _ok(r.predicted_efficiency_overlap) and not r.job_differs and not flagged(r)
            and r.efficiency > _prediction_limit(r))


def _prediction_limit(r) -> float:
    """The efficiency `above_prediction` holds a run to, and its line prints: the top of `predicted eff.` widened by
    the efficiency's noise (relative)."""
    return r.predicted_efficiency_overlap * (1 + noise(r))


def _above_prediction(r) -> str:
    """The line of `above_prediction`: the limit as tested (the top times 1 + noise), and what the benchmarks priced
    the step's communication at against what the run's own took (an FSDP step's: its all-gathers and
    reduce-scatters)."""
    sharded = r.strategy == "fsdp"
    what = "all-gathers and reduce-scatters" if sharded else "all-reduce"
    priced, ran = r.predicted_allreduce_s, r.collectives_s if sharded else r.allreduce_s  # a scaling row's: there
    price = (f": the benchmarks priced this step's {what} at {priced * 1e3:,.1f} ms"
             + (f", and the run's own took {ran * 1e3:,.1f} ms" if _ok(ran) else "") if _ok(priced) else "")
    return (f"efficiency {r.efficiency * 100:.0f} % is above what the network alone allows "
            f"({r.predicted_efficiency_overlap * 100:.0f} %; {_prediction_limit(r) * 100:.0f} % with the runs' "
            f"{noise(r) * 100:.0f} % noise){price}. The benchmarks ran slower than the training's {what} did (its "
            "node or link busier while they ran, or another setup): its `predicted eff.` is no ceiling here; run the "
            "benchmarks again beside these runs")


def _beyond(r) -> str:
    eff, band = f"{r.efficiency * 100:.0f} %", f"100 % + {noise(r) * 100:.0f} % noise"
    if r.scaling == "strong":
        return (f"efficiency {eff} is above {band}: superlinear, which strong scaling allows only where each "
                f"device's smaller share of the batch fits a faster memory (caches) than the baseline's did.")
    return (f"efficiency {eff} cannot be weak scaling: each device does what one baseline device did, so "
            f"{r.world_size} of them give at most {r.world_size / r.baseline_world_size:g}× its throughput "
            f"({band}).")


def checks(r) -> str:
    """What was checked for a figure beyond scaling: whether the runs recorded what their steps ran, and what
    could have slowed the baseline (its cores, its node shared)."""
    said = []
    if not r.fingerprinted:
        said.append("fingerprints: not recorded by these runs (written before scalelab observed its steps: a "
                    "1-device step then ran without the precision's autocast, Lightning-AI/pytorch-lightning#16857;"
                    " run the group again)" if str(r.precision).endswith("-mixed") else
                    "fingerprints: not recorded by these runs (an older scalelab: run the group again)")
    elif not r.job_differs:
        said.append("fingerprints: the same job as the baseline")
    mine, base = r.compute_s, r.baseline_compute_s
    if r.scaling != "strong" and _ok(mine) and _ok(base) and mine < base * (1 - noise(r)):
        said.append(f"each device computed a step in {mine * 1e3:,.1f} ms here, {base * 1e3:,.1f} ms at the baseline: "
                    "faster compute per device, which more devices cannot give")
    had = r.baseline_had_cpu
    if _ok(had):
        said.append(f"the baseline had its core{'s' if r.threads > 1 else ''} {had * 100:.0f} % of the time "
                    "it was ready to run" + (" (short of them: a slow baseline inflates every speedup)"
                                             if had < 0.9 else ""))
    mine, base = _flag(r.exclusive), _flag(r.baseline_exclusive)
    if base is False and mine is not False:
        said.append("the baseline shared its node (not --exclusive): a neighbour's job may have slowed it")
    elif base is True:
        said.append("the baseline had its node alone (--exclusive)")
    if r.scaling == "strong":
        said.append(f"{r.batch_per_device:g} sample(s) per device here, {r.baseline_batch_per_device:g} at the "
                    "baseline")
    return "; ".join(said)  # never empty: the fingerprints are always said


def above_link(busbw, link_gbit) -> bool:
    """Whether a busbw (GB/s) is above the rate of a link of link_gbit Gbit/s (known where it was emulated) by more
    than LINK_MARGIN: what the report and the busbw figure flag alike."""
    return _ok(link_gbit) and isinstance(busbw, (int, float)) and busbw > link_gbit / 8 * (1 + LINK_MARGIN)


def _above_link(r) -> list:
    """A busbw above the rate of the link the configuration's all-reduce crossed (known where it was emulated)."""
    if r.num_nodes < 2:
        return []
    found = [(name, value) for name, value in (("DDP", r.ddp_busbw_GBps), ("all-reduce benchmark", r.bench_busbw_GBps))
             if above_link(value, r.link_gbit)]
    return [f"{name} busbw {value:.3g} GB/s is above the link's {r.link_gbit / 8:.3g} GB/s ({r.link}): no all-reduce "
            "moves bytes faster than the slowest link it crosses; check the link's shaping and the bytes counted"
            for name, value in found]


def left_out(flagged: pd.DataFrame, letters: dict, of: str) -> str:
    """The line that names runs flagged for contention (starved) and left out of `of`: by group letter and where
    each ran, a count per configuration, and the first one's reason."""
    named = flagged[[c for c in ("group", *WHERE) if c in flagged]]  # every column of 13,333 flagged runs: 0.3 s
    counts = collections.Counter(f"{letters[r.group]} {where(r)}" for r in named.itertuples())  # each lettered
    configs = ", ".join(name + (f" ×{n}" if n > 1 else "") for name, n in counts.items())
    return (f"  Left out of {of}: {len(flagged)} run(s) flagged for contention ({configs}; starved: "
            f"{flagged['starved'].iloc[0]}); rerun them on a quiet machine.")


def past_linear(efficiency: float, scaling) -> bool:
    """Whether an efficiency level (a history's, a median of runs) is past what weak scaling allows: 100 % +
    NOISE_FLOOR (a configuration's own noise is for a run against its baseline, not for a level); never under
    strong scaling, where each device's smaller share may fit a faster memory."""
    return scaling != "strong" and _ok(efficiency) and efficiency > 1 + NOISE_FLOOR


def band_past_linear(track: pd.DataFrame, letters: dict) -> list:
    """The line that says why a track-record band reaches past 100 % (the model's step is never shorter than the
    1-device step: what passes it is noise), naming each such band's top; none where no band does."""
    past = track[np.round(track["eff_high"] * 100) > 100]  # past 100 % as printed (.0f: half to even, as np.round)
    if past.empty:
        return []
    named = "; ".join(f"{letters[r.group]} {where(r)}: {r.eff_high * 100:.0f} %" for r in past.itertuples())
    return [f"  {len(past)} band(s) reach past 100 % ({named}): noise, not scaling past linear. The model's step "
            "(a band's middle) is never shorter than the 1-device runs' median step, so its efficiency is at most "
            "100 %; a band's ends add the scatter of the 1-device runs, of the runs it was read from and of one new "
            "run, and that reaches past it."]


WHERE = ("world_size", "num_nodes", "link")  # what `where` reads of a row


def where(r) -> str:
    """"2 devices on 2 nodes (emulated 200 Mbit/s)": the configuration as the tables name it (a frame without a
    link column, as tables.scaling_table takes one: no link)."""
    link = getattr(r, "link", "")
    return (f"{r.world_size} device{'s' if r.world_size > 1 else ''} on {r.num_nodes} node"
            f"{'s' if r.num_nodes > 1 else ''}" + (f" ({link})" if isinstance(link, str) and link else ""))


def _flag(x):
    """A yes/no of the frames (True, False, numpy's bool in a row of mixed types) as True or False; None where it
    is not known (None, NaN)."""
    return None if x is None or pd.isna(x) else bool(x)
