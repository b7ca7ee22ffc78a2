"""Speed target 3: `benchmark.py` over 10,000 result files in under 3 s; and a site's scale, real-size.

Writes N synthetic results (one rank record per rank, 50 step times each) and times the CLI end to end:

    python benchmarks/report_speed.py --files 10000

--real DIR: DIR's results (a make demo output: 4-110 KB each) replicated N times instead, each with its own run id
and date (one an hour), as a site's nightly folder grows. Timed, with each one's peak memory (the child's max RSS):
a report that reads every file whole (--no_index), then the report twice (the first builds the index, the second
reads what the first left); --add then writes one more result and times a third, a fourth without what the third
kept for this user (report/kept.py: a cache pruned or cleared), and what any report there pays before it reads a
result (its floor on this machine); --history (every run of the folder in its configuration's series at once) last:

    python benchmarks/report_speed.py --files 100000 --real outputs --add
"""

import argparse
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
from scalelab import results  # noqa: E402
from scalelab.workloads import gpt  # noqa: E402


def synthetic(i: int, rng: random.Random) -> dict:
    world = rng.choice([1, 2, 4, 8])
    steps = [round(rng.uniform(0.09, 0.11), 6) for _ in range(50)]  # as timing.py stores them
    data = results.envelope("training", f"synthetic-{i:05d}")
    data.update(
        status="completed", error=None,
        workload={"model": gpt.SPEC.name, "options": {"preset": "tiny", "seq_len": 128, "group": i % 20},
                  "batch_size": 8, "scaling": "weak", "precision": "32", "describe": "gpt tiny", "params": 3323392,
                  "tokens_per_sample": 128, "batch_per_device": 8, "global_batch": 8 * world},
        launch={"launcher": "slurm", "world_size": world, "num_nodes": max(1, world // 4),
                "devices": min(world, 4), "accelerator": "cpu", "device_names": ["cpu"],
                "threads": 1},
        timing={"samples_per_s": 80.0 * world * rng.uniform(0.7, 1.0), "tokens_per_s": 10240.0 * world,
                "train_time_s": sum(steps[5:]), "step_s": {"median": 0.1}, "epoch_times_s": [5.0],
                "first_step_s": 4.0, "whole_run_s": 12.0,
                # what a real multi-device run records: the forecast's track record calibrates on it
                "comm": None if world == 1 else {"compute_s": 0.09, "allreduce_s": 0.01, "waited_s": 0.008,
                                                 "allreduce_alone_s": 0.009 * world ** 0.5, "grad_bytes": 13293568,
                                                 "bucket_bytes": [13293568], "buckets": 1, "probe_steps": 8}},
        metrics={"train_loss": 5.0, "val_loss": None, "val_acc": None},
        ranks=[{"rank": r, "step_times_s": steps, "losses": [5.0] * 50} for r in range(world)],
    )
    return data


def replicate(real: str, folder: str, n: int) -> int:
    """n results in folder: real's, in turn, each with its own run id and created time; their bytes in all."""
    found, _ = results.scan(real)
    templates = [{k: v for k, v in r.items() if k != "_path"} for r in found]
    start, written = datetime.datetime(2021, 1, 1, tzinfo=datetime.timezone.utc), 0
    for i in range(n):
        data = dict(templates[i % len(templates)])
        data["run_id"] = f"{data['run_id'][:60]}-r{i:06d}"
        data["created"] = (start + datetime.timedelta(hours=i)).isoformat(timespec="seconds")
        os.makedirs(os.path.join(folder, data["run_id"]))
        text = json.dumps(data, indent=1)
        with open(os.path.join(folder, data["run_id"], "result.json"), "w") as fh:
            fh.write(text)
        written += len(text)
    return written


def timed_report(folder: str, *flags: str) -> tuple:
    """(seconds, the child's peak RSS in MiB (ru_maxrss is KiB), exit code) of benchmark.py over folder."""
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            f"p = subprocess.run([sys.executable, {os.path.join(ROOT, 'src', 'benchmark.py')!r}, '--output_dir', "
            f"{folder!r}, *{list(flags)!r}], capture_output=True); took = time.perf_counter() - t; "
            "print(took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, p.returncode)")
    took, rss, rc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   check=True).stdout.split()
    return float(took), float(rss), int(rc)


def floor(folder: str) -> tuple:
    """(seconds, seconds, count) any report of folder pays on this machine before it reads a result: the interpreter
    and the report's imports, and a stat of each folder and result.json (a file rewritten in place moves no folder's
    times, so each file is looked at; a file added moves only its own folder's)."""
    code = f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'src')!r}); import scalelab.report.cli"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    imports = time.perf_counter() - start
    paths = [p for where, _, names in os.walk(folder)
             for p in (where, *(os.path.join(where, n) for n in names if n == "result.json"))]
    start = time.perf_counter()
    for path in paths:
        os.stat(path)
    return imports, time.perf_counter() - start, len(paths)


def kept_gone(folder: str) -> str:
    """This user's kept reading of folder removed, as a cache pruned or cleared leaves it: what was removed."""
    from scalelab.report import kept

    removed = 0
    for path in (kept._where(folder) or ())[:2]:  # the whole and its delta
        if os.path.exists(path):
            os.remove(path)
            removed += 1
    return f"{removed} file(s) removed" if removed else "none was kept"


def at_scale(a) -> None:
    folder = tempfile.mkdtemp(prefix="scalelab-report-scale-")
    start = time.perf_counter()
    size = replicate(a.real, folder, a.files)
    print(f"{a.files:,} results of {a.real} replicated ({size / 1e6:,.0f} MB) in {time.perf_counter() - start:.0f} s")
    for what, flags in (("every file read whole (--no_index)", ["--no_index"]), ("first report", []),
                        ("second report", [])):
        took, rss, rc = timed_report(folder, *flags)
        print(f"  {what}: {took:.1f} s ({took / a.files * 1e3:.2f} ms per file), peak RSS {rss:,.0f} MiB, exit {rc}")
    if a.add:
        replicate(a.real, os.path.join(folder, "added"), 1)
        took, rss, rc = timed_report(folder)
        print(f"  one result added, reported again: {took:.1f} s, peak RSS {rss:,.0f} MiB, exit {rc}")
        gone = kept_gone(folder)
        took, rss, rc = timed_report(folder)
        print(f"  again, without what the last report kept ({gone}: the index read row by row): {took:.1f} s, "
              f"peak RSS {rss:,.0f} MiB, exit {rc}")
        imports, stats, n = floor(folder)
        print(f"  before any result is read, here: {imports:.2f} s to start and import, {stats:.2f} s to stat each of "
              f"{n:,} folders and result files: {imports + stats:.2f} s")
    took, rss, rc = timed_report(folder, "--history")
    print(f"  --history: {took:.1f} s, peak RSS {rss:,.0f} MiB, exit {rc}")
    print(f"(left in {folder})" if a.keep else "")
    if not a.keep:
        shutil.rmtree(folder)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=10000)
    p.add_argument("--real", metavar="DIR", help="replicate this folder's results (real size) instead")
    p.add_argument("--add", action="store_true", help="with --real: then add one result and report again")
    p.add_argument("--keep", action="store_true", help="with --real: keep the folder")
    a = p.parse_args()
    if a.real:
        return at_scale(a)
    folder = tempfile.mkdtemp(prefix="scalelab-report-speed-")
    rng = random.Random(0)
    for i in range(a.files):
        results.write(folder, synthetic(i, rng))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "src", "benchmark.py"), "--output_dir", folder],
                          capture_output=True, text=True)
    took = time.perf_counter() - start
    print(f"benchmark.py over {a.files:,} result files: {took:.2f} s end to end (exit {proc.returncode}, "
          f"{proc.stdout.count('Group ')} groups printed); target < 3 s")


if __name__ == "__main__":
    main()
