"""result.json read and written in one place: its fields are record/'s (declared once), its versions upgrades.py's.

Writers call `write()` (atomic: no reader ever sees half a file); readers call `load()`/`scan()`,
which validate against the declaration, upgrade older versions, and explain in one line why a file is skipped.
What must never reach a result file is a property of the file format, not of whoever writes it: `write` passes
everything through redaction.scrub, `load` through redaction.as_read (a file written elsewhere).
Bump record.SCHEMA_VERSION for any change a reader of the old version would misread, and teach upgrades.py the
old layout.
"""

import datetime as _dt
import json
import math
import os
import platform
import re
import secrets
import tempfile
from typing import Optional

import msgspec

from scalelab import __version__, files, record, upgrades
from scalelab.errors import ResultError, UsageError
from scalelab.files import atomic_write_bytes, atomic_write_json, atomic_write_text, nan_to_none  # noqa: F401
from scalelab.redaction import as_read, scrub

SCHEMA, SCHEMA_VERSION = record.SCHEMA, record.SCHEMA_VERSION  # what a result.json holds: record.py declares it
# The report's own summary (`benchmark.py --export`): what one outputs folder showed, small enough to mail
# to another site and `--compare` against. Versioned like a result.
SUMMARY_SCHEMA = "scalelab.report_summary"
SUMMARY_VERSION = 2  # 2: the result's version 3 names (upgrades.SUMMARY_V1: world_size was devices, ...)
METRICS_FILE = "metrics.csv"  # --logger csv's per-step curves in the run folder (CSVLogger's; the loss plots read it)

def versions() -> dict:
    out = {"python": platform.python_version()}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
        if getattr(torch.version, "hip", None):  # a ROCm build: its "nccl" backend and version are RCCL's
            out["hip"] = torch.version.hip
        if torch.cuda.is_available():
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except ImportError:
        pass
    for name in ("lightning", "submitit"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    out["scalelab"] = __version__
    return out


def new_run_id(model: str, world_size: int, run_name=None, job: Optional[str] = None) -> str:
    """Unique even for concurrent runs: time + SLURM job (`launch.slurm_env.job_label`) + process id + 32 random bits.

    Two processes alive at once never share a pid on one host, and the random part separates hosts and
    repeats; should two ids still meet, `write()` gives the second its own folder instead of overwriting.
    """
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    where = f"job{job}-pid{os.getpid()}" if job else f"pid{os.getpid()}"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name)[:40] + "-" if run_name else ""
    return f"{stamp}-{name}{model}-{world_size}x-{where}-{secrets.token_hex(4)}"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def envelope(kind: str, run_id: str) -> dict:
    """The fields every result starts with."""
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "kind": kind, "run_id": run_id,
            "created": now_iso()}


def ensure_output_dir(path: str, flag: str = "--output_dir"):
    """Create the results folder or fail in one line: before any process group starts, not after training."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path} is a file, not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {path} cannot be created ({exc.strerror})") from None
    # Create (and remove) a real folder, as every run will: os.access() answers yes for root even where the
    # kernel refuses (/sys, read-only or root-squashed mounts), and the run would only fail after training.
    try:
        os.rmdir(tempfile.mkdtemp(dir=path, prefix=".probe-"))
    except OSError as exc:
        raise UsageError(f"{flag} {path} is not writable: a folder cannot be made in it ({exc.strerror})") from None


def claim_folder(output_dir: str, payload: dict) -> str:
    """OUTPUT_DIR/<run_id> with its first result.json in it, made by this process alone (mkdir: exactly one process
    wins a name). The record is on disk beside the folder before the mkdir and moved in by the next call, so a run
    folder is never left without a record: a kill -9 could only land between those two calls, and anything raised
    after the mkdir (a SIGTERM's Terminated, a refused rename) settles the folder first (_settle). A second run with
    the same id (it should not happen, see new_run_id) gets the id plus a suffix, and both runs keep their files.
    payload: valid and scrubbed (`write`)."""
    os.makedirs(output_dir, exist_ok=True)
    name = payload["run_id"]
    while True:
        folder = os.path.join(output_dir, name)
        record = os.path.join(folder, "result.json")
        tmp = files.synced_temp(output_dir, files.json_bytes({**payload, "run_id": name}), record)
        try:
            os.mkdir(folder)
            os.rename(tmp, record)
        except FileExistsError:  # the mkdir's: the name is another run's (a file renamed into a new folder: never)
            files.unlink_quietly(tmp)
            name = f"{payload['run_id']}-{secrets.token_hex(2)}"
            continue
        except BaseException as exc:
            _settle(tmp, folder, record, keep=not isinstance(exc, OSError))
            raise
        payload["run_id"] = name
        return folder


def _settle(tmp: str, folder: str, record: str, *, keep: bool) -> None:
    """A claim cut short: the temporary file goes, and the folder, if this process made it, either gets the record
    (`keep`: a signal's exception between two lines; os.link never replaces a record already there) or, refused (an
    OSError), is removed. Never an empty folder of ours."""
    try:
        if keep and os.path.exists(tmp):
            os.link(tmp, record)
        else:
            os.rmdir(folder)
    except OSError:  # no folder made, another run's (it holds that run's record), or no hard links here
        try:
            os.rmdir(folder)
        except OSError:
            pass
    finally:
        files.unlink_quietly(tmp)


def write(output_dir: str, payload: dict, folder: Optional[str] = None) -> str:
    """outputs/<run_id>/result.json, secrets scrubbed, written atomically, never over another run's result.
    folder: the run's own, claimed with its first record (claim_folder); else claimed now, with this one."""
    payload = nan_to_none(scrub(record.plain(payload)))  # the blocks its producers returned, as JSON holds them
    record.string_keys(payload)  # a writer's dict may hold one; a file cannot
    validate(payload)
    if folder is None:
        return os.path.join(claim_folder(output_dir, payload), "result.json")
    payload["run_id"] = os.path.basename(folder)
    return atomic_write_json(os.path.join(folder, "result.json"), payload)


# Workload fields derived from the launch size (they differ inside a scaling group by design).
DERIVED_WORKLOAD_FIELDS = ("describe", "params", "trainable_params", "tokens_per_sample", "batch_per_device",
                           "global_batch")


def workload_fields(workload: dict) -> dict:
    """A workload block as one mapping: its common fields and its own options side by side (an option's flag is
    never a common one), as a scaling group's key, a reference's match and a summary name the workload (the key
    reads the same for a result of any version)."""
    options = workload.get("options")
    return {**{k: v for k, v in workload.items() if k != "options"}, **(options if isinstance(options, dict) else {})}


def recorded(fields: dict) -> dict:
    """fields without its null ones: a null field is one not recorded, as a writer leaves it out (record.plain)."""
    return {k: v for k, v in fields.items() if v is not None}


def group_key(result: dict, defaults=None) -> str:
    """Runs with equal keys did the identical job on the same kind of hardware: one scaling group. A workload field
    equal to its entry in `defaults` is left out: a result written before that field existed ran at its default
    (the report passes config.LEVER_DEFAULTS: a result from before --strategy ran DDP); so is a null one (not
    recorded, as a field a writer left out)."""
    if defaults is None and "_group_key" in result:  # as report/index.py computed it from the whole result
        return result["_group_key"]
    defaults = defaults or {}
    workload = {k: v for k, v in recorded(workload_fields(result["workload"])).items()
                if k not in DERIVED_WORKLOAD_FIELDS and not (k in defaults and v == defaults[k])}
    launch = result["launch"]
    hardware = {"accelerator": launch.get("accelerator"), "device": (launch.get("device_names") or [None])[0]}
    if launch.get("accelerator") == "cpu":  # a CPU device is --threads cores: 1-core and 2-core devices differ
        hardware["threads"] = launch.get("threads")
    return json.dumps({"workload": workload, "hardware": hardware}, sort_keys=True, default=str)


# --- reading -------------------------------------------------------------------------------------

def _upgrade(data: dict) -> dict:
    """Bring an older schema version up to SCHEMA_VERSION, one step at a time, so old folders report exactly as
    new ones."""
    while data["schema_version"] < SCHEMA_VERSION:
        data = upgrades.STEPS[data["schema_version"]](data)
    return data


def validate(data) -> dict:
    if not isinstance(data, dict):
        raise ResultError(f"not a JSON object but {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise ResultError("not a scalelab result (no \"schema\": \"scalelab.result\")")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultError(f"bad schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise ResultError(f"schema_version {version} is newer than this scalelab reads ({SCHEMA_VERSION}); "
                          "upgrade scalelab")
    try:
        data = _upgrade(data)
    except (TypeError, AttributeError, KeyError, ValueError):
        raise ResultError(f"a schema_version {version} layout this scalelab cannot read (a field of the wrong type)") \
            from None
    for key in [k for k in data if isinstance(k, str) and k.startswith("_")]:
        del data[key]  # a reader's own marks (_path; report/index.py's _row, _group_key): never taken from a file
    if not isinstance(data.get("kind"), str) or data["kind"] not in record.KINDS:
        raise ResultError(f"unknown result kind {data.get('kind')!r}")
    record.check(data)  # every field against its declaration: its type, range, finiteness
    return data


def _read_json(path: str, kind: str = "result", root=None):
    return _json(files.read_bytes(path, kind, root))  # a regular file within its size, or files.Refused saying why


def _json(raw: bytes):
    """A file's JSON: strict (no NaN, no Infinity, no number beyond a float's range). msgspec parses what it
    accepts (all of that: 4 times json's speed with a check per float); anything it refuses is parsed again by
    json, which says why in scalelab's words (or takes what only it reads: UTF-16 or UTF-32 bytes)."""
    try:
        return _FAST.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # json says why in its words
        pass
    if not raw.strip():
        raise ResultError("empty file")
    try:
        return json.loads(raw, parse_constant=_not_a_number, parse_float=_finite_float)
    except ResultError:
        raise
    except RecursionError:
        raise ResultError(_TOO_DEEP) from None
    except ValueError as exc:
        raise ResultError(f"not valid JSON ({str(exc).splitlines()[0][:80]})") from None


_FAST = msgspec.json.Decoder()
_TOO_DEEP = "nested too deeply to read (a thousand levels or more; no result nests ten)"


def _not_a_number(word: str):
    """NaN, Infinity, -Infinity: Python's json reads them, strict JSON has no such numbers, nor does a timing."""
    raise ResultError(f"not strict JSON: {word} is not a number (scalelab writes null for a value not measured)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 reads as inf
        raise ResultError(f"not strict JSON: {text[:20]} is beyond a float's range")
    return value


def load(path: str, root=None) -> dict:
    """A result, validated, with any secret a file written elsewhere (or by an older scalelab) holds redacted: what
    the report prints and exports comes from here. root: the folder being read (a symlink out of it is refused)."""
    return _shown(_read_json(path, "result", root), validate)


def parse(raw: bytes) -> dict:
    """A result from its bytes, as `load` reads it from its file (report/index.py reads each file once)."""
    return _shown(_json(raw), validate)


def _shown(data, then=None):
    """A file's JSON as scalelab shows it (as_read), checked by `then`: a document nested past what Python walks is
    refused in one line, not a RecursionError."""
    try:
        data = as_read(data)
        return data if then is None else then(data)
    except RecursionError:
        raise ResultError(_TOO_DEEP) from None


def attempt_key(result: dict):
    """Results of one SLURM job step share this key across requeues (None outside SLURM). A job id alone can
    repeat (a controller restarted with its state wiped, folders of two clusters merged): latest_attempts tells
    those jobs apart by their attempts."""
    slurm = result.get("slurm") or {}
    if not slurm.get("job_id"):
        return None
    return (slurm.get("cluster"), slurm.get("array_job_id") or slurm["job_id"], slurm.get("array_task_id"),
            slurm.get("step_id"))


def latest_attempts(found: list) -> tuple:
    """(kept, superseded): a requeued job's newest result supersedes its earlier (partial) ones, one row, not
    two; superseded lists (earlier result, the one that supersedes it). In the order they were written, the
    results of one key are one job's attempts while SLURM's restart count rises; a result whose count does not
    rise is another job that got the same id (or a second run in one job step): both are kept."""
    jobs = {}  # key -> [[results of one job, in the order written], ...]
    for r in sorted((r for r in found if attempt_key(r) is not None), key=lambda r: r.get("created") or ""):
        chains = jobs.setdefault(attempt_key(r), [])
        if chains and _requeued_from(chains[-1][-1], r):
            chains[-1].append(r)
        else:
            chains.append([r])
    superseded = [(earlier, chain[-1]) for chains in jobs.values() for chain in chains for earlier in chain[:-1]]
    gone = {id(earlier) for earlier, _ in superseded}
    return [r for r in found if id(r) not in gone], superseded


def _requeued_from(earlier: dict, later: dict) -> bool:
    """later is a requeued attempt of earlier's job: a higher restart count, the same job (workload, hardware,
    world size), and earlier did not complete (a completed job is not requeued: a later result is another job
    that got its id, whose own first attempt may have written nothing)."""
    same = earlier.get("kind") == later.get("kind") and (
        earlier.get("kind") != "training" or group_key(earlier) == group_key(later))
    return (same and restarts(later) > restarts(earlier) and earlier.get("status") != "completed"
            and (earlier.get("launch") or {}).get("world_size") == (later.get("launch") or {}).get("world_size"))


def restarts(result: dict) -> int:
    """How often SLURM had requeued the job when this result was written (0: its first attempt)."""
    return (result.get("slurm") or {}).get("restart_count") or 0


def paths(root: str, skipped: list, listing=None):
    """Each result.json below root, in order (a folder that cannot be listed, or one named result.json: appended to
    skipped); listing: root's walk kept (files.listing)."""
    for folder, _, names in files.walk(root, skipped, listing):
        if folder.endswith(IN_FOLDER) and folder != root:  # walked into: a folder, where a file was
            skipped.append((folder, "a folder, not a result file"))
        if "result.json" in names:  # os.path.join's path, without its call (100,000 folders: 0.1 s)
            yield folder + ("result.json" if folder.endswith(os.sep) else IN_FOLDER)


IN_FOLDER = os.sep + "result.json"  # a result's path past its folder's (and a walked folder's, named so)


def scan(root: str, listing=None):
    """Every result.json below root -> (results, [(path, reason)] for files that were skipped, and for folders that
    could not be listed); listing: root's walk kept (files.listing)."""
    results, skipped = [], []
    for path in paths(root, skipped, listing):
        try:
            data = load(path, root)
        except ResultError as exc:
            skipped.append((path, str(exc)))
            continue
        data["_path"] = path
        results.append(data)
    return results, skipped


def load_summary(path: str) -> dict:
    """A report summary written by `benchmark.py --export`, or a ResultError saying why not."""
    data = _shown(_read_json(path, "summary"))
    if not isinstance(data, dict) or data.get("schema") != SUMMARY_SCHEMA:
        raise ResultError(f"not a scalelab report summary (no \"schema\": \"{SUMMARY_SCHEMA}\")")
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= SUMMARY_VERSION:
        raise ResultError(f"summary schema_version {version!r} is not one this scalelab reads ({SUMMARY_VERSION})")
    configurations = data.get("configurations")
    if not isinstance(configurations, list):
        raise ResultError("summary has no \"configurations\" list")
    if version == 1:  # the result's version 3 names; the GPT's workload and description renamed as a result's
        configurations = [upgrades.summary_v1(c) for c in configurations]
        data = dict(data, schema_version=SUMMARY_VERSION, configurations=configurations)
    for i, c in enumerate(configurations):
        missing = [k for k in _SUMMARY_FIELDS if not isinstance(c, dict) or k not in c]
        if missing or not isinstance(c["workload"], dict):
            raise ResultError(f"summary configuration {i} lacks {', '.join(missing) or 'a workload object'}")
    return data


_SUMMARY_FIELDS = ("workload", "hardware", "describe", "scaling", "unit", "world_size", "num_nodes", "throughput",
                   "efficiency", "baseline_world_size", "step_s", "comm_share")
