"""Memory target under sharding: one rank's estimate (perfmodel.memory, without its fixed overhead) against what a
GPT training step allocates on that rank, under DDP and under FSDP at 1, 2 and 4 ranks.

No GPU here: ranks are CPU processes joined by gloo, and what a rank holds is counted as torch allocates it, in a
fresh process per measurement (scalelab.testing.tensors). Measured per rank = its persistent tensors + the peak of
its step (forward and backward) on top of them: what torch.cuda.max_memory_allocated would read at the step's end.

- DDP (step_peak, as benchmarks/memory_model.py measures it): the whole weights, the gradients preallocated as DDP's
  buckets and AdamW's two moments, + the most bytes forward and backward held beside them. A DDP rank holds whole
  replicas at every world size, so it is measured once, in one process, and shown at each N beside the estimate
  training_memory(strategy="ddp", world_size=N).
- FSDP (fsdp_step: the GPT fully_shard'ed as a run shards it, on each of N gloo ranks, one process and one thread
  each): this rank's shards of the weights and of AdamW's moments (its step counters included), + the peak of the
  CPU allocator during forward and backward beyond what existed before (torch's profiler: the gathered units, the
  unsharded gradients and their reduce-scatter inputs, the sharded gradients, which zero_grad(set_to_none=True)
  left to the step to make, the activations and the loss; gloo's own copies left out). The largest rank's figure.

Targets: DDP, the whole rank's estimate within 15 % of the measurement (memory_model.py's tolerance); FSDP, the
estimate of what the step adds to the shards (everything but the weights and the moments) from 3 % below to 15 %
above the measured step peak (tests/unit/test_memory.py's band). The shards are exact (AdamW's step counters aside),
so the whole rank's ratio lies between that one and 1. Only forward and backward are measured, as in memory_model.py.

    python benchmarks/sharded_memory.py                          # tiny at 8, small cut to 2 layers at 1; fp32 (3 min)
    python benchmarks/sharded_memory.py --precision bf16-mixed   # FSDP's bf16 gathers, autocast's DDP step
    python benchmarks/sharded_memory.py --cases small/2:2 --world-sizes 2 4 --timeout 900
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

TOLERANCE = 0.15  # selfcheck.MEMORY_TOLERANCE: DDP's whole rank, as memory_model.py
FSDP_BAND = (0.97, 1.15)  # tests/unit/test_memory.py: FSDP's estimated step part ÷ the measured step peak
# preset[/n_layer]:batch; small/2 is small cut to 2 layers, at 1 sequence: its 54 M parameters' shards are 40 % of a
# rank at 1, and each of N ranks computes a whole batch (4 ranks on 2 cores: 2 minutes for this case at batch 1)
DEFAULT_CASES = ("tiny:8", "small/2:1")
WORLD_SIZES = (1, 2, 4)

# every child dies with the benchmark (PR_SET_PDEATHSIG = 1, SIGKILL = 9), even one killed outright
PRELUDE = r"""
import ctypes, json, sys
ctypes.CDLL(None).prctl(1, 9)
sys.path.insert(0, sys.argv[1])
from scalelab.workloads.presets import TransformerShape
*dims, batch, precision, init, rank, world = json.loads(sys.argv[2])
shape = TransformerShape(*dims)
"""
DDP_CHILD = PRELUDE + r"""
from scalelab.testing.tensors import step_peak
print(json.dumps(step_peak(shape, batch, precision == "bf16-mixed")))
"""
FSDP_CHILD = PRELUDE + r"""
import torch
import torch.distributed as dist
from scalelab.testing.tensors import fsdp_step
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
try:
    got = fsdp_step(shape, batch, precision)
finally:
    dist.destroy_process_group()
print(json.dumps(got))
"""


def parse_case(text):
    """'small/2:4' -> (the preset's shape with 2 layers, batch 4, the label), as memory_model.py reads it."""
    import dataclasses

    from scalelab.workloads.presets import PRESETS

    try:
        name, batch = text.split(":")
        preset, _, layers = name.partition("/")
        shape, batch = PRESETS[preset], int(batch)
        if layers:
            shape = dataclasses.replace(shape, n_layer=int(layers))
    except (KeyError, ValueError):
        raise ValueError(f"{text!r} is not preset[/n_layer]:batch (presets: {', '.join(PRESETS)})") from None
    if batch < 1 or shape.n_layer < 1:
        raise ValueError(f"{text!r}: the batch and the layers must be at least 1")
    return shape, batch, f"{preset}{f'/{layers}' if layers else ''} batch {batch}"


def run_ranks(code, shape, batch, precision, world, timeout):
    """[the JSON each of `world` processes printed last], rank by rank; every process still alive is killed on a
    failure, on the timeout (seconds, for all of them) or on Ctrl-C. RuntimeError says which rank failed and why."""
    with tempfile.TemporaryDirectory(prefix="scalelab-sharded-") as tmp:
        init = "file://" + os.path.join(tmp, "rendezvous")
        logs = [(os.path.join(tmp, f"{rank}.out"), os.path.join(tmp, f"{rank}.err")) for rank in range(world)]
        procs = []
        try:
            for rank, (out, err) in enumerate(logs):
                arg = json.dumps([shape.n_layer, shape.n_head, shape.d_model, shape.seq_len, shape.vocab_size,
                                  batch, precision, init, rank, world])
                with open(out, "w") as stdout, open(err, "w") as stderr:
                    procs.append(subprocess.Popen([sys.executable, "-c", code, os.path.join(ROOT, "src"), arg],
                                                  stdout=stdout, stderr=stderr))
            failed = wait_all(procs, timeout)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
        texts = [(open(out).read(), open(err).read()) for out, err in logs]
    if failed:
        rank, why = failed
        last = (texts[rank][1].strip().splitlines() or ["no output"])[-1][-200:] if rank is not None else ""
        raise RuntimeError(f"{why}: {last}" if last else why)
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in texts]


def wait_all(procs, timeout):
    """None once every process exited 0; else (the failed rank or None, why), as soon as one fails or time is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        bad = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        if bad:
            return bad[0], f"rank {bad[0]} exited {codes[bad[0]]}"
        if all(code == 0 for code in codes):
            return None
        time.sleep(0.2)
    return None, f"timed out after {timeout:.0f} s"


def ddp_rows(shape, batch, precision, world_sizes, timeout):
    """One DDP rank, measured once (step_peak), beside training_memory's estimate at each world size."""
    from scalelab.perfmodel import memory

    got = run_ranks(DDP_CHILD, shape, batch, precision, 1, timeout)[0]
    rows = []
    for n in world_sizes:
        est = memory.training_memory(shape, batch, precision, overhead=0, strategy="ddp", world_size=n)
        step = est.total - est.weights - est.gradients - est.optimizer - est.buckets  # activations and loss
        rows.append(("ddp", n, got["persistent"] + got["step"], est.total, step / got["step"], 0))
    return rows


def fsdp_row(shape, batch, precision, n, timeout):
    """One FSDP rank of n: the largest rank's shards + step peak, the estimate, and the ratio of the step parts."""
    from scalelab.perfmodel import memory

    ranks = run_ranks(FSDP_CHILD, shape, batch, precision, n, timeout)
    totals = [r["weights"] + r["moments"] + r["step"] for r in ranks]  # the gradients are made in the step
    worst = ranks[totals.index(max(totals))]
    est = memory.training_memory(shape, batch, precision, overhead=0, strategy="fsdp", world_size=n)
    step = est.total - est.weights - est.optimizer  # what the step adds to the shards that persist
    return ("fsdp", n, max(totals), est.total, step / worst["step"], max(totals) - min(totals))


def verdict(row) -> bool:
    """A row (strategy, ranks, measured, estimate, step ratio, the ranks' spread) within its target."""
    strategy, _, measured, estimate, step_ratio, _ = row
    if strategy == "ddp":
        return abs(estimate / measured - 1) <= TOLERANCE
    return FSDP_BAND[0] <= step_ratio <= FSDP_BAND[1]


def print_row(label, row):
    strategy, n, measured, estimate, step_ratio, _ = row
    print(f"{label:<18}{strategy:<9}{n:>5}{measured / 1e6:>13.1f}{estimate / 1e6:>13.1f}{estimate / measured:>11.3f}"
          f"{step_ratio:>11.3f}  {'yes' if verdict(row) else 'NO'}", flush=True)


def measure_case(case, precision, world_sizes, timeout):
    """Print one case's rows as they come; (rows met, rows tried, the FSDP ranks' largest spread in bytes)."""
    shape, batch, label = case
    met = tried = spread = 0
    jobs = [("ddp", None)] + [("fsdp", n) for n in world_sizes]
    for strategy, n in jobs:
        try:
            rows = (ddp_rows(shape, batch, precision, world_sizes, timeout) if strategy == "ddp"
                    else [fsdp_row(shape, batch, precision, n, timeout)])
        except RuntimeError as e:
            tried += len(world_sizes) if strategy == "ddp" else 1
            print(f"{label:<18}{strategy:<9}{n or '':>5}  failed: {e}", flush=True)
            continue
        for row in rows:
            print_row(label, row)
            tried += 1
            met += verdict(row)
            spread = max(spread, row[5])
    return met, tried, spread


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=DEFAULT_CASES, help="preset[/n_layer]:batch (default: %(default)s)")
    p.add_argument("--precision", default="32", choices=("32", "bf16-mixed"), help="(default: %(default)s)")
    p.add_argument("--world-sizes", nargs="+", type=int, default=WORLD_SIZES, help="(default: %(default)s)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per measurement, all its ranks together "
                                                              "(default: %(default)s)")
    args = p.parse_args()
    try:
        cases = [parse_case(case) for case in args.cases]
    except ValueError as e:
        p.error(f"--cases: {e}")
    if min(args.world_sizes) < 1:
        p.error("--world-sizes: at least 1 rank")
    start = time.monotonic()
    print(f"precision {args.precision}; one process per rank, {os.cpu_count()} cores; MB = 1e6 bytes")
    print(f"{'case':<18}{'strategy':<9}{'ranks':>5}{'measured MB':>13}{'estimate MB':>13}{'est÷meas':>11}"
          f"{'step e÷m':>11}  target")
    met = tried = spread = 0
    for case in cases:
        m, t, s = measure_case(case, args.precision, args.world_sizes, args.timeout)
        met, tried, spread = met + m, tried + t, max(spread, s)
    print(footnotes(spread))
    ok = met == tried
    print(f"target: DDP's estimate within {TOLERANCE:.0%} of the measured rank, FSDP's step part within "
          f"{FSDP_BAND[0]:.2f}–{FSDP_BAND[1]:.2f} of the measured step peak: {met} of {tried} rows "
          f"({time.monotonic() - start:.0f} s): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def footnotes(spread) -> str:
    return "\n".join([
        "measured: persistent tensors (DDP: weights, gradients as buckets, AdamW's moments; FSDP: this rank's shards "
        "of the weights and moments) + the step's peak on top (FSDP: the gathered units, gradients, activations, "
        "loss)",
        "estimate: perfmodel.memory.training_memory(..., overhead=0, strategy, world_size=ranks); step e÷m: the "
        "estimate without the weights and moments (DDP: and the gradients) ÷ the measured step peak",
        "DDP holds whole replicas at every world size: its rank is measured once, in one process, and shown at each",
        f"FSDP: the largest rank's figure (ranks differed by at most {spread / 1e6:.3f} MB)"])


if __name__ == "__main__":
    sys.exit(main())
