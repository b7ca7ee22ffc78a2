"""What checking result.json costs: the declaration (scalelab/record, msgspec) against the tools it was chosen over.

Reads real results (tests/data's, 4–11 KB; or --folder, e.g. a make demo's outputs: 4–110 KB) and checks each
of them N times in turn (10,000 by default: a site's year of nightly results), timing per file:
  - json.loads alone (what every reader pays before any check);
  - record.check: the whole declaration, every field, the rest rules and the checks across fields;
  - --against REV: that revision's hand validators (scalelab/schema.py, before the declaration), loaded from git;
  - the same representative part of the record (a rank's per-step lists, timing) declared in msgspec and in
    pydantic v2 (where it is installed: `pip install pydantic`), each from the parsed dict and from the bytes.
Import time of each library is read in a fresh interpreter; so is results.load over the N files (every result
kept, as a report holds them), here and at --against REV: time and peak memory before and after.

    python benchmarks/record_validation.py --files 10000 --against 00ac3c4
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time
import types
from typing import Annotated, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
import msgspec  # noqa: E402

from scalelab import record, results  # noqa: E402

S = Annotated[float, msgspec.Meta(ge=0)]


class MRank(msgspec.Struct):
    rank: Annotated[int, msgspec.Meta(ge=0)]
    step_times_s: Optional[list[S]] = None
    grads_ready_times_s: Optional[list[S]] = None
    allreduce_times_s: Optional[list[S]] = None
    losses: Optional[list[Optional[float]]] = None
    comm_spans_s: Optional[list[list[tuple[float, float]]]] = None
    probe_cpu_s: Optional[list[tuple[float, float]]] = None


class MTiming(msgspec.Struct):
    step_s: Optional[dict[str, S]] = None
    samples_per_s: Optional[S] = None


class MPart(msgspec.Struct):
    run_id: str
    timing: Optional[MTiming] = None
    ranks: Optional[list[MRank]] = None


def pydantic_part():
    """The same part in pydantic v2, or None where it is not installed."""
    try:
        from pydantic import BaseModel, Field
    except ImportError:
        return None
    P = Annotated[float, Field(ge=0)]

    class PRank(BaseModel):
        rank: Annotated[int, Field(ge=0)]
        step_times_s: Optional[list[P]] = None
        grads_ready_times_s: Optional[list[P]] = None
        allreduce_times_s: Optional[list[P]] = None
        losses: Optional[list[Optional[float]]] = None
        comm_spans_s: Optional[list[list[tuple[float, float]]]] = None
        probe_cpu_s: Optional[list[tuple[float, float]]] = None

    class PTiming(BaseModel):
        step_s: Optional[dict[str, P]] = None
        samples_per_s: Optional[P] = None

    class PPart(BaseModel):
        run_id: str
        timing: Optional[PTiming] = None
        ranks: Optional[list[PRank]] = None
    return PPart


def old_validators(rev: str):
    """scalelab/schema.py as it was at `rev` (the hand validators), as a module."""
    text = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:src/scalelab/schema.py"], capture_output=True,
                          text=True, check=True).stdout
    module = types.ModuleType("old_schema")
    exec(compile(text, f"{rev}:schema.py", "exec"), module.__dict__)
    return module


def import_ms(statement: str) -> float:
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                env=env).stdout) * 1e3


LOAD = """
import json, resource, sys, time
from scalelab import results
paths = json.loads(sys.argv[1]); n = int(sys.argv[2])
start = time.perf_counter()
kept = [results.load(paths[i % len(paths)]) for i in range(n)]
took = time.perf_counter() - start
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def load_cost(src: str, paths: list, n: int) -> tuple:
    """(seconds, peak RSS MB) of results.load over n files in turn, every result kept (as a report holds them),
    in a fresh interpreter reading scalelab from `src`."""
    out = subprocess.run([sys.executable, "-c", LOAD, json.dumps(paths), str(n)], capture_output=True, text=True,
                         check=True, env=dict(os.environ, PYTHONPATH=src)).stdout.split()
    return float(out[0]), float(out[1])


def src_at(rev: str, into: str) -> str:
    """The src/ folder of a git revision, unpacked under `into`."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return os.path.join(into, "src")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=10000)
    p.add_argument("--folder", help="the results to read (default: tests/data's; make demo's outputs/ are bigger)")
    p.add_argument("--against", help="a git revision whose scalelab/schema.py (the hand validators) to time too")
    a = p.parse_args()
    paths = sorted(glob.glob(os.path.join(a.folder or os.path.join(ROOT, "tests", "data"), "**", "result.json"),
                             recursive=True))
    raws = [open(path, "rb").read() for path in paths]
    datas = [{k: v for k, v in results.load(path).items() if k != "_path"} for path in paths]
    print(f"{len(paths)} real results, {min(map(len, raws)) / 1e3:.0f}–{max(map(len, raws)) / 1e3:.0f} KB; each "
          f"checked in turn, {a.files:,} checks in all ({sum(map(len, raws)) / len(raws) * a.files / 1e6:.0f} MB)")

    def timed(name, check, sources):
        start = time.perf_counter()
        for i in range(a.files):
            check(sources[i % len(sources)])
        took = time.perf_counter() - start
        print(f"  {name:<58} {took:7.2f} s  ({took / a.files * 1e3:.3f} ms/file)")

    timed("json.loads", json.loads, raws)
    timed("record.check: the whole declaration (msgspec)", record.check, datas)
    if a.against:
        old = old_validators(a.against)
        timed(f"{a.against}'s hand validators (schema.check), every field", old.check, datas)
    print("  the same part (ranks' per-step lists, timing) in each tool:")
    timed("msgspec.convert(dict)", lambda d: msgspec.convert(d, MPart), datas)
    timed("msgspec.json.decode(bytes)", lambda r: msgspec.json.decode(r, type=MPart), raws)
    part = pydantic_part()
    if part is not None:
        timed("pydantic model_validate(dict)", part.model_validate, datas)
        timed("pydantic model_validate_json(bytes)", part.model_validate_json, raws)
    else:
        print("  pydantic: not installed (pip install pydantic) - not timed")
    said = ", ".join(f"{what} {import_ms(what):.0f} ms" for what in (
        "import msgspec", "from pydantic import BaseModel", "import scalelab.record")
        if "pydantic" not in what or part is not None)
    print(f"import, in a fresh interpreter: {said}")
    print(f"results.load over {a.files:,} files in turn, every result kept, in a fresh interpreter:")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for name, src in (("this checkout", os.path.join(ROOT, "src")),
                          *(((a.against, src_at(a.against, tmp)),) if a.against else ())):
            took, peak = load_cost(src, paths, a.files)
            print(f"  {name:<58} {took:7.2f} s  ({took / a.files * 1e3:.3f} ms/file), peak {peak:,.0f} MB")


if __name__ == "__main__":
    main()
