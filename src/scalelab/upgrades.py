"""The result layouts of earlier schema versions, and how each is read as the next one (results.py owns the current
layout and its version; `results.load` applies these steps, so an old outputs folder reports exactly as a new one).

Each step is a pure function of a parsed file: it renames, never guesses a value the old file lacks.
"""

from scalelab.workloads import FORMER

# Version 1 -> 2: one name per quantity, the report's and the CSVs' (old name: new name).
_V1_COMM = {"exposed_comm_s": "waited_s", "comm_busy_s": "allreduce_s", "comm_alone_s": "allreduce_alone_s",
            "hidden_comm_s": "hidden_s", "overlap": "hidden_fraction", "train_busbw_GBps": "ddp_busbw_GBps"}
_V1_RANK = {"comm_busy_s": "allreduce_s", "comm_alone_s": "allreduce_alone_s"}
# Version 2 -> 3: the report's names everywhere (docs/appendix-a-columns.md). A quantity per step is plural
# (`*_times_s`, a rank's list), its summary singular (`allreduce_s`, the median); devices are per node as in
# --devices, world_size counts every rank; the GPT is `gpt`, as its configs and network are named.
_V2_LAUNCH = {"procs_per_node": "devices", "threads_per_proc": "threads"}
_V2_TIMING = {"step_time_s": "step_s", "time_to_first_step_s": "first_step_s"}
_V2_METRICS = {"final_train_loss": "train_loss"}
_V2_RANK = {"grads_ready_s": "grads_ready_times_s", "allreduce_s": "allreduce_times_s",
            "allreduce_alone_s": "allreduce_alone_times_s"}
# Beyond result files, schema 3's names reach a command line, a config (a model's former name) and a reference
# file's checks (old key: new key), each read by its own module through these. A model's former names are its
# workload's to declare (WorkloadSpec.formerly: the GPT's `transformer`).
MODEL_NAMES = FORMER
REFERENCE_KEYS = {"devices": "world_size", "nodes": "num_nodes", "baseline_devices": "baseline_world_size"}


def _renamed(record, names: dict):
    """A copy of a dict with its keys renamed (in place of the old ones, order kept); anything else as it is."""
    if not isinstance(record, dict):
        return record
    return {names.get(k, k): v for k, v in record.items()}


def _v1_to_v2(data: dict) -> dict:
    data = dict(data, schema_version=2)
    if isinstance(data.get("timing"), dict) and isinstance(data["timing"].get("comm"), dict):
        data["timing"] = dict(data["timing"], comm=_renamed(data["timing"]["comm"], _V1_COMM))
    if isinstance(data.get("ranks"), list):
        data["ranks"] = [_renamed(r, _V1_RANK) for r in data["ranks"]]
    return data


def _model_renamed(record):
    """A workload or config record with a model's former name (the GPT's `transformer`; its description) renamed."""
    if not isinstance(record, dict) or not _old_model(record.get("model")):
        return record
    old, new = record["model"], MODEL_NAMES[record["model"]]
    out = dict(record, model=new)
    if isinstance(out.get("describe"), str) and out["describe"].startswith(old):
        out["describe"] = new + out["describe"][len(old):]
    return out


def _v2_to_v3(data: dict) -> dict:
    data = dict(data, schema_version=3)
    for key, names in (("launch", _V2_LAUNCH), ("timing", _V2_TIMING), ("metrics", _V2_METRICS)):
        if isinstance(data.get(key), dict):
            data[key] = _renamed(data[key], names)
    if isinstance(data.get("timing"), dict) and isinstance(data["timing"].get("comm"), dict):
        # its step_s repeated timing.step_s.median
        data["timing"]["comm"] = {k: v for k, v in data["timing"]["comm"].items() if k != "step_s"}
    for key in ("workload", "config"):
        if key in data:
            data[key] = _model_renamed(data[key])
    if isinstance(data.get("ranks"), list):
        data["ranks"] = [_renamed(r, _V2_RANK) for r in data["ranks"]]
    return data


# Version 3 -> 4: the fields a workload block declares (record.Workload's); any other one of a version-3 file was one
# of its workload's options. Written out, not read from the declaration: a later field must not move an old option.
_WORKLOAD_DECLARED = frozenset((
    "model", "describe", "scaling", "precision", "params", "trainable_params", "tokens_per_sample", "batch_per_device",
    "global_batch", "accumulate_grad_batches", "comm_hook", "bucket_cap_mb", "static_graph", "compile",
    "warmup_steps", "max_steps", "strategy", "batch_size", "learning_rate", "comm_probe_every", "max_epochs",
    "num_samples"))


def _v3_to_v4(data: dict) -> dict:
    """A workload's own options (each a field of its own beside the common ones in version 3) under options."""
    data = dict(data, schema_version=4)
    workload = data.get("workload")
    if isinstance(workload, dict):
        common = {k: v for k, v in workload.items() if k in _WORKLOAD_DECLARED}
        data["workload"] = {**common, "options": {k: v for k, v in workload.items() if k not in _WORKLOAD_DECLARED}}
    return data


STEPS = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}  # a result's version -> the step to the next


# The report summary (`benchmark.py --export`) of version 1 -> 2: the result's version 3 names (old: new).
SUMMARY_V1 = {"devices": "world_size", "nodes": "num_nodes", "baseline_devices": "baseline_world_size",
              "group": "letter"}


def summary_v1(configuration):
    """One configuration of a version 1 summary under version 2's names, the GPT's workload renamed."""
    if not isinstance(configuration, dict):
        return configuration
    out = _renamed(configuration, SUMMARY_V1)
    if isinstance(out.get("workload"), dict) and _old_model(out["workload"].get("model")):
        old = out["workload"]["model"]
        out["workload"] = _model_renamed(out["workload"])
        if isinstance(out.get("describe"), str) and out["describe"].startswith(old):
            out["describe"] = MODEL_NAMES[old] + out["describe"][len(old):]
    return out


def reference_checks(checks: list) -> tuple:
    """A reference file's checks with the old keys and model name read as the new ones, and [(old, new)] of those
    found, in order (report/reference.py says them once)."""
    found, out = {}, []
    for entry in checks:
        if isinstance(entry, dict):
            entry = dict(entry)
            for old, new in REFERENCE_KEYS.items():
                if old in entry and new not in entry:
                    entry[new] = entry.pop(old)
                    found[old] = new
            workload = entry.get("workload")
            if isinstance(workload, dict) and _old_model(workload.get("model")):
                found[f"model: {workload['model']}"] = f"model: {MODEL_NAMES[workload['model']]}"
                entry["workload"] = dict(workload, model=MODEL_NAMES[workload["model"]])
        out.append(entry)
    return out, list(found.items())


def _old_model(model) -> bool:
    """Whether a model name is one that was renamed (a file's value may be any JSON: a list is no name)."""
    return isinstance(model, str) and model in MODEL_NAMES
