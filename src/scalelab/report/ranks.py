"""`benchmark.py --ranks`: every rank of a multi-rank run, by host, so one slow node is named, not averaged away.

A DDP step ends when the slowest rank's gradients are all-reduced, so every rank's step time is the same and
the main table shows their mean. The compute-only probe steps (train/comm.py) do not wait for anyone:
there a rank's time to gradients-ready is its own compute. A rank whose compute is more than `pct` % above the
median rank's is flagged. Whether other work shared its cores is measured (measure/cpushare.py: the share of its
ready time it had a core), so a rank slowed by a neighbour is not blamed on its node; under SLURM a slow node's
host goes into the `sbatch --exclude=` list to try next.
"""

import statistics

import pandas as pd
from tabulate import tabulate

from scalelab.keys import CONFIGURATION
from scalelab.measure import cpushare, timing
from scalelab.measure.cpushare import span
from scalelab.measure.steps import optimizer_view
from scalelab.report import index
from scalelab.report.cells import fmt_num
from scalelab.report.frames import runs_frame

DEFAULT_PCT = 10.0
HEADERS = ["host", "rank", "device", "cores", "had a core", "compute ms", "vs median", "step ms", "flag"]


def rank_rows(result: dict) -> list:
    """Per rank: host, device, cores, median compute (probe steps) and median step (normal steps), in seconds;
    None where the run had no such steps. Warm-up and an epoch's short last step are left out, as in the run's
    own figures (measure/timing.py)."""
    warmup = (result.get("timing") or {}).get("warmup_steps") or 0
    rows = []
    for record in result.get("ranks") or []:
        r = optimizer_view(record)
        times = r.get("step_times_s") or []
        skip = set(r.get("short_steps") or [])
        probes = {i for i in r.get("probe_steps") or [] if warmup <= i < len(times) and i not in skip}
        ready = r.get("grads_ready_times_s") or []
        compute = [ready[i] for i in sorted(probes) if i < len(ready)]
        normal = [times[i] for i in range(warmup, len(times)) if i not in probes and i not in skip]
        rows.append({"rank": r.get("rank"), "host": r.get("host") or "?", "device": r.get("device") or "?",
                     "cores": r.get("cpu_affinity") or [],
                     "had_cpu": (timing.had_cpu([record]) or [None])[0],
                     "compute_s": statistics.median(compute) if compute else None,
                     "step_s": statistics.median(normal) if normal else None})
    return sorted(rows, key=lambda row: (row["host"], row["rank"] if row["rank"] is not None else -1))


def flag(rows: list, pct: float = DEFAULT_PCT) -> float | None:
    """Mark each row `slow` (compute more than pct % above the median of all ranks) and set its `vs_median`;
    returns that median (None: no rank has a compute figure)."""
    known = [row["compute_s"] for row in rows if row["compute_s"] is not None]
    median = statistics.median(known) if known else None
    for row in rows:
        c = row["compute_s"]
        row["vs_median"] = c / median - 1 if c is not None and median else None
        row["slow"] = row["vs_median"] is not None and row["vs_median"] * 100 > pct
    return median


def exclude_list(rows: list) -> str:
    """The hosts of the flagged ranks, as sbatch --exclude takes them (a comma-separated node list)."""
    return ",".join(dict.fromkeys(row["host"] for row in rows if row["slow"]))


def newest_runs(found: list, all_runs: bool = False) -> list:
    """The completed multi-rank results, newest per configuration (as the main table lists them), oldest first."""
    runs = runs_frame(found)
    runs = runs[(runs["status"] == "completed") & (runs["world_size"] > 1)].sort_values(["world_size", "num_nodes",
                                                                                         "created"])
    if not all_runs:
        runs = runs.groupby(CONFIGURATION, sort=False).tail(1)
    by_id = {r["run_id"]: r for r in found}
    return [by_id[run_id] for run_id in runs["run_id"]]


def render(found: list, pct: float = DEFAULT_PCT, fmt: str = "simple", all_runs: bool = False) -> str:
    """The per-rank view of every multi-rank run in `found`, one table per run."""
    # their ranks' lists, from their files (the index holds rows); one that no longer reads (removed since the
    # scan) is left out, not replaced by the run before it
    chosen = index.full(newest_runs(found, all_runs))
    if not chosen:
        return "No completed run on 2 or more devices here: the per-rank view needs one."
    out = [f"Per rank (compute: median of the no-sync probe steps, each rank alone; step: median of the normal "
           f"steps, which end together; flagged: compute more than {pct:g} % above the median rank)"]
    for result in chosen:
        out += ["", *run_table(result, pct, fmt)]
    return "\n".join(out)


def run_table(result: dict, pct: float, fmt: str) -> list:
    """One run's ranks, grouped by host, then the flagged ranks and the node list to leave out next time."""
    launch = result["launch"]
    job = (result.get("slurm") or {}).get("job_id")
    rows = rank_rows(result)
    median = flag(rows, pct)
    out = [f"{result['run_id']}: {launch['world_size']} devices on {launch['num_nodes']} node(s), "
           f"{launch.get('launcher') or '?'}{f' job {job}' if job else ''}"]
    cells, last_host = [], None
    for row in rows:
        cells.append([row["host"] if row["host"] != last_host else "", row["rank"], row["device"],
                      span(sorted(row["cores"])) or "—", fmt_pct(row["had_cpu"]), fmt_ms(row["compute_s"]),
                      fmt_vs(row["vs_median"]), fmt_ms(row["step_s"]), "slow" if row["slow"] else ""])
        last_host = row["host"]
    out.append(tabulate(cells, headers=HEADERS, tablefmt=fmt, disable_numparse=True))
    if launch.get("oversubscribed"):
        out.append(f"  ! {launch['oversubscribed']}: a rank that shared cores is slow for that reason, not its node")
    if median is None:
        out.append("  no probe steps (--comm_probe_every 0): no rank's own compute is known, and step times agree "
                   "in DDP, so no rank can be named")
        return out
    slow = [row for row in rows if row["slow"]]
    if not slow:
        out.append(f"  no rank's compute is more than {pct:g} % above the median ({median * 1e3:,.1f} ms)")
        return out
    named = ", ".join(f"rank {row['rank']} on {row['host']} ({fmt_vs(row['vs_median'])})" for row in slow)
    out.append(f"  slow: {named} against the median rank's {median * 1e3:,.1f} ms")
    return out + advice(slow, launch.get("launcher"))


def advice(slow: list, launcher) -> list:
    """What to try next for the slow ranks: other work on their cores is the machine's, not the node's fault;
    leaving a node out is sbatch's --exclude under SLURM, and means nothing to a local launch."""
    starved = [row for row in slow if row["had_cpu"] is not None and row["had_cpu"] < cpushare.QUIET]
    if starved:
        who = ", ".join(f"rank {row['rank']} had a core {row['had_cpu'] * 100:.0f} %" for row in starved)
        return [f"  {who} of the time it was ready to run: other work shared its cores (see top or ps on "
                f"{starved[0]['host']}); run again when they are quiet"]
    if launcher == "slurm":
        return [f"  try next without them: sbatch --exclude={exclude_list(slow)} <job script>"]
    return [f"  not a SLURM job ({launcher or 'launcher unknown'}): no node to leave out; the slow rank's cores "
            "were its own (see the share above): look for throttling or a slower core type on that machine"]


def fmt_ms(seconds) -> str:
    return fmt_num(None if seconds is None else seconds * 1e3, ",.1f")


def fmt_pct(fraction) -> str:
    return fmt_num(None if fraction is None else fraction * 100, ".0f") + (" %" if fraction is not None else "")


def fmt_vs(fraction) -> str:
    """+26 % / -4 %: how far a rank's compute is from the median rank's."""
    return "—" if fraction is None or pd.isna(fraction) else f"{fraction * 100:+.0f} %"
