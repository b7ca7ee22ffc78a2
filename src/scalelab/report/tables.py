"""The printed report: per scaling group the runs, the scaling table and where the step goes; then failed runs.

Each table reads the annotated scaling frame (frames + explain) and only formats it: the same frame feeds
the plots and the exported files, so what is printed is what is exported.
"""

import json
import textwrap

import pandas as pd
from tabulate import tabulate

from scalelab import workloads
from scalelab.entry import human_count
from scalelab.keys import SCALE
from scalelab.report import cells, explain, plausible, spread
from scalelab.report import lever_view as levers
from scalelab.report.cells import fmt_num, fmt_pct, money_cells, money_headers, narrow, nodes_cell, predicted_range
from scalelab.report.frames import THROUGHPUT_COLUMN, group_letters

STEP_HEADERS = ["world size", "nodes", "step ms", "compute ms", "all-reduce ms", "alone ms", "predicted ms",
                "waited ms",
                "comm share", "hidden", "grad MB", "DDP busbw GB/s", "bench busbw GB/s", "TFLOP/s/dev", "MFU"]


WIDTH = 120  # a terminal's: the default report's lines, tables included, fit in it


def render(runs: pd.DataFrame, scaling: pd.DataFrame, fmt: str = "simple", max_runs: int = 12,
           details: bool = True, width: int = 0) -> str:
    """Per group: the runs (the newest `max_runs` per configuration; None = all), the scaling table and where the
    step goes. details=False (the report's default): the scaling table and what limits each configuration, with
    every warning, but not the per-run table nor the step's table (`--details` shows them). width: plain lines
    folded there (a terminal's; 0: not folded, for a file or a pipe)."""
    out = []
    if not scaling.empty and "predicted_efficiency_overlap" not in scaling:
        scaling = explain.annotate(scaling, explain.bench_frame([]))
    ok = runs[runs["status"] == "completed"]
    letters = group_letters(ok["group"])
    titles = distinct({group: _group_title(members.iloc[0], letters[group], members)
                       for group, members in ok.groupby("group", sort=False)})
    for group, members in ok.groupby("group", sort=False):
        out.append(titles[group])
        shown = runs_table(members, fmt, max_runs)
        out += shown if details else [line for line in shown[1:] if line.startswith("  !")]  # the warnings stay
        g = scaling[scaling["group"] == group].sort_values(["world_size", "num_nodes"])
        out += scaling_table(g, fmt) + spread.lines(members, g)
        if g["compute_s"].notna().any():
            step = step_table(g, fmt)
            out += step if details else step[3:]  # what limits each configuration, without the wide table
        elif (g["strategy"] == "fsdp").any():  # no step table (no probe step): each configuration in words
            out += [f"  {line}" for line in map(explain.limiting_line, g.itertuples()) if line]
        out.append("")
    out += levers.render(scaling, fmt)
    out += failed_table(runs, fmt)
    return "\n".join(wrap(line, width) for line in out)


def mfu_cells(g: pd.DataFrame, r) -> list:
    """MFU beside the throughput where a peak is known (the step table has it too, with --details)."""
    return [fmt_pct(r.mfu, ".1f")] if g["mfu"].notna().any() else []


def wrap(line: str, width: int) -> str:
    """A plain line (not a table) folded at width (0: as it is), its continuation indented under its first word."""
    if not width or "\n" in line or len(line) <= width:
        return line
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def terminal_width() -> int:
    """The width to fold the report's plain lines at: the terminal's, at most WIDTH; 0 where stdout is no terminal
    (a pipe, a job's log, a test): lines stay whole for grep and for the chapters that quote them."""
    import shutil
    import sys

    return min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns) if sys.stdout.isatty() else 0


def distinct(titles: dict) -> dict:
    """{group: title}, where two groups' titles read alike (they differ in a setting the caption does not name:
    --max_steps, --seq_len, the learning rate), each with the settings that tell it apart."""
    out = dict(titles)
    for group, title in titles.items():
        alike = [g for g, t in titles.items() if t.split(": ", 1)[1] == title.split(": ", 1)[1]]
        if len(alike) < 2:
            continue
        mine, others = _setup(group), [_setup(g) for g in alike if g != group]
        differ = sorted(k for k in set(mine).union(*others) if any(o.get(k) != mine.get(k) for o in others))
        out[group] = f"{title} · " + ", ".join(f"{k} {_said(mine.get(k))}" for k in differ)
    return out


def _said(value) -> str:
    return "none" if value is None else str(value)


def _setup(group: str) -> dict:
    """A group key's settings, flat (results.group_key: its workload and hardware)."""
    try:
        key = json.loads(group)
    except (TypeError, ValueError):
        return {}
    return {**key.get("workload", {}), **key.get("hardware", {})} if isinstance(key, dict) else {}


def cpu_device_caption(members: pd.DataFrame) -> str:
    """What one CPU "device" was in these runs: a fixed number of cores (launch.cores), the same at every scale
    (results.group_key: runs of another device size are another group)."""
    threads = sorted({int(t) for t in members["threads"].dropna()})
    if not threads:
        return "CPU rehearsal (gloo)"
    return f"CPU rehearsal (gloo): 1 device = {threads[0]} core{'s' if threads[0] > 1 else ''}"


def _group_title(first: pd.Series, letter: str, members: pd.DataFrame) -> str:
    batch = (f"batch {first['batch_per_device']}/device (weak scaling: global batch grows)"
             if first["scaling"] == "weak" else f"global batch {first['global_batch']} split over devices "
             "(strong scaling)")
    hw = f"GPU: {first['device']}" if first["accelerator"] == "gpu" else cpu_device_caption(members)
    params = f"{human_count(first['params'])} params" if pd.notna(first["params"]) else "params unknown"
    return (f"Group {letter}: {first['describe']} ({params}) · {batch} · precision {first['precision']}"
            f"{levers.caption(first)} · {hw}")


def runs_table(members: pd.DataFrame, fmt: str, max_runs) -> list:
    """One group's runs, oldest first per configuration; beyond max_runs only the newest of each."""
    first = members.iloc[0]
    unit = first["unit"]
    members = members.sort_values(["world_size", "num_nodes", "created"])
    hidden = 0
    if max_runs is not None and len(members) > max_runs:
        configs = members[SCALE].drop_duplicates().shape[0]
        shown = members.groupby(SCALE).tail(max(1, max_runs // configs))
        hidden, members = len(members) - len(shown), shown
    rows = [[r.run_id, r.world_size, nodes_cell(r), devices_cell(r), fmt_num(r.first_step_s), fmt_num(r.train_time_s,
                                                                                                      ".2f"),
             fmt_num(r.step_s * 1e3), fmt_num(r.epoch_s, ".2f"), fmt_num(getattr(r, THROUGHPUT_COLUMN[unit]), ",.0f"),
             fmt_num(r.train_loss, ".3f"), fmt_num(r.val_acc, ".3f")] for r in members.itertuples()]
    devices = "devices" if first["accelerator"] == "gpu" else "devices×threads"
    out = [tabulate(rows, headers=["run id", "world size", "nodes", devices, "1st step s", "train s", "step ms",
                                   "epoch s", unit, "train loss", "val acc"], tablefmt=fmt, disable_numparse=True)]
    out += [f"  ! {r.run_id}: {r.oversubscribed}; its speedup measures ranks sharing cores, not scaling"
            for r in members.itertuples() if r.oversubscribed]
    out += [f"  ! {r.run_id}: {r.starved}; its times are slower than this hardware's"
            for r in members.itertuples() if r.starved and not r.oversubscribed]
    if hidden:
        out.append(f"  ... {hidden} older run(s) not listed (all are in the scaling table; --all_runs lists them)")
    return out


def devices_cell(r) -> str:
    """"2×1t" on CPU (devices per node × threads of each; "!" where ranks shared cores), devices per node on GPU."""
    if r.accelerator != "cpu":
        return str(r.devices)
    return f"{r.devices}×{fmt_num(r.threads, '.0f')}t" + ("!" if r.oversubscribed else "")


def scaling_table(g: pd.DataFrame, fmt: str) -> list:
    """One group's configurations: throughput, speedup, efficiency measured and predicted, cost."""
    unit = g["unit"].iloc[0]
    base = int(g["baseline_world_size"].iloc[0])
    out = ["", f"Scaling (baseline: {base} device{'s' if base > 1 else ''}; speedup = {unit} ÷ baseline {unit})"]
    if base > 1:  # a sweep whose 1-GPU job failed: its speedups are not the ones the question is about
        out.append(f"  no 1-device run of this group completed: each speedup is against {base} devices, not one")
    if len(g) == 1:
        out.append(f"  only one configuration ({base} device(s)) in this group: nothing to compare against yet")
    rows = [[r.world_size, nodes_cell(r), r.runs,
             fmt_num(r.throughput, ",.0f") + (f" [{r.throughput_min:,.0f}–{r.throughput_max:,.0f}]"
                                              if r.runs > 1 else ""),
             *speedup_cells(r), predicted_range(r),
             fmt_num(r.throughput_per_device, ",.0f")] + mfu_cells(g, r) + money_cells(r) for r in g.itertuples()]
    out.append(narrow(rows, ["world size", "nodes", "runs", f"{unit} median [min–max]", "speedup", "efficiency",
                             "predicted eff.", "per device"] + ["MFU"] * bool(mfu_cells(g, g.iloc[0]))
                      + money_headers(g), fmt))
    out += cells.device_lines(g)
    out += [f"  {nodes} nodes joined by an {link} link: network namespaces on this machine, shaped with tc "
            "(src/emulate.py), not a real network" for nodes, link in
            sorted({(r.num_nodes, getattr(r, "link", "")) for r in g.itertuples()}) if link]
    return out + plausible.lines(g)


def speedup_cells(r) -> list:
    """Speedup and efficiency; "≠ job" where the configuration ran another job than its baseline, "!" after an
    efficiency beyond what scaling gives (plausible.py says why under the table)."""
    if r.job_differs:
        return ["≠ job", "—"]
    flag = " !" if plausible.flagged(r) else ""
    return [fmt_num(r.speedup, ".2f") + "×", fmt_num(r.efficiency * 100, ".0f") + " %" + flag]


def step_table(g: pd.DataFrame, fmt: str) -> list:
    """Where one group's step goes: compute, all-reduce, waited and hidden; then what limits each configuration."""
    out = ["", "Where the step goes (medians; compute from no-sync probe steps; all-reduce from DDP's timed "
               "hook, during backward and alone; predicted from the all-reduce benchmark's busbw)"]
    rows = []
    for r in g.itertuples():
        cells = story_cells(r)
        rows.append([r.world_size, nodes_cell(r), cells["step ms"], fmt_num(r.compute_s * 1e3),
                     cells["all-reduce ms"], fmt_num(r.allreduce_alone_s * 1e3),
                     fmt_num(r.predicted_allreduce_s * 1e3), cells["waited ms"], cells["comm share"],
                     cells["hidden"], fmt_num(r.grad_bytes / 1e6, ".3g"), fmt_num(r.ddp_busbw_GBps, ".3g"),
                     fmt_num(r.bench_busbw_GBps, ".3g"), fmt_num(r.tflops_per_device, ".3g"), fmt_pct(r.mfu, ".1f")])
    out.append(tabulate(rows, headers=STEP_HEADERS, tablefmt=fmt, disable_numparse=True))
    lines = [explain.limiting_line(r) for r in g.itertuples()]
    out.extend(f"  {line}" for line in lines if line)
    if g["world_size"].max() > 1 and g["bench_busbw_GBps"].isna().all():
        out.append(f"  (No all-reduce benchmark in this folder at these sizes: {_bench_hint(g)} adds the "
                   "predicted columns.)")
    elif g["bench_runs"].max() > 1:
        out.append(f"  (predicted ms and bench busbw: the median of the newest {g['bench_runs'].max():.0f} "
                   "all-reduce benchmark runs in this folder, per message size)")
    counted = counted_notes(g)
    if g["tflops_per_device"].isna().all():  # no FLOPs per sample: no peak would give an MFU
        how = next((t for t in g.get("flops_from", pd.Series(dtype=object)).dropna() if t != "analytic"), None)
        out.append(f"  MFU: — (no FLOPs per sample{': ' + how if how else ''})")
    elif g["mfu"].isna().all():
        notes = g["peak_note"].dropna() if "peak_note" in g else ()
        why = notes.iloc[0] if len(notes) else "no peak known for this hardware"  # a GPU's note says which
        out.append(f"  MFU: — ({why}; give --peak_tflops to compute it)")
        out.extend(f"  {note}" for note in counted)
    else:
        out.extend(f"  {note}" for note in [*flops_notes(g["model"]), *counted])
    return out


def flops_notes(models: pd.Series) -> list:
    """How the group's workloads count their FLOPs, where MFU's comparison needs it (WorkloadSpec.flops_note): each
    note once; none for a workload this scalelab does not declare."""
    specs = [workloads.REGISTRY.get(m) for m in models.dropna().unique()]
    return list(dict.fromkeys(s.flops_note for s in specs if s is not None and s.flops_note))


def counted_notes(g: pd.DataFrame) -> list:
    """'TFLOP/s and MFU of tiny-cnn: FLOPs per sample counted (...)' for each workload whose runs counted theirs
    (a workload without an analytic figure: train/flopcount.py), as the results say, not as this scalelab would."""
    if "flops_from" not in g:
        return []
    pairs = g[["model", "flops_from"]].dropna().drop_duplicates().itertuples(index=False)
    return [f"TFLOP/s and MFU of {model}: FLOPs per sample {how}" for model, how in pairs
            if isinstance(how, str) and how.startswith("counted")]


def story_cells(r) -> dict:
    """The cells of "Where the step goes" that the step timeline (report/step_plot.py) prints beside its bars: one
    source, so the picture and the table say the same figures."""
    split = ["?"] * 3 if explain.split_within_noise(r) else [
        fmt_num(r.waited_s * 1e3), fmt_pct(r.comm_share), fmt_pct(r.hidden_fraction)]
    return dict(zip(("step ms", "all-reduce ms", "waited ms", "comm share", "hidden"),
                    (fmt_num(r.step_s * 1e3), fmt_num(r.allreduce_s * 1e3), *split)))


def _bench_hint(g: pd.DataFrame) -> str:
    """The benchmark command that matches the group's largest configuration."""
    big = g.sort_values(["world_size", "num_nodes"]).iloc[-1]
    world, nodes = int(big["world_size"]), int(big["num_nodes"])
    if isinstance(big.get("link"), str) and big["link"].startswith("emulated"):
        return (f"`python src/emulate.py --devices {world // nodes} --link_gbit {big['link_gbit']:g} -- "
                "src/allreduce_bench.py`")
    if big["accelerator"] == "gpu" or nodes > 1:  # the job script runs one task per GPU, as training did
        hint = (f"`sbatch --nodes={nodes} slurm_jobs/allreduce_bench.sh` (its header must say "
                f"{world // nodes} tasks per node, as the training runs had)")
        # a GPU cluster's own nccl-tests log of that size serves as well
        return hint + f" or an all_reduce_perf log of {world} ranks on {nodes} node(s) (--nccl_tests LOG)" \
            if big["accelerator"] == "gpu" else hint
    return f"`python src/allreduce_bench.py --devices {world}`"


def failed_table(runs: pd.DataFrame, fmt: str) -> list:
    """Runs that did not complete, with the first 100 characters of their error (none: nothing printed)."""
    failed = runs[runs["status"] != "completed"]
    if failed.empty:
        return []
    rows = [[r.run_id, r.status, r.world_size, r.num_nodes, error_cell(r.error)] for r in failed.itertuples()]
    return ["Runs that did not complete (left out of every speedup):",
            tabulate(rows, headers=["run id", "status", "world size", "nodes", "error"], tablefmt=fmt,
                     disable_numparse=True),
            ""]


def error_cell(error) -> str:
    """The first 100 characters of a failed run's error; a record without one (absent, null: NaN in a frame where
    other runs have text, or blank) says so rather than leaving the cell empty."""
    return error[:100] if isinstance(error, str) and error.strip() else "no error recorded"
