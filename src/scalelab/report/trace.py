"""`benchmark.py --trace DIR`: each run's steps as a trace Perfetto (ui.perfetto.dev) and chrome://tracing open.

The Trace Event Format's JSON: one process per rank, two threads in it (compute: forward, backward, waiting,
optimizer; communication: each collective from its call to its end), a complete event ("X", microseconds) per bar
of measure/timeline.step_bars. Every step whose collectives the run kept (the first SPAN_STEPS steps) is laid end
to end on the rank's own step clock, warm-up and probe steps included and named so (args.phase): the figures leave
them out, a timeline viewer shows what ran. The ranks' clocks are each their own: rank r's step i starts where its
steps before it ended, so the ranks line up step by step, not to the microsecond.
"""

import json
import os
import re

from scalelab import results
from scalelab.errors import UsageError
from scalelab.measure import timeline
from scalelab.measure.steps import optimizer_view

TRACKS = {"compute": 0, "comm": 1}
TRACK_NAMES = {"compute": "compute", "comm": "communication"}


def phase(result: dict, step: int, probes=None) -> str:
    """What a step was: "warm-up", "probe" (compute only, no sync: train/probe.py) or "timed". probes: the run's
    probe steps as a set, made once (a membership test per step in the list was quadratic in them)."""
    if step < ((result.get("timing") or {}).get("warmup_steps") or 0):
        return "warm-up"
    probes = set(result["ranks"][0].get("probe_steps") or []) if probes is None else probes
    return "probe" if step in probes else "timed"


def events(result: dict) -> list:
    """The trace events of one training result: metadata naming each rank and track, then every bar."""
    out = []
    kept = min(len(r.get("comm_spans_s") or []) for r in result["ranks"])  # schema: MAX_SPAN_STEPS at most
    split = timeline.splits(result)
    probes = set(result["ranks"][0].get("probe_steps") or [])
    for record in result["ranks"]:
        rank = record["rank"]
        out.append({"name": "process_name", "ph": "M", "pid": rank,
                    "args": {"name": f"rank {rank} ({record.get('host') or '?'}, {record.get('device') or '?'})"}})
        out += [{"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": TRACK_NAMES[track]}}
                for track, tid in TRACKS.items()]
        times = optimizer_view(record)["step_times_s"]
        start = 0.0
        for step, seconds in enumerate(times):
            if timeline.batches(record, step)[-1] >= kept:
                break
            out += [{"name": bar.kind, "cat": bar.track, "ph": "X", "pid": rank, "tid": TRACKS[bar.track],
                     "ts": round((start + bar.start) * 1e6, 1), "dur": round((bar.end - bar.start) * 1e6, 1),
                     "args": {"step": step, "phase": phase(result, step, probes)}}
                    for bar in timeline.step_bars(record, step, split)]
            start += seconds
    return out


def file_name(run_id: str, taken: set) -> str:
    """<run id>.trace.json, the id's characters outside [A-Za-z0-9_.-] replaced (a result names its own id: never a
    path out of the folder), with -2, -3, ... where two results share one."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", str(run_id)).lstrip(".") or "run"
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}-{k}"
    taken.add(name)
    return f"{name}.trace.json"


def write_all(folder: str, records: list) -> list:
    """One <run id>.trace.json per training result that kept its steps' marks; the paths written."""
    written, taken = [], set()
    for result in sorted(records, key=lambda r: (str(r.get("run_id")), str(r.get("created")))):
        run_id = result.get("run_id")
        if result.get("status") != "completed" or not timeline.timed_steps(result):
            continue
        trace = {"traceEvents": events(result), "displayTimeUnit": "ms",
                 "otherData": {"run_id": run_id, "world_size": len(result["ranks"]),
                               "clock": "each rank's own step clock, steps end to end from its first"}}
        path = os.path.join(folder, file_name(run_id, taken))
        try:
            os.makedirs(folder, exist_ok=True)
            written.append(results.atomic_write_text(path, json.dumps(trace)))
        except OSError as exc:
            raise UsageError(f"--trace: cannot write {path} ({exc.strerror})") from None
    return written
