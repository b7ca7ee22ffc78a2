"""The report's columns, declared once: where each comes from in a result.json and how repeats combine.

`RUNS` is the runs frame, one Column per column in its order (runs.csv keeps it): frames.runs_frame reads each
result through it, coerces the numeric ones, and frames.scaling_frame combines the repeats of a configuration
as each Column says (`combine`). `EXPORTED` names what scaling.csv, step_breakdown.csv and summary.json carry,
the combined columns beside those frames.scaling_frame and explain.annotate compute. A new column is one line in
RUNS (and one in EXPORTED where the files show it); tests/unit/test_columns.py holds the frames to these tables.
"""

import array
import json
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from scalelab import record, results
from scalelab.config import LEVER_DEFAULTS
from scalelab.measure import cpushare
from scalelab.perfmodel import sharding
from scalelab.perfmodel.network import human_rate
from scalelab.workloads import throughput_unit

# timing.comm fields carried into the frames under their own names (bucket_bytes apart: a tuple, not a number)
COMM_FIELDS = ("compute_s", "synced_s", "allreduce_s", "allreduce_alone_s", "waited_s", "slowed_s", "comm_share",
               "hidden_fraction", "grad_bytes", "buckets", "collectives_s", "ddp_busbw_GBps")


def at(path: str, default=None) -> Callable[[dict], Any]:
    """A reader of one field of a result, by its dotted path ("timing.comm.waited_s"): a missing or null section
    reads as empty, a missing or null last field as `default` (both say "not recorded": writers leave nulls out). A
    path that names no field result.json declares (scalelab/record.py) fails here, at import, not as an empty
    column."""
    if not record.declared(path):
        raise LookupError(f"{path} is not a field of result.json (scalelab/record.py declares them)")
    *sections, last = path.split(".")

    def read(result: dict):
        for key in sections:
            result = result.get(key) or {}
        value = result.get(last)
        return default if value is None else value
    return read


@dataclass(frozen=True)
class Column:
    """One column of the runs frame.

    read: a function of the whole result (`at(path)` for a plain field); None where runs_frame fills it from the
    frame itself. combine: how the repeats of one configuration make its scaling-frame value: None (runs frame
    only), "key" (one of keys.CONFIGURATION), a pandas aggregation ("median", "first", "max", ...), a function of
    (the repeats' values, the completed runs frame), or {scaling column: one of those} where the scaling frame
    names it otherwise. numeric: coerced with pd.to_numeric (text where a number belongs reads as missing)."""
    name: str
    read: Callable[[dict], Any] | None
    combine: Any = None
    numeric: bool = False
    doc: str = ""
    json_text: bool = False  # a JSON text made from the result: shown (as_read) as what it says, never as text

    def combined(self) -> dict:
        """{scaling-frame column: how} for this column's repeats; {} for a key or a runs-only column."""
        if self.combine is None or self.combine == "key":
            return {}
        return dict(self.combine) if isinstance(self.combine, dict) else {self.name: self.combine}


def link_label(link) -> str:
    """A result's launch.link in words, "" for none (a real network): "emulated 1 Gbit/s", "emulated 200 Mbit/s
    +5 ms". Runs with different labels are different configurations, never repeats of one."""
    if not isinstance(link, dict) or not isinstance(link.get("gbit"), (int, float)):
        return ""
    gbit = link["gbit"]
    rate = human_rate(gbit)
    latency = f" +{link['latency_ms']:g} ms" if isinstance(link.get("latency_ms"), (int, float)) else ""
    return f"{'emulated ' if link.get('emulated') else ''}{rate}{latency}"


def least_share(shares):
    """The least any rank had a core when it was ready to run (measure/cpushare.py); None where not measured."""
    return min((x for x in shares or [] if x is not None), default=None)


class Curve:
    """A run's loss curve, one float a batch, kept as packed doubles: a quarter of a tuple's memory.

    The runs frame holds one per run (100,000 runs: 1.3 GB as tuples of floats) and reads few (lever_view's loss
    after equal samples; runs.csv writes it as the tuple it is). It iterates, has a length and equals the tuple of
    its values, and is written as that tuple; it is not indexable, so numpy and pandas keep it one cell. `load`:
    where its bytes are still to be read, when it is first used (report/index.py leaves them in the index)."""

    __slots__ = ("_packed", "_load")

    def __init__(self, packed: bytes = b"", load: Callable[[], bytes] | None = None):
        self._packed, self._load = packed, load

    @property
    def packed(self) -> bytes:
        if self._load is not None:
            self._packed, self._load = self._load(), None
        return self._packed

    @classmethod
    def of(cls, values) -> "Curve | None":
        """The curve of these floats, None where there are none."""
        return cls(array.array("d", values).tobytes()) if values else None

    def __len__(self) -> int:
        return len(self.packed) // 8

    def __iter__(self):
        return iter(array.array("d", self.packed))

    def __eq__(self, other):
        if isinstance(other, Curve) and self.packed == other.packed:
            return True  # NaN and all: the same curve
        if isinstance(other, (Curve, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self):
        return hash(tuple(0.0 if v != v else v for v in self))  # a NaN's own hash is its object's: not kept

    def __repr__(self) -> str:
        return repr(tuple(self))


def loss_curve(ranks: list) -> Curve | None:
    """The training loss of every batch, averaged over the ranks (each rank logs the loss of its own shard); NaN
    where a rank's loss was not finite (written as null)."""
    curves = [r.get("losses") or [] for r in ranks if isinstance(r, dict)]
    # zip stops at the shortest curve; sum/len, not statistics.fmean: fmean was most of a 10,000-file report
    return Curve.of([float("nan") if None in batch else sum(batch) / len(batch) for batch in zip(*curves)])


def sizes(path: str) -> Callable[[dict], Any]:
    """A list of bytes (timing.comm.bucket_bytes) as a tuple, None where empty or missing."""
    read = at(path)
    return lambda r: tuple(read(r) or ()) or None


def fingerprint_text(r: dict) -> str:
    """What the step ran (scalelab/fingerprint.py), as JSON text: "" where the run did not record it; a null field
    left out (not recorded, as a writer leaves it)."""
    return json.dumps(_recorded(r["fingerprint"]), sort_keys=True) if isinstance(r.get("fingerprint"), dict) else ""


def _recorded(value):
    """value without its null fields, at any depth of its mappings."""
    return {k: _recorded(v) for k, v in results.recorded(value).items()} if isinstance(value, dict) else value


def seen_wire(r: dict) -> tuple | None:
    """What the step's collectives moved, as the fingerprint saw them, in nccl-tests' sizes: a perfmodel.sharding
    Wire as a plain tuple (all-gathers', reduce-scatters' and all-reduces' bytes and calls); None at one device or
    without a fingerprint."""
    if not isinstance(r.get("fingerprint"), dict):
        return None
    wire = sharding.observed(r["fingerprint"].get("wire"), r["launch"]["world_size"])
    return tuple(wire) if wire else None


def all_or_none(flags: pd.Series):
    """Whether every repeat had its nodes alone: False where one did not, True where all did, else None (unknown)."""
    if (flags == False).any():  # noqa: E712 - None and NaN are neither
        return False
    return True if len(flags) and (flags == True).all() else None  # noqa: E712


def most_starved(starved: pd.Series, had_cpu: pd.Series) -> str:
    """Of repeats' contention words, those of the run whose rank had the least share of a core: the worst, as
    `had_cpu` is (the largest string would be "rank 2 … 70 %" over "rank 10 … 5 %"). Words exist exactly where a
    share is below cpushare.QUIET, so the least share's run has words whenever any repeat has."""
    shares = had_cpu.loc[starved.index]
    return starved.loc[shares.idxmin()] if shares.notna().any() else ""


def _median_epoch(r: dict):
    epochs = r["timing"].get("epoch_times_s") or []
    return statistics.median(epochs) if epochs else None


RUNS = (
    Column("run_id", at("run_id"), {"runs": "size"}),
    Column("group", lambda r: results.group_key(r, LEVER_DEFAULTS), "key", json_text=True,
           doc="the workload and hardware (results.group_key, levers at their default left out), as JSON text"),
    Column("model", at("workload.model"), "first"),
    Column("describe", lambda r: r["workload"].get("describe") or r["workload"].get("model"), "first"),
    Column("params", at("workload.params"), numeric=True),
    Column("scaling", at("workload.scaling"), "first"),
    Column("batch_per_device", at("workload.batch_per_device"), "first"),
    Column("global_batch", at("workload.global_batch"), "first"),
    Column("precision", at("workload.precision"), "first"),
    Column("world_size", at("launch.world_size"), "key"),
    Column("num_nodes", at("launch.num_nodes"), "key"),
    Column("devices", at("launch.devices"), doc="per node"),
    Column("launcher", at("launch.launcher")),
    Column("accelerator", at("launch.accelerator"), "first"),
    Column("device", lambda r: (r["launch"].get("device_names") or ["?"])[0], "first"),
    Column("backend", at("launch.backend"), "first"),
    Column("link", lambda r: link_label(r["launch"].get("link")), "key", doc='"" for a real network'),
    Column("link_gbit", at("launch.link.gbit"), "first", numeric=True),
    Column("threads", at("launch.threads"), "max"),
    Column("oversubscribed", lambda r: r["launch"].get("oversubscribed") or "", "max",
           doc='ranks shared cores (launch.cores); "" = no'),
    Column("had_cpu", lambda r: least_share(r["timing"].get("had_cpu")), "min", numeric=True),
    Column("starved", lambda r: cpushare.contended(r["timing"].get("had_cpu")) or "",
           lambda s, rows: most_starved(s, rows["had_cpu"]), doc='the most starved rank in words, or ""'),
    Column("status", at("status")),
    Column("error", at("error")),
    Column("train_time_s", at("timing.train_time_s"), "median", numeric=True),
    Column("step_s", at("timing.step_s.median"), "median", numeric=True),
    Column("epoch_s", _median_epoch, "median", numeric=True),
    Column("unit", lambda r: throughput_unit(r["workload"].get("tokens_per_sample")), "first"),
    Column("samples_per_s", at("timing.samples_per_s"), "median", numeric=True),
    Column("tokens_per_s", at("timing.tokens_per_s"), "median", numeric=True),
    Column("first_step_s", at("timing.first_step_s"), numeric=True),
    Column("whole_run_s", at("timing.whole_run_s"), numeric=True),
    Column("train_loss", at("metrics.train_loss"), numeric=True),
    Column("val_loss", at("metrics.val_loss"), numeric=True),
    Column("val_acc", at("metrics.val_acc"), numeric=True),
    Column("created", at("created")),
    Column("job_id", at("slurm.job_id")),
    Column("restart_count", lambda r: (r.get("slurm") or {}).get("restart_count") or 0),
    *(Column(k, at(f"timing.comm.{k}"), "median", numeric=True) for k in COMM_FIELDS[:-1]),
    Column("bucket_bytes", sizes("timing.comm.bucket_bytes"), "first"),
    Column(COMM_FIELDS[-1], at(f"timing.comm.{COMM_FIELDS[-1]}"), "median", numeric=True),
    Column("waited_in_step", at("timing.comm.waited_in_step", 0), "min", numeric=True,
           doc="1 where every run's waited_s was read in its steps (their backward mark), not against the probes"),
    *(Column(k, at(f"timing.{k}"), "median", numeric=True) for k in ("tflops_per_device", "peak_tflops", "mfu")),
    Column("peak_note", at("timing.peak_note"), "first"),
    Column("flops_from", at("timing.flops_from"), "first",
           doc="how the FLOPs per sample behind TFLOP/s and MFU were obtained (analytic, counted, not counted)"),
    # what the devices did in the timed window (measure/devices.py): the range over ranks, energy over all of them
    Column("util_min", at("timing.devices.util_min"), "min", numeric=True,
           doc="the least busy rank's mean utilization (GPU: NVML's; CPU: of its cores)"),
    Column("util_max", at("timing.devices.util_max"), "max", numeric=True),
    Column("cores_busy_min", at("timing.devices.cores_busy_min"), "min", numeric=True,
           doc="CPU: cores a rank kept busy"),
    Column("cores_busy_max", at("timing.devices.cores_busy_max"), "max", numeric=True),
    Column("energy_per_step_J", at("timing.devices.energy_per_step_J"), "median", numeric=True,
           doc="every rank's energy over the timed window (probe steps included) per step"),
    Column("energy_per_1k_samples_J", at("timing.devices.energy_per_1k_samples_J"), "median", numeric=True),
    Column("energy_note", at("timing.devices.note"), lambda s, rows: next((t for t in s if t), ""),
           doc="why a run has no energy (no RAPL on a CPU host, NVML not started)"),
    Column("peak_memory_bytes", at("memory.peak_allocated_bytes"), "max", numeric=True,
           doc="the most one rank's tensors held (a GPU's allocator)"),
    Column("memory_estimate_bytes", at("memory.estimate_bytes"), "first", numeric=True,
           doc="perfmodel.memory's estimate of one rank's tensors at this strategy and world size"),
    *(Column(k, at(f"workload.{k}", default), "first") for k, default in LEVER_DEFAULTS.items()),
    Column("wire_bytes", sizes("timing.comm.wire_bytes"), "first", doc="the buckets as --comm_hook sent them"),
    Column("samples_per_batch", lambda r: (r["workload"].get("batch_per_device") or 0) * r["launch"]["world_size"],
           "first"),
    Column("loss_curve", lambda r: loss_curve(r.get("ranks") or []), "last"),
    Column("exclusive", at("slurm.exclusive"), lambda s, rows: all_or_none(s),
           doc="had its nodes alone (SLURM --exclusive); None: not known"),
    Column("wire", seen_wire, "first", doc="what the step's collectives moved (perfmodel.sharding.Wire's fields)"),
    Column("compile", lambda r: r["workload"].get("compile") is True, "first", doc="--compile asked"),
    Column("fingerprint", fingerprint_text, {"fingerprinted": lambda s, rows: bool((s != "").all())},
           json_text=True),
    Column("job_differs", None, lambda s, rows: next((t for t in s if t), ""),
           doc="how the step differs from its group baseline's: plausible.job_differences, from the whole frame"),
)
NAMES = tuple(c.name for c in RUNS)
JSON_TEXTS = tuple(c.name for c in RUNS if c.json_text)
NUMERIC = tuple(c.name for c in RUNS if c.numeric)
# the throughput frames.scaling_frame gives each run in its own unit (frames.THROUGHPUT_COLUMN), combined
THROUGHPUT = {"throughput": "median", "throughput_min": "min", "throughput_max": "max"}
# The scaling frame's combined columns in the order files written before this table had (--save_csv writes the
# frame whole); one not named here follows them, in RUNS's order.
SCALING_ORDER = ("runs", "throughput", "throughput_min", "throughput_max", "train_time_s", "step_s", "epoch_s",
                 "global_batch", "accelerator", "device", "backend", "link_gbit", "oversubscribed", "had_cpu",
                 "starved", "threads", "scaling", "model", "describe", "unit", "samples_per_s", "bucket_bytes",
                 "tokens_per_s", "wire_bytes", "samples_per_batch", "loss_curve", "peak_note", "batch_per_device",
                 "precision", "job_differs", "fingerprinted", "exclusive", *LEVER_DEFAULTS, *COMM_FIELDS,
                 "tflops_per_device", "peak_tflops", "mfu")


def aggregations(rows: pd.DataFrame) -> dict:
    """The named aggregations of the scaling frame over the completed runs `rows` (with their `throughput`):
    {scaling column: (runs column, how)}, in SCALING_ORDER."""
    named = {out: (c.name, how) for c in RUNS for out, how in c.combined().items()}
    named.update({out: ("throughput", how) for out, how in THROUGHPUT.items()})
    rank = {name: i for i, name in enumerate(SCALING_ORDER)}
    out = {}
    for name in sorted(named, key=lambda n: rank.get(n, len(rank))):  # sorted is stable: the rest in RUNS's order
        source, how = named[name]
        out[name] = (source, (lambda s, how=how: how(s, rows)) if callable(how) else how)
    return out


# What the exported files carry, in their order: {scaling-frame column: the files} ("scaling": scaling.csv,
# "step": step_breakdown.csv; summary.json holds each once, in this order). Besides RUNS's combined columns:
# letter … throughput_per_device from frames.scaling_frame, predicted_*, bench_*, cost_* and hours_* from
# explain.annotate. Times in seconds, the unit in the name (docs/appendix-a-columns.md).
EXPORTED = {
    "letter": "scaling step", "describe": "scaling step", "hardware": "scaling", "scaling": "scaling",
    "world_size": "scaling step", "num_nodes": "scaling step", "link": "scaling step", "runs": "scaling",
    "unit": "scaling", "throughput": "scaling", "throughput_min": "scaling", "throughput_max": "scaling",
    "speedup": "scaling", "baseline_world_size": "scaling", "efficiency": "scaling",
    "predicted_efficiency_no_overlap": "scaling", "predicted_efficiency_overlap": "scaling",
    "throughput_per_device": "scaling", "global_batch": "scaling", "cost_per_1k_samples": "scaling",
    "hours_for_token_budget": "scaling", "cost_for_token_budget": "scaling", "job_differs": "scaling",
    "util_min": "scaling", "util_max": "scaling", "cores_busy_min": "scaling", "cores_busy_max": "scaling",
    "energy_per_step_J": "scaling", "energy_per_1k_samples_J": "scaling",
    "step_s": "step", "compute_s": "step", "allreduce_s": "step", "allreduce_alone_s": "step",
    "predicted_allreduce_s": "step", "waited_s": "step", "comm_share": "step", "hidden_fraction": "step",
    "grad_bytes": "step", "buckets": "step", "bucket_bytes": "step", "collectives_s": "step", "ddp_busbw_GBps": "step",
    "bench_busbw_GBps": "step", "bench_runs": "step", "tflops_per_device": "step", "mfu": "step",
}


def exported(file: str | None = None) -> list:
    """The columns one exported file carries ("scaling", "step"), in its order; None: every exported column."""
    return [name for name, files in EXPORTED.items() if file is None or file in files.split()]
