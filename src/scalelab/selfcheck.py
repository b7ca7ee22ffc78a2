"""The first-allocation self-check (src/selfcheck.py): PASS/FAIL, with the measured figure, for each claim a
scaling table rests on, read from a short training run and an all-reduce benchmark in one folder.

    sbatch slurm_jobs/gpu_selfcheck.sh                 # on a GPU cluster: both runs, then this check
    python src/selfcheck.py --output_dir outputs/selfcheck [--expect_busbw 20] [--log slurm-123.out]

Each claim is a function of the newest training result (and benchmark) that returns its verdict; claims that do
not apply to the hardware that ran say SKIP and why, so the same check reads a CPU rehearsal as well. The
verdicts are also written to selfcheck.json in the folder (a plain file: the report does not read it).
"""

import json
import math
import os
import re
import sys
from typing import NamedTuple, Optional

from scalelab import results
from scalelab.cli import OneLineParser, positive_float, run_main
from scalelab.errors import UsageError

CLOCK_TOLERANCE = 0.05  # timed steps may cover the training loop to within 5 %
BUSBW_FRACTION = 0.8  # an interconnect delivering under 80 % of what the site expects fails


class Verdict(NamedTuple):
    claim: str
    status: str  # PASS, FAIL, SKIP or INFO
    figure: str  # what was measured
    note: str = ""


def newest(found: list, kind: str) -> Optional[dict]:
    done = [r for r in found if r.get("kind") == kind and r.get("status") == "completed"]
    return max(done, key=lambda r: r.get("created") or "") if done else None


def each_rank_own_device(run) -> Verdict:
    ranks, gpu = run["ranks"], run["launch"]["accelerator"] == "gpu"
    if not gpu:
        return Verdict("each rank on its own GPU", "SKIP", "CPU run", "no GPUs in this run")
    per_host = {}
    for r in ranks:
        per_host.setdefault(r["host"], []).append(r["device"])
    shared = {h: d for h, d in per_host.items() if len(set(d)) < len(d)}
    figure = "; ".join(f"{h}: {', '.join(d)}" for h, d in sorted(per_host.items()))
    return Verdict("each rank on its own GPU", "FAIL" if shared else "PASS", figure,
                   "ranks shared a GPU: check --gres and --ntasks-per-node" if shared else "")


def cores_per_rank(run) -> Verdict:
    ranks = run["ranks"]
    if not all(r.get("cpu_affinity") for r in ranks):
        return Verdict("cores per rank", "SKIP", "not recorded", "a result from an older scalelab")
    fewest = min(len(r["cpu_affinity"]) for r in ranks)
    threads = max(r.get("threads") or 1 for r in ranks)
    problem = run["launch"].get("oversubscribed")
    return Verdict("cores per rank", "FAIL" if problem else "PASS", f"≥ {fewest} core(s), {threads} thread(s)",
                   problem or "")


def backend(run) -> Verdict:
    launch = run["launch"]
    if launch["world_size"] == 1:
        return Verdict("process group backend", "SKIP", "1 rank", "no communication in a 1-device run")
    want = "nccl" if launch["accelerator"] == "gpu" else "gloo"
    return Verdict("process group backend", "PASS" if launch.get("backend") == want else "FAIL",
                   str(launch.get("backend")), "" if launch.get("backend") == want else f"expected {want}")


def nccl_transport(log_text: Optional[str], run) -> Verdict:
    if run["launch"]["accelerator"] != "gpu":
        return Verdict("NCCL transport between nodes", "SKIP", "CPU run", "gloo over TCP")
    if not log_text:
        return Verdict("NCCL transport between nodes", "SKIP", "no log", "give --log with NCCL_DEBUG=INFO output")
    ib, sock = re.search(r"NET/IB", log_text), re.search(r"NET/Socket", log_text)
    if run["launch"]["num_nodes"] == 1:
        return Verdict("NCCL transport between nodes", "SKIP", "1 node", "no inter-node traffic")
    if ib and not sock:
        return Verdict("NCCL transport between nodes", "PASS", "NET/IB")
    return Verdict("NCCL transport between nodes", "FAIL", "NET/Socket" if sock else "not found in the log",
                   "NCCL uses TCP sockets between nodes: check NCCL_IB_HCA / NCCL_SOCKET_IFNAME (chapter 8)")


def precision_ran(run) -> Verdict:
    precision = run["workload"].get("precision")
    loss = (run.get("metrics") or {}).get("final_train_loss")
    ok = loss is not None and math.isfinite(loss)
    status = "PASS" if ok else "FAIL"
    if precision != "bf16-mixed":
        return Verdict("bf16 training", "SKIP" if ok else "FAIL", f"precision {precision}",
                       "this run did not use bf16-mixed")
    return Verdict("bf16 training", status, f"final loss {loss}", "" if ok else "the loss is not a finite number")


def step_clocks_cover_the_loop(run) -> Verdict:
    """Timed steps (device-synchronised) against the epochs' wall time: a missed sync shows as a gap."""
    rank0 = run["ranks"][0]
    steps, epochs = sum(rank0["step_times_s"]), sum(rank0.get("epoch_times_s") or [])
    if not epochs:
        return Verdict("step clocks cover the loop", "SKIP", "no epoch times", "")
    gap = abs(epochs - steps) / epochs
    return Verdict("step clocks cover the loop", "PASS" if gap <= CLOCK_TOLERANCE else "FAIL",
                   f"steps {steps:.2f} s of {epochs:.2f} s ({gap * 100:.1f} % apart)",
                   "" if gap <= CLOCK_TOLERANCE else "step timing misses part of the loop (an unsynchronised clock?)")


def comm_on_one_clock(run) -> Verdict:
    """The all-reduce's busy time of a step can never exceed the step: if it does, intervals mix clocks."""
    worst = 0.0
    for r in run["ranks"]:
        for busy, step in zip(r.get("allreduce_s") or [], r["step_times_s"]):
            worst = max(worst, busy / step if step else 0.0)
    if run["launch"]["world_size"] == 1:
        return Verdict("all-reduce time within its step", "SKIP", "1 rank", "")
    return Verdict("all-reduce time within its step", "PASS" if worst <= 1.0 + 1e-3 else "FAIL",
                   f"at most {worst * 100:.0f} % of its step", "" if worst <= 1.001 else "busy > step: clocks mixed")


def busbw(bench, expect: Optional[float]) -> Verdict:
    if bench is None:
        return Verdict("all-reduce busbw", "SKIP", "no benchmark", "run src/allreduce_bench.py into the folder")
    got = (bench.get("summary") or {}).get("large_msg_busbw_GBps")
    where = f"{bench['launch']['world_size']} ranks on {bench['launch']['num_nodes']} node(s)"
    if got is None:
        return Verdict("all-reduce busbw", "SKIP", where, "no message ≥ 1 MiB measured")
    if expect is None:
        return Verdict("all-reduce busbw", "INFO", f"{got:.3g} GB/s, {where}", "give --expect_busbw to judge it")
    ok = got >= BUSBW_FRACTION * expect
    return Verdict("all-reduce busbw", "PASS" if ok else "FAIL", f"{got:.3g} GB/s of {expect:g} expected, {where}",
                   "" if ok else f"below {BUSBW_FRACTION:.0%} of the expected figure")


MEMORY_TOLERANCE = 0.15  # the memory model's estimate against the measured peak


def memory_estimate(run) -> Verdict:
    """perfmodel.memory's estimate (what train.py's check and predict.py use) against the peak the GPU measured."""
    m = run.get("memory") or {}
    est, peak = m.get("estimate_bytes"), m.get("peak_allocated_bytes")
    if run["launch"]["accelerator"] != "gpu":
        return Verdict("memory estimate vs peak", "SKIP", "CPU run", "torch measures GPU memory only")
    if not est or not peak:
        return Verdict("memory estimate vs peak", "SKIP", "no estimate" if not est else "no peak recorded",
                       "the estimate covers the GPT (--model transformer)" if not est else "an older scalelab")
    off = est / peak - 1
    ok = abs(off) <= MEMORY_TOLERANCE
    return Verdict("memory estimate vs peak", "PASS" if ok else "FAIL",
                   f"estimate {est / 1e9:.2f} GB, peak {peak / 1e9:.2f} GB allocated ({off * 100:+.0f} %)",
                   "" if ok else f"more than {MEMORY_TOLERANCE:.0%} apart: the memory check before fit would misjudge")


def mfu(run) -> Verdict:
    t = run["timing"]
    if t.get("mfu") is None:
        why = t.get("peak_note")  # a GPU the datasheet table does not know: the run recorded why
        return Verdict("model FLOPs utilisation", "SKIP", "no peak known", why or "CPU, or a GPU without a known peak")
    return Verdict("model FLOPs utilisation", "INFO", f"{t['mfu'] * 100:.1f} % of {t['peak_tflops']:g} TFLOP/s")


def check(output_dir: str, expect_busbw=None, log_text=None) -> list:
    if not os.path.isdir(output_dir):
        raise UsageError(f"{output_dir} is not a folder: run the self-check job (or train.py) into it first")
    found, _ = results.scan(output_dir)
    run = newest(found, "training")
    if run is None:
        raise UsageError(f"no completed training result in {output_dir}: the self-check reads one")
    return [each_rank_own_device(run), cores_per_rank(run), backend(run), nccl_transport(log_text, run),
            precision_ran(run), memory_estimate(run), step_clocks_cover_the_loop(run), comm_on_one_clock(run),
            busbw(newest(found, "allreduce"), expect_busbw), mfu(run)]


def main(argv=None) -> int:
    p = OneLineParser(prog="selfcheck.py", description=__doc__.splitlines()[0])
    p.add_argument("--output_dir", default="outputs/selfcheck")
    p.add_argument("--expect_busbw", type=positive_float, help="GB/s the site's interconnect should give (nccl-tests "
                   "busbw at large messages); without it busbw is only shown")
    p.add_argument("--log", help="the job's log, to read NCCL's transport from (run with NCCL_DEBUG=INFO)")
    args = p.parse_args(argv)
    log_text = None
    if args.log:
        try:
            with open(args.log, errors="replace") as fh:
                log_text = fh.read()
        except OSError as exc:
            raise UsageError(f"--log {args.log}: {exc.strerror}") from None
    verdicts = check(args.output_dir, args.expect_busbw, log_text)
    width = max(len(v.claim) for v in verdicts)
    for v in verdicts:
        print(f"{v.status:<4}  {v.claim:<{width}}  {v.figure}" + (f"  ({v.note})" if v.note else ""))
    failed = [v for v in verdicts if v.status == "FAIL"]
    print(f"self-check: {len(failed)} FAIL, {sum(v.status == 'PASS' for v in verdicts)} PASS "
          f"({args.output_dir})")
    path = os.path.join(args.output_dir, "selfcheck.json")
    results.atomic_write_bytes(path, json.dumps([v._asdict() for v in verdicts], indent=1).encode())
    return 1 if failed else 0


def cli():
    sys.exit(run_main("selfcheck.py", main))


if __name__ == "__main__":
    cli()
