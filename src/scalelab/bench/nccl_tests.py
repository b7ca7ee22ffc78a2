"""nccl-tests' `all_reduce_perf` text output read back as results (bench/nccl_format.py writes it).

Why: an all_reduce_perf log is the first measurement an HPC engineer has of a cluster, and the two tools should be
read side by side. The layout is nccl-tests' own (src/util.cu of NVIDIA/nccl-tests: writeResultHeader,
writeBenchmarkLinePreamble/Body, writeResultFooter). Reading takes the layouts in circulation: 2.13 on (a root
column, `#wrong` counts, `#  Rank  0 Group  0 Pid ...` lines), 2019-2021 (no root column, an `error` column
holding a max deviation, `#   Rank  0 Pid ...`) and 2017-2018 (`bytes N type op`, times in ms, no Pid). A log
becomes a result like the benchmark's own (kind "allreduce"), so the report's predicted columns read real NCCL
busbw exactly as they read ours.
"""

import datetime as _dt
import os
import re
import statistics

from scalelab import files, redaction, results
from scalelab.bench.nccl_format import TYPE_NAMES
from scalelab.numeric import spells_float
from scalelab.perfmodel.network import GB, bench_summary, busbw_from_algbw

DTYPES = {v: k for k, v in TYPE_NAMES.items()}
ITEMSIZE = {"int8": 1, "uint8": 1, "char": 1, "int32": 4, "uint32": 4, "int": 4, "int64": 8, "uint64": 8,
            "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
SUFFIXES = (".log", ".txt", ".out")  # files under an outputs folder that may hold a log (SLURM's slurm-*.out)
SNIFF_BYTES = 1 << 20  # a log's header is at its top: a file whose first MiB shows none is not read on

_RANK = re.compile(r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s*(.*?)\s*$")
_PARAMS = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+).*?"
                     r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_PROGRAM = re.compile(r"Collective test starting:\s*(\S+)")
_VERSIONS = (re.compile(r"nccl-tests version\s+(\S+)"), re.compile(r"NCCL version\s+(\S+)"))
_SCALELAB = re.compile(r"scalelab run_id:\s*(\S+)\s+accelerator:\s*(\S+)\s+backend:\s*(\S+)")
# what launchers put before each line: `srun --label` ("0: "), Open MPI's --tag-output ("[1,0]<stdout>:")
_PREFIX = re.compile(r"^\s*(?:\d+:|\[\d+,\d+\]<std(?:out|err)>:)\s?")
# the 2017-2018 header's names for the columns (print_header of all_reduce.cu then; its times are in ms)
_OLD_NAMES = {"bytes": "size", "N": "count", "op": "redop", "res": "error"}
# what marks a text as nccl-tests output; the average with its "#" (scalelab's own table says "Avg bus bandwidth:")
_MARKS = (_PARAMS, re.compile(r"#\s*Avg bus bandwidth\s*:"), _PROGRAM, re.compile(r"out-of-place\s+in-place"))


class NcclTestsError(results.ResultError):
    """A file that looks like nccl-tests output but cannot be used; the message says why, in one line."""


# --- reading ---------------------------------------------------------------------------------------------------


def looks_like(text: str) -> bool:
    """Whether a text holds nccl-tests output at all (a training log, a README: no)."""
    return any(m.search(line) for line in text.splitlines() for m in _MARKS)


def scan(root: str, listing=None):
    """nccl-tests logs below root (*.log, *.txt, *.out) -> (results, [(path, reason)] for logs skipped); listing:
    root's walk kept (files.listing).

    Files that do not look like nccl-tests output are passed over in silence: an outputs folder holds
    training and SLURM logs too.
    """
    found, skipped = [], []
    for folder, _, names in files.walk(root, [], listing):  # results.scan names the folders it could not list
        for name in names:
            if not name.endswith(SUFFIXES):  # before its path is made: 100,000 folders of result.json
                continue
            path = os.path.join(folder, name)
            try:  # a FIFO or a device named *.log is named, never opened; a big training log is sniffed only
                head = files.read_text(path, "log", root, head=SNIFF_BYTES)
                if looks_like(head):
                    found += load(path, os.path.relpath(path, root), root)  # the folder in the name: one name apart
            except results.ResultError as exc:
                skipped.append((path, str(exc)))
    return found, skipped


def load(path: str, name: str = None, root=None) -> list:
    """One all_reduce_perf log -> results (one per data type it measured, run_id "nccl-tests-" + name, the file's
    name by default), or NcclTestsError saying why not (files.Refused: not a regular file, too big for a log)."""
    text = files.read_text(path, "log", root)
    try:
        created = _dt.datetime.fromtimestamp(os.path.getmtime(path), _dt.timezone.utc).isoformat(timespec="seconds")
    except OSError as exc:
        raise NcclTestsError(f"unreadable ({exc.strerror})") from None
    found = [redaction.inert(r) for r in parse(text, name or os.path.basename(path), created)]  # shown, not obeyed
    for r in found:
        r["_path"] = path
    return found


def parse(text: str, name: str = "nccl-tests", created: str = "") -> list:
    """nccl-tests output -> results (kind "allreduce", one per data type); NcclTestsError for a log that is not
    a finished, correct all-reduce run."""
    if not looks_like(text):
        raise NcclTestsError("not nccl-tests output (no header, no 'Avg bus bandwidth' line)")
    meta = _Meta()
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        line = _PREFIX.sub("", line, count=1)
        stripped = line.lstrip("#").strip()
        if not stripped:
            continue
        tokens = line.split()
        if tokens[0].isdigit():  # a result row (NCCL INFO lines start with a host name)
            meta.check_program()  # another collective's rows may not even have all_reduce_perf's columns
            rows.append(meta.row(tokens, number))
        else:
            meta.read(stripped, line)
    return meta.results(rows, name, created)


class _Meta:
    """What a log says besides its rows: layout, ranks, parameters, footer."""

    def __init__(self):
        self.columns, self.time_unit = None, 1e-6
        self.ranks, self.params, self.avg, self.bounds = [], None, None, None
        self.program = self.run_id = None
        self.versions = {}

    def read(self, stripped: str, line: str):
        words = stripped.split()
        if words[:2] in (["size", "count"], ["bytes", "N"]):
            self.columns = [_OLD_NAMES.get(w, w) for w in words]
            self.time_unit = 1e-3 if words[0] == "bytes" else 1e-6
            return
        m = _RANK.match(line.strip())
        if m:
            self.ranks.append({"rank": int(m[1]), "group": int(m[2] or 0), "host": m[4], "name": m[7]})
            return
        for key, pattern in zip(("nccl_tests", "nccl"), _VERSIONS):
            if pattern.search(stripped) and key not in self.versions:
                self.versions[key] = pattern.search(stripped)[1]
        for attr, pattern in (("params", _PARAMS), ("avg", _AVG), ("bounds", _BOUNDS), ("program", _PROGRAM),
                              ("run_id", _SCALELAB)):
            m = pattern.search(stripped)
            if m:
                setattr(self, attr, m)

    def layout(self, n_tokens: int) -> dict:
        """Column name -> index, from the header; else from the row's length (13: 2.13 on, 12: 2019-2021)."""
        names = self.columns
        if names is None:
            names = (["size", "count", "type", "redop", "root"] if n_tokens >= 13 else
                     ["size", "count", "type", "redop"]) + ["time", "algbw", "busbw", "#wrong"] * 2
        times = [i for i, c in enumerate(names) if c in ("time", "cputime")]
        return {"names": names, "oop": times[0] if len(times) > 1 else None, "ip": times[-1] if times else None}

    def row(self, tokens: list, number: int) -> dict:
        lay = self.layout(len(tokens))
        names, ip = lay["names"], lay["ip"]
        needed = len([c for c in names if c != "timestamp"])
        if ip is None or len(tokens) < needed:
            raise NcclTestsError(f"line {number}: a row of {len(tokens)} fields where the header has {needed} "
                                 "(truncated or corrupt)")
        try:
            row = {"bytes": int(tokens[0]), "count": int(tokens[1]), "type": tokens[2],
                   "redop": tokens[names.index("redop")] if "redop" in names else "sum",
                   "root": int(tokens[names.index("root")]) if "root" in names else -1}
            for prefix, at in (("oop_", lay["oop"]), ("", ip)):
                if at is None:
                    continue
                row[prefix + "time_s"] = float(tokens[at]) * self.time_unit
                row[prefix + "algbw_printed"] = float(tokens[at + 1])
                row[prefix + "busbw_printed"] = float(tokens[at + 2])
                row[prefix + "wrong"] = _wrong(names[at + 3] if at + 3 < len(names) else "", tokens[at + 3])
        except (ValueError, IndexError):
            raise NcclTestsError(f"line {number}: not a result row (corrupt): {' '.join(tokens)[:60]}") from None
        return row

    def results(self, rows: list, name: str, created: str) -> list:
        self.check_finished(rows)
        world = self.world()
        by_type, keep = _all_reduce_rows(rows, world[0])
        warning = _count_warning([r for typed in by_type.values() for r in typed])
        out = []
        for typ, typed in by_type.items():
            dtype = DTYPES.get(typ, typ)
            base = self.run_id[1] if self.run_id else f"nccl-tests-{name}"
            payload = results.envelope("allreduce", base if len(by_type) == 1 else f"{base}-{dtype}")
            payload["created"] = created or payload["created"]
            out.append(results.validate(self.fill(payload, _merge_repeats(typed, dtype, world[0]), keep, world)))
            out[-1]["_warnings"] = [warning] if warning else []
        return out

    def check_program(self):
        """An all-reduce's log, or NcclTestsError: all_gather_perf's (and scalelab's --collective all_gather,
        which names it) has another bus factor and does not predict DDP's all-reduce."""
        if self.program and not re.search(r"all_?reduce", self.program[1]):
            raise NcclTestsError(f"{self.program[1]}'s output, not all_reduce_perf's (only all-reduce feeds the "
                                 "report)")

    def check_finished(self, rows: list):
        """A finished, correct all_reduce_perf run, or NcclTestsError saying why not."""
        self.check_program()
        if not rows:
            raise NcclTestsError("nccl-tests output without a single result row (truncated)")
        if self.avg is None:
            raise NcclTestsError(f"truncated: {len(rows)} row(s) and no 'Avg bus bandwidth' line "
                                 "(the run did not finish)")
        if self.bounds and (self.bounds[2] == "FAILED" or int(self.bounds[1])):
            raise NcclTestsError(f"nccl-tests reported {self.bounds[1]} size(s) with wrong values "
                                 "(Out of bounds values: FAILED)")

    def fill(self, payload: dict, merged: list, redop: str, world: tuple) -> dict:
        """The result's fields. A real nccl-tests log is read by its out-of-place column, the one its users
        quote (NCCL's own out-of-place kernel); scalelab's own log (its run_id line) by its in-place column,
        as its result.json, since its out-of-place column adds a copy."""
        size, nodes, per_node, hosts, devices = world
        column = "in-place" if self.run_id or not all("oop_time_s" in r for r in merged) else "out-of-place"
        rows = _out_of_place_read(merged) if column == "out-of-place" else merged
        summary = bench_summary(rows)  # large_msg_busbw_GBps: the plateau, as for scalelab's own sweeps
        summary["nccl_tests_avg_busbw_GBps"] = float(self.avg[1]) if spells_float(self.avg[1]) else None
        accelerator, backend = (self.run_id[2], self.run_id[3]) if self.run_id else ("gpu", "nccl")
        params = self.params
        payload.update(
            status="completed", error=None, run_name=None,
            source={"format": "nccl-tests", "program": self.program[1] if self.program else "all_reduce_perf",
                    "redop": redop, "column": column, **self.versions},
            launch={"launcher": "nccl-tests", "world_size": size, "num_nodes": nodes, "devices": per_node,
                    "accelerator": accelerator, "backend": backend, "device_names": devices, "hostnames": hosts,
                    "link": None},
            config={"dtype": merged[0]["dtype"], **{k: int(params[i]) if params else None for k, i in
                                                    (("min_bytes", 3), ("max_bytes", 4), ("warmup_iters", 5),
                                                     ("iters", 6))}},
            rows=rows, summary=summary)
        return payload

    def world(self) -> tuple:
        """(world size, nodes, ranks per node, hosts, device names) from the `# Using devices` lines."""
        if not self.ranks:
            raise NcclTestsError("no '#  Rank N ... on HOST device N' lines: the world size and nodes are unknown")
        numbers = [r["rank"] for r in self.ranks]
        if len(set(numbers)) < len(numbers):
            raise NcclTestsError(f"rank {_first_repeat(numbers)} is listed twice: several runs in one file "
                                 "(nccl-tests built without MPI=1 under mpirun/srun, or logs joined); keep one run")
        if len({r["group"] for r in self.ranks}) > 1:
            raise NcclTestsError("the ranks are split into groups (NCCL_TESTS_SPLIT): one all-reduce per group")
        per_host = {}
        for r in self.ranks:
            per_host[r["host"]] = per_host.get(r["host"], 0) + 1
        names = sorted({r["name"] for r in self.ranks})
        return len(numbers), len(per_host), max(per_host.values()), sorted(per_host), names


def _all_reduce_rows(rows: list, world: int) -> tuple:
    """({type: rows}, redop) of the all-reduce rows (root -1) of one reduction: sum where the log has it."""
    rows = [r for r in rows if r["root"] == -1]
    if not rows:
        raise NcclTestsError("every row has a root: a rooted collective (reduce, broadcast), not all-reduce")
    redops = sorted({r["redop"] for r in rows})
    keep = "sum" if "sum" in redops else redops[0]
    by_type = {}
    for r in rows:
        if r["redop"] == keep:
            _check_row(r, world)
            by_type.setdefault(r["type"], []).append(r)
    return by_type, keep


def _out_of_place_read(rows: list) -> list:
    """Rows whose time, bandwidths and #wrong are the out-of-place column's; the in-place one kept as in_place_*."""
    fields = ("time_s", "algbw_GBps", "busbw_GBps", "wrong")
    return [{"bytes": r["bytes"], "count": r["count"], "dtype": r["dtype"], **{f: r["oop_" + f] for f in fields},
             **{"in_place_" + f: r[f] for f in fields}} for r in rows]


def _wrong(column: str, token: str):
    """#wrong is a count ('N/A' where unchecked); the older `error` column a max deviation, not a count."""
    if token == "N/A":
        return None
    value = float(token)
    if column == "#wrong":
        return int(value)
    return None


def _check_row(r: dict, world: int):
    """The printed bandwidths must follow from size, time and the all-reduce factor 2(n-1)/n at this world size
    (within print rounding): else the log is another collective, or the ranks listed are not the run's. The
    size column is the message: nccl-tests computes algbw from bytes, whatever the count column says."""
    for prefix in ("oop_", ""):
        if prefix + "time_s" not in r:
            continue
        if r[prefix + "wrong"]:
            raise NcclTestsError(f"{r[prefix + 'wrong']} wrong values at size {r['bytes']}: the all-reduce "
                                 "returned wrong data")
        algbw, busbw = r[prefix + "algbw_printed"], r[prefix + "busbw_printed"]
        t = r[prefix + "time_s"]
        if t <= 0:
            raise NcclTestsError(f"time {t * 1e6:g} us at size {r['bytes']}")
        if not _close(r["bytes"] / t / GB, algbw) or not _close(busbw_from_algbw(algbw, world), busbw):
            raise NcclTestsError(f"at size {r['bytes']}, busbw {busbw:g} GB/s is not algbw {algbw:g} x 2(n-1)/n "
                                 f"for the {world} rank(s) listed: not an all-reduce of {world} rank(s)")


def _count_warning(rows: list):
    """One line where the count column is not size / word size (seen in older logs), else None: the rows are
    read by their size, as nccl-tests computes algbw and busbw from bytes (all_reduce.cu's getBw)."""
    off = [r for r in rows if ITEMSIZE.get(r["type"]) and r["bytes"] != r["count"] * ITEMSIZE[r["type"]]]
    if not off:
        return None
    r = off[0]
    return (f"count is not size / {ITEMSIZE[r['type']]} B of {r['type']} at {len(off)} of {len(rows)} row(s) "
            f"(first: size {r['bytes']}, count {r['count']}): read by the size column, as nccl-tests computes "
            "its bandwidths")


def _close(computed: float, printed: float) -> bool:
    return abs(computed - printed) <= 0.011 + 0.02 * abs(printed)


def _merge_repeats(rows: list, dtype: str, world: int) -> list:
    """One row per size (median time where the log repeats sizes: -N cycles), in the benchmark's row fields;
    bandwidths recomputed from the time, which is printed to more digits than they are."""
    by_size = {}
    for r in rows:
        by_size.setdefault(r["bytes"], []).append(r)
    out = []
    for size, rs in sorted(by_size.items()):
        row = {"bytes": size, "count": rs[0]["count"], "dtype": dtype}
        for prefix in ("oop_", ""):
            times = [r[prefix + "time_s"] for r in rs if prefix + "time_s" in r]
            if not times:
                continue
            t = statistics.median(times)
            row[prefix + "time_s"] = t
            row[prefix + "algbw_GBps"] = size / t / GB
            row[prefix + "busbw_GBps"] = busbw_from_algbw(size / t / GB, world)
            wrongs = [r[prefix + "wrong"] for r in rs]
            row[prefix + "wrong"] = None if None in wrongs else sum(wrongs)
        out.append(row)
    return out


def _first_repeat(values: list):
    seen = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return None
