"""The type of every field scalelab reads from a result: one table, checked by results.validate on every file the
report, the forecast, `--reference`, `--ranks` and `--compare` read (and on every result scalelab writes).

A result file is data from anywhere (another site, an older scalelab, a hand edit): a field of the wrong type, out
of range or not finite fails the file with one line naming the field, and the report goes on with the others. A
field no reader takes is not checked; a field that is missing is read as "not recorded" (null), as before.
"""

import math

from scalelab.errors import ResultError

_MAX_RANKS = 10**6  # the bound of a world size or an index; a bigger one is a corrupt or hostile file
MAX_STEPS = 10**6  # the most steps (batches) a rank's lists hold: a week of 1 s steps; a report stays linear in them
MAX_SPAN_STEPS = 1000  # steps whose collectives a rank keeps as spans (train/clock.py keeps 60): the timeline's


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fail(path: str, expected: str, value):
    raise ResultError(f"field {path}: expected {expected}, got {_short(value)}")


def num(lo=0, hi=1e30, integer=False, null=True, above=False):
    """A finite number (never a bool) in [lo, hi] ((lo, hi] where `above`: a time a clock read is never 0); an
    integer where `integer`."""
    what = ("an integer" if integer else "a number") + (
        "" if lo is None else f" above {lo:g}, at most {hi:g}" if above else f" from {lo:g} to {hi:g}")

    def check(value, path):
        if value is None and null:
            return
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
            (isinstance(value, int) or (math.isfinite(value) and not integer)) and \
            (lo is None or (lo < value if above else lo <= value)) and abs(value) <= hi  # ints compare, never convert
        if not ok:
            _fail(path, what + (" or null" if null else ""), value)
    return check


def text(null=True, choices=None, limit=10_000):
    def check(value, path):
        if value is None and null:
            return
        if not isinstance(value, str) or len(value) > limit or (choices and value not in choices):
            _fail(path, f"one of {', '.join(choices)}" if choices else "a string", value)
    return check


def flag(null=True):
    def check(value, path):
        if not (isinstance(value, bool) or (value is None and null)):
            _fail(path, "true or false", value)
    return check


def either(*checks, what: str):
    def check(value, path):
        for one in checks:
            try:
                one(value, path)
                return
            except ResultError:
                continue
        _fail(path, what, value)
    return check


def seq(item, null=True, limit=10**7, holes=False, length=None):
    """A list (or null where `null`) whose items are each `item`; null items only where `holes` (a diverged loss,
    a share not measured: scalelab writes them as null), as readers sum, join and sort the others."""
    def check(value, path):
        if value is None and null:
            return
        if not isinstance(value, list) or len(value) > limit or (length is not None and len(value) != length):
            _fail(path, "a list" if length is None else f"a list of {length}", value)
        for i, v in enumerate(value):
            if v is None and not holes:
                _fail(f"{path}[{i}]", "a value, not null", v)
            if v is not None:
                item(v, f"{path}[{i}]")
    return check


def obj(fields: dict, rest=None, null=True, required=()):
    """A JSON object whose known fields have these types; others checked with `rest` (None: not read, not
    checked); `required`: the fields a reader takes as they are (r["bytes"]), which must be there."""
    def check(value, path):
        if value is None and null:
            return
        if not isinstance(value, dict):
            _fail(path, "an object", value)
        for key in required:
            if key not in value:
                raise ResultError(f"field {path}.{key} missing")
        for key, v in value.items():
            one = fields.get(key, rest)
            if one is not None:
                one(v, f"{path}.{key}" if path else key)
    return check


COUNT = num(0, integer=True)
POSITIVE = num(1, _MAX_RANKS, integer=True)
SECONDS = num(0)
SHARE = num(0, 1)  # a fraction of a whole: a comm share, a hidden fraction, a share of a core
ANY_NUMBER = num(None)
SCALAR = either(text(), ANY_NUMBER, flag(), what="a string, a number, true/false or null")
NAMES = seq(text())

LAUNCH = obj({
    "world_size": num(1, _MAX_RANKS, integer=True, null=False), "num_nodes": num(1, _MAX_RANKS, integer=True,
                                                                                  null=False),
    "devices": POSITIVE, "threads": POSITIVE, "launcher": text(), "accelerator": text(), "backend": text(),
    "device_names": NAMES, "hostnames": NAMES, "oversubscribed": either(text(), flag(), what="a string or false"),
    "link": obj({"gbit": num(0), "shaped_gbit": num(0), "emulated": flag(), "latency_ms": num(0),
                 "latency_requested_ms": num(0)}),
}, null=False)
WORKLOAD = obj({
    "model": text(null=False), "describe": text(), "scaling": text(choices=("weak", "strong")), "precision": text(),
    "params": COUNT, "trainable_params": COUNT, "tokens_per_sample": COUNT, "batch_per_device": POSITIVE,
    "global_batch": num(1, integer=True), "accumulate_grad_batches": POSITIVE, "comm_hook": text(),
    "bucket_cap_mb": num(0), "static_graph": flag(), "compile": flag(), "warmup_steps": COUNT, "max_steps": COUNT,
}, rest=either(SCALAR, seq(SCALAR, holes=True), what="a value or a list of values"), null=False)  # group_key: all
BYTES = num(0)
COMM = obj({"bucket_bytes": seq(BYTES, limit=MAX_STEPS), "wire_bytes": seq(BYTES, limit=MAX_STEPS),
            "probe_steps": COUNT, "grad_bytes": BYTES, "comm_share": SHARE, "hidden_fraction": SHARE,
            "waited_in_step": num(0, 1, integer=True), "slowed_s": ANY_NUMBER},
           rest=SECONDS)  # every other field a time (compute_s, waited_s, ...) or a count or rate, never below 0
# measure/devices.py: a rank's sampled device (ranks[i].devices) and the run's figures from them (timing.devices)
DEVICES = obj({"source": text(), "note": text(), "energy_method": text(), "nvml_uuid": text(),
               "power_reading": text(choices=("instant", "average"))}, rest=ANY_NUMBER)
TIMING = obj({
    "step_s": obj({}, rest=SECONDS), "epoch_times_s": seq(SECONDS), "comm": COMM, "had_cpu": seq(SHARE, holes=True),
    "warmup_steps": COUNT, "steps": COUNT, "timed_steps": COUNT, "samples_per_step": COUNT, "peak_note": text(),
    "samples_per_s": num(0), "tokens_per_s": num(0), "train_time_s": num(0), "mfu": num(0), "peak_tflops": num(0),
    "devices": DEVICES,
}, rest=ANY_NUMBER, null=False)

def steps(item, holes=False):
    """A rank's per-step (per-batch) list: at most MAX_STEPS items."""
    return seq(item, limit=MAX_STEPS, holes=holes)


RANK = obj({
    "rank": num(0, _MAX_RANKS, integer=True), "local_rank": COUNT, "node_rank": COUNT, "host": text(),
    "device": text(), "device_name": text(), "cpu_affinity": seq(COUNT, limit=2**20), "threads": COUNT,
    "devices": DEVICES, "step_times_s": steps(SECONDS), "grads_ready_times_s": steps(SECONDS),
    "allreduce_times_s": steps(SECONDS), "allreduce_alone_times_s": steps(SECONDS), "epoch_times_s": steps(SECONDS),
    "losses": steps(ANY_NUMBER, holes=True), "probe_steps": steps(COUNT), "short_steps": steps(COUNT),
    "buckets": steps(COUNT), "bucket_bytes": steps(BYTES), "wire_bytes": steps(BYTES),
    "probe_cpu_s": steps(seq(ANY_NUMBER, length=2)), "fingerprint": obj({}), "forward_times_s": steps(SECONDS),
    "backward_times_s": steps(SECONDS), "step_ends": steps(COUNT), "after_read_steps": steps(COUNT),
    "comm_spans_s": seq(seq(seq(ANY_NUMBER, length=2), limit=10**4), limit=MAX_SPAN_STEPS),
}, rest=either(SCALAR, seq(SCALAR, holes=True, limit=MAX_STEPS), what="a value or a list of values"), null=False)


SLURM = obj({"cluster": text(), "job_id": either(text(), COUNT, what="a job id"), "restart_count": COUNT,
             "exclusive": flag(),
             "array_job_id": either(text(), COUNT, what="a job id"), "array_task_id": either(text(), COUNT,
                                                                                               what="an index"),
             "step_id": either(text(), COUNT, what="a step id")})
WIRE = obj({}, rest=obj({"dtype": text(), "bytes": COUNT, "calls": COUNT, "op": text()}))
FINGERPRINT = obj({"step": COUNT, "matmul_dtypes": NAMES, "attention": NAMES, "param_dtypes": NAMES,
                   "grad_dtypes": NAMES, "optimizer": text(), "compiled_graphs": COUNT, "compiled_steps": COUNT,
                   "steps_after_warmup": COUNT, "wire": WIRE,
                   "same_on_ranks": flag()})
COMMON = {"run_id": text(null=False, limit=255), "created": text(limit=64), "run_name": text(), "error": text(),
          "provisional": flag(),
          "slurm": SLURM, "launch": LAUNCH}

TRAINING = obj({**COMMON, "workload": WORKLOAD, "timing": TIMING, "ranks": seq(RANK), "fingerprint": FINGERPRINT,
                "metrics": obj({}, rest=ANY_NUMBER), "memory": obj({}, rest=num(0))}, null=False)
ROW = obj({"bytes": num(1, 2**50, null=False), "count": num(0), "dtype": text(),
           "time_s": num(0, null=False, above=True), "algbw_GBps": SECONDS, "busbw_GBps": num(0, null=False),
           "single_op_s": num(0, above=True), "wrong": COUNT}, null=False, required=("bytes", "time_s", "busbw_GBps"))
ALLREDUCE = obj({**COMMON, "rows": seq(ROW, null=False), "summary": obj({}, rest=num(0)),
                 "source": obj({}, rest=SCALAR), "config": obj({"dtype": text()})}, null=False)
BY_KIND = {"training": TRAINING, "allreduce": ALLREDUCE}


def check(data: dict) -> None:
    """Raise ResultError naming the first field of a result (kind already known) that no reader could take, or the
    first way its fields disagree with one another (`consistent`)."""
    BY_KIND[data["kind"]](data, "")
    consistent(data)


def consistent(data: dict) -> None:
    """A record checked as a whole: each field may be fine alone and the file still impossible. Its ranks are its
    world (a completed run has every rank's record, a failed one at most that many, each rank once), its nodes
    times devices are its world size, and each rank's per-step lists agree in length."""
    launch = data["launch"]
    world, nodes, devices = launch["world_size"], launch["num_nodes"], launch.get("devices")
    if devices is not None and devices * nodes != world:
        raise ResultError(f"launch: {nodes} node(s) x {devices} device(s) is not its world size {world}")
    ranks = data.get("ranks")
    if data["kind"] != "training" or ranks is None:
        return
    if not isinstance(ranks, list) or len(ranks) > world or (data["status"] == "completed" and len(ranks) != world):
        raise ResultError(f"ranks: {len(ranks) if isinstance(ranks, list) else 'no'} rank record(s) for a "
                          f"{data['status']} run of world size {world}")
    seen = [r.get("rank") for r in ranks if isinstance(r, dict)]
    if len(set(seen)) != len(seen) or any(isinstance(k, int) and k >= world for k in seen):
        raise ResultError(f"ranks: rank numbers {sorted(set(seen), key=str)[:8]} are not ranks of a world of {world}")
    for i, r in enumerate(ranks):
        lengths = {name: len(r[name]) for name in PER_BATCH if isinstance(r.get(name), list)}
        if len(set(lengths.values())) > 1:
            raise ResultError(f"ranks[{i}]: per-batch lists of different lengths ({_short(lengths)})")


PER_BATCH = ("step_times_s", "grads_ready_times_s", "allreduce_times_s", "buckets")  # one entry per batch, each
