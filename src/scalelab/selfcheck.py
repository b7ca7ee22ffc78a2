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

from scalelab import files, fingerprint, results
from scalelab.bench.collectives import collective_of
from scalelab.config import LEVER_DEFAULTS
from scalelab.entry import GBPS, OneLineParser, run_main
from scalelab.errors import UsageError
from scalelab.launch import cores
from scalelab.selfcheck_devices import device_sampler
from scalelab.selfcheck_nccl import nccl_algorithm

CLOCK_TOLERANCE = 0.05  # timed steps may cover the training loop to within 5 %
BUSBW_FRACTION = 0.8  # an interconnect delivering under 80 % of what the site expects fails


class Verdict(NamedTuple):
    claim: str
    status: str  # PASS, FAIL, SKIP or INFO
    figure: str  # what was measured
    note: str = ""


def newest(found: list, kind: str) -> Optional[dict]:
    """The newest completed result of a kind; of the benchmark's, only an all-reduce (the busbw claim's)."""
    done = [r for r in found if r.get("kind") == kind and r.get("status") == "completed"
            and (kind != "allreduce" or collective_of(r) == "all_reduce")]
    return max(done, key=lambda r: r.get("created") or "") if done else None


def each_rank_own_device(run) -> Verdict:
    """Each rank's GPU by its UUID (one per physical GPU): "cuda:0" names a slot, the same on every node and the
    only one a rank sees under CUDA_VISIBLE_DEVICES binding, so two ranks on one GPU can both say "cuda:0"."""
    ranks, gpu = run["ranks"], run["launch"]["accelerator"] == "gpu"
    if not gpu:
        return Verdict("each rank on its own GPU", "SKIP", "CPU run", "no GPUs in this run")
    if not all(r.get("gpu_uuid") for r in ranks):
        return Verdict("each rank on its own GPU", "SKIP", "no GPU UUID recorded",
                       "a result from an older scalelab, or a torch that does not report the GPU's UUID")
    holders = {}
    for r in ranks:
        holders.setdefault(r["gpu_uuid"], []).append(r["rank"])
    shared = {u: rs for u, rs in holders.items() if len(rs) > 1}
    figure = f"{len(ranks)} rank(s) on {len(holders)} GPU(s)"
    if not shared:
        return Verdict("each rank on its own GPU", "PASS", figure)
    said = "; ".join(f"ranks {', '.join(map(str, rs))} on {u}" for u, rs in sorted(shared.items()))
    return Verdict("each rank on its own GPU", "FAIL", f"{figure}: {said}",
                   "ranks shared a GPU: check --gres, --ntasks-per-node and CUDA_VISIBLE_DEVICES")


def cores_per_rank(run) -> Verdict:
    """PASS where each rank had cores of its own; FAIL where ranks were oversubscribed; INFO where GPU ranks shared
    their cores without being short of them (scalelab's pinning off, or a launcher that binds nothing): their
    compute is on the GPU, so that is no contention, but neither is it a core of their own."""
    ranks = run["ranks"]
    if not all(r.get("cpu_affinity") for r in ranks):
        return Verdict("cores per rank", "SKIP", "not recorded", "a result from an older scalelab")
    fewest = min(len(r["cpu_affinity"]) for r in ranks)
    threads = max(r.get("threads") or 1 for r in ranks)
    figure = f"≥ {fewest} core(s), {threads} thread(s)"
    problem = run["launch"].get("oversubscribed")
    if problem:
        return Verdict("cores per rank", "FAIL", figure, problem)
    far = [r for r in ranks if r.get("near_gpu") is False]  # the launcher bound them off their GPU's NUMA node
    if far:
        r, many = far[0], f" ({len(far)} ranks off their GPU's node)" if len(far) > 1 else ""
        return Verdict("cores per rank", "FAIL", f"{figure}; rank {r['rank']} on cores {cores.span(r['cpu_affinity'])}"
                       f", its GPU on NUMA node {r.get('numa_node')}{many}",
                       "the launcher bound ranks across the socket link from their GPUs: srun --cpu-bind=cores "
                       "--distribution=block:block deals them their cores in order (docs/05)")
    shared = cores.sharing(ranks)
    if shared:
        off = any(r.get("cpu_pin") == "off" for r in ranks)
        return Verdict("cores per rank", "INFO", f"{figure}; shared, not pinned: {shared}",
                       f"{cores.ENV_NO_GPU_PIN}=1 left the ranks unpinned" if off else
                       "no rank was pinned to cores near its GPU (docs/05)")
    return Verdict("cores per rank", "PASS", figure)


def backend_for(name: Optional[str], device: str) -> Optional[str]:
    """The backend a process group runs for tensors on `device` ("cuda:1", "cpu"), from dist.get_backend():
    "nccl", or per device type "cpu:gloo,cuda:nccl"."""
    if not name or ":" not in name:
        return name
    per_type = dict(part.split(":", 1) for part in name.split(",") if ":" in part)
    return per_type.get(device.split(":")[0])


def backend(run) -> Verdict:
    """Each rank's backend as torch.distributed ran it, against the device the rank's tensors were on: NCCL for
    CUDA tensors, gloo for CPU ones. (The backend the launch asked for is derived from the accelerator: comparing
    the two would pass by construction.)"""
    launch, ranks = run["launch"], run["ranks"]
    if launch["world_size"] == 1:
        return Verdict("process group backend", "SKIP", "1 rank", "no communication in a 1-device run")
    if not all("backend" in r for r in ranks):
        return Verdict("process group backend", "SKIP", "not recorded", "a result from an older scalelab")
    wrong = []
    for r in ranks:
        want = "nccl" if str(r.get("device", "")).startswith("cuda") else "gloo"  # AMD: RCCL, named nccl
        got = backend_for(r["backend"], str(r.get("device", "cpu")))
        if got != want:
            wrong.append(f"rank {r['rank']}: {got} on {r.get('device')}")
    used = sorted({str(r["backend"]) for r in ranks})
    if wrong:
        return Verdict("process group backend", "FAIL", "; ".join(wrong[:4]) + (" ..." if len(wrong) > 4 else ""),
                       "CUDA tensors need nccl, CPU tensors gloo: check --accelerator and the torch build")
    return Verdict("process group backend", "PASS", ", ".join(used) + f" on {len(ranks)} ranks")


FABRICS = {"IB": "NET/IB", "AWS Libfabric": "NET/OFI", "Libfabric": "NET/OFI", "OFI": "NET/OFI"}


def transport_in_log(log_text: str) -> tuple:
    """(verdict, figure) for NCCL's inter-node network in a NCCL_DEBUG=INFO log: ("fabric", "NET/IB"),
    ("fabric", "NET/OFI (provider cxi)") for libfabric (Slingshot, EFA) through the OFI plugin, ("socket",
    "NET/Socket") or (None, "not found in the log").

    The network NCCL chose is named by "Using network <name>" and by each channel's "via NET/<name>/..."; plugin
    and init lines ("NET/OFI Selected Provider is efa", "NET/IB : Using [0]mlx5_0:1/IB") only say what loaded."""
    chosen = set(re.findall(r"Using network ([A-Za-z][\w ]*?)\s*$", log_text, re.M))
    chosen |= set(re.findall(r"via NET/([A-Za-z][\w ]*?)/", log_text))
    provider = re.search(r"NET/OFI Selected Provider is (\w+)", log_text)
    ofi = "NET/OFI" + (f" (provider {provider.group(1)})" if provider else "")
    if not chosen:  # an older NCCL, or a log cut short: what was initialised
        chosen = {name for name, mark in (("Socket", "NET/Socket"), ("IB", "NET/IB"), ("OFI", "NET/OFI"))
                  if mark in log_text}
        if "Socket" in chosen and len(chosen) > 1:
            chosen.discard("Socket")  # NCCL falls back to sockets only when no fabric came up
    if "Socket" in chosen:
        return "socket", "NET/Socket"
    fabrics = sorted({FABRICS[name] for name in chosen if name in FABRICS})
    if fabrics:
        return "fabric", ", ".join(ofi if f == "NET/OFI" else f for f in fabrics)
    return None, "not found in the log"


def nccl_transport(log_text: Optional[str], run) -> Verdict:
    if run["launch"]["accelerator"] != "gpu":
        return Verdict("NCCL transport between nodes", "SKIP", "CPU run", "gloo over TCP")
    if not log_text:
        return Verdict("NCCL transport between nodes", "SKIP", "no log", "give --log with NCCL_DEBUG=INFO output")
    if run["launch"]["num_nodes"] == 1:
        return Verdict("NCCL transport between nodes", "SKIP", "1 node", "no inter-node traffic")
    kind, figure = transport_in_log(log_text)
    if kind == "fabric":
        return Verdict("NCCL transport between nodes", "PASS", figure)
    return Verdict("NCCL transport between nodes", "FAIL", figure,
                   "NCCL uses TCP sockets between nodes: check NCCL_IB_HCA / NCCL_SOCKET_IFNAME, or the OFI plugin "
                   "on Slingshot/EFA (chapter 8)")


MATMUL_DTYPE = {"bf16-mixed": "bfloat16", "16-mixed": "float16", "32": "float32"}  # what each precision's matmuls give


def precision_ran(runs: list) -> Verdict:
    """The matmul dtype each run's step produced (observed, scalelab/fingerprint.py) against its --precision, at
    every world size the folder holds (1 GPU and N), and a finite final loss."""
    said, bad = [], []
    for run in runs:
        precision, fp = run["workload"].get("precision"), run.get("fingerprint") or {}
        want, got = MATMUL_DTYPE.get(precision), fp.get("matmul_dtypes")
        where = _devices(run)
        loss = (run.get("metrics") or {}).get("train_loss")
        if got is None:
            bad.append(f"{where}: nothing observed (a result from an older scalelab)")
        elif got != [want]:
            bad.append(f"{where}: {'+'.join(got) or 'no'} matmuls under {precision}")
        if loss is None or not math.isfinite(loss):
            bad.append(f"{where}: the final loss is {loss}")
        said.append(f"{where}: {'+'.join(got or ['?'])} matmuls ({precision})")
    if bad:
        return Verdict("precision as asked", "FAIL", "; ".join(bad),
                       "each run's step must run in its --precision, the baseline's too (docs/08)")
    return Verdict("precision as asked", "PASS", "; ".join(said))


def same_job(single, multi) -> Verdict:
    """The 1-device run against the N-device run of the same workload: every speedup the sweep prints divides one
    by the other, so they must have run the same step (fingerprint.differences)."""
    claim = "same job at 1 and N devices"
    if multi is None or multi["launch"]["world_size"] == 1:
        return Verdict(claim, "FAIL", "no multi-device run", "the check compares a 1-device run with an N-device one")
    if single is None:
        return Verdict(claim, "FAIL", f"no 1-device run of this workload beside the {_devices(multi)} one",
                       "gpu_selfcheck.sh runs both: the baseline every speedup divides by")
    a, b = single.get("fingerprint"), multi.get("fingerprint")
    if not a or not b:
        return Verdict(claim, "FAIL", "not recorded", "a result from an older scalelab: run the check again")
    diff = fingerprint.differences(a, b) + [f"{_devices(r)}: {said}" for r in (single, multi)
                                             for said in fingerprint.asked_differences(r.get("fingerprint"),
                                                                                       r["workload"].get("compile"))]
    if diff or not (a.get("same_on_ranks") and b.get("same_on_ranks")):
        said = "; ".join(diff) or "the ranks of one run saw different steps"
        return Verdict(claim, "FAIL", f"{_devices(multi)} against 1: {said}",
                       "not the same job: no speedup between them measures scaling (docs/08)")
    return Verdict(claim, "PASS", f"1 and {_devices(multi)}: {'+'.join(a['matmul_dtypes'])} matmuls, "
                   f"{a.get('optimizer')} optimizer, attention {'+'.join(a.get('attention') or []) or 'none'}")


def _devices(run) -> str:
    n = run["launch"]["world_size"]
    return f"{n} {'GPU' if run['launch'].get('accelerator') == 'gpu' else 'device'}{'s' if n > 1 else ''}"


def step_clocks_cover_the_loop(run) -> Verdict:
    """The timed steps (device-synchronised marks, chained end to end) against the loop's interval on the host
    clock, read after a device sync at each end (loop_wall_s): independent clocks, so a step clock that misses
    work (a mark read before the device finished it) shows as steps summing to less than the loop took.
    Each rank; the worst is shown."""
    timed = [(r["rank"], sum(r["step_times_s"]), r.get("loop_wall_s")) for r in run["ranks"]]
    if not all(wall for _, _, wall in timed):
        return Verdict("step clocks cover the loop", "SKIP", "no loop interval recorded",
                       "a result from an older scalelab, or a run that did not finish its loop")
    rank, steps, wall = max(timed, key=lambda t: abs(t[2] - t[1]) / t[2])
    gap = abs(wall - steps) / wall
    ok = gap <= CLOCK_TOLERANCE
    return Verdict("step clocks cover the loop", "PASS" if ok else "FAIL",
                   f"rank {rank}: steps {steps:.2f} s of {wall:.2f} s on the host clock ({gap * 100:.1f} % apart)",
                   "" if ok else "step timing misses part of the loop (a clock read without a device sync?)")


def comm_on_one_clock(run) -> Verdict:
    """The all-reduce's busy time of a step can never exceed the step: if it does, intervals mix clocks."""
    worst = 0.0
    for r in run["ranks"]:
        for busy, step in zip(r.get("allreduce_times_s") or [], r["step_times_s"]):
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


def memory_estimate(runs: list) -> Verdict:
    """perfmodel.memory's estimate (what train.py's check and predict.py use) against the peak the GPU measured, for
    each run: the 1-GPU one holds no DDP buckets, the N-GPU one does (and more with --accumulate_grad_batches)."""
    verdicts = [_memory_of(run) for run in runs]
    shown = [v for v in verdicts if v.status != "SKIP"] or verdicts[:1]
    status = "FAIL" if any(v.status == "FAIL" for v in shown) else shown[0].status
    return Verdict("memory estimate vs peak", status, "; ".join(v.figure for v in shown),
                   next((v.note for v in shown if v.status == status and v.note), ""))


def _memory_of(run) -> Verdict:
    m = run.get("memory") or {}
    est, peak = m.get("estimate_bytes"), m.get("peak_allocated_bytes")
    if run["launch"]["accelerator"] != "gpu":
        return Verdict("memory estimate vs peak", "SKIP", "CPU run", "torch measures GPU memory only")
    if not est or not peak:
        return Verdict("memory estimate vs peak", "SKIP", "no estimate" if not est else "no peak recorded",
                       "its workload declares no memory estimate (the GPT does)" if not est else "an older scalelab")
    off = est / peak - 1
    ok = abs(off) <= MEMORY_TOLERANCE
    return Verdict("memory estimate vs peak", "PASS" if ok else "FAIL",
                   f"{_devices(run)}: estimate {est / 1e9:.2f} GB, peak {peak / 1e9:.2f} GB allocated "
                   f"({off * 100:+.0f} %)",
                   "" if ok else f"more than {MEMORY_TOLERANCE:.0%} apart: the memory check before fit would misjudge")


PROBE_BYTES = 256 * 2**20  # written to the output folder, fsync'd, removed: the filesystem's rate for the claim


def write_rate(folder: str, nbytes: int = PROBE_BYTES) -> float:
    """Bytes a second this folder's filesystem takes to disk (written in 8 MiB blocks, then fsync), where the
    requeue checkpoint goes (outputs/checkpoints/...); the probe file is removed."""
    import time

    block = os.urandom(8 * 2**20)
    path = os.path.join(folder, f".write-probe-{os.getpid()}")
    started = time.perf_counter()
    try:
        with open(path, "wb") as fh:
            for _ in range(max(1, nbytes // len(block))):
                fh.write(block)
            fh.flush()
            os.fsync(fh.fileno())
        return max(1, nbytes // len(block)) * len(block) / (time.perf_counter() - started)
    finally:
        if os.path.exists(path):
            os.remove(path)


def requeue_checkpoint(run, rate_Bps) -> Verdict:
    """The requeue checkpoint of this run's model, saved at the filesystem's measured rate, against what SIGUSR1's
    lead leaves for it (requeue.SAVE_BUDGET_S of LEAD_S): an xl checkpoint is 15.8 GB."""
    from scalelab.train.guard import requeue

    claim = "requeue checkpoint in SIGUSR1's lead"
    if isinstance(rate_Bps, str):  # the probe could not write: neither could the checkpoint
        return Verdict(claim, "FAIL", f"cannot write to the output folder ({rate_Bps})", "no requeue could save")
    params = run["workload"].get("params")
    if not params:
        return Verdict(claim, "SKIP", "model size not recorded", "an older scalelab")
    size = requeue.checkpoint_bytes(params, run["workload"].get("trainable_params"))
    took = size / rate_Bps
    figure = (f"{size / 1e9:.3g} GB at {rate_Bps / 1e9:.2g} GB/s: {took:.1f} s of the {requeue.SAVE_BUDGET_S} s "
              f"a {requeue.LEAD_S} s lead leaves")
    ok = took <= requeue.SAVE_BUDGET_S
    return Verdict(claim, "PASS" if ok else "FAIL", figure, "" if ok else
                   "a save cut short by the time limit loses the requeue: a faster filesystem for --output_dir, or "
                   "a longer lead (#SBATCH --signal=SIGUSR1@N)")


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
    run = newest([r for r in found if r.get("launch", {}).get("world_size", 1) > 1], "training") or run
    single = newest([r for r in found if r.get("launch", {}).get("world_size") == 1 and r is not run
                     and results.group_key(r, LEVER_DEFAULTS) == results.group_key(run, LEVER_DEFAULTS)], "training")
    both = [r for r in (single, run) if r is not None]
    try:
        rate = write_rate(output_dir)
    except OSError as exc:
        rate = exc.strerror or str(exc)
    return [each_rank_own_device(run), cores_per_rank(run), backend(run), nccl_transport(log_text, run),
            precision_ran(both), same_job(single, run), memory_estimate(both), step_clocks_cover_the_loop(run),
            comm_on_one_clock(run), busbw(newest(found, "allreduce"), expect_busbw),
            Verdict(*nccl_algorithm(log_text, run, newest(found, "allreduce"))), requeue_checkpoint(run, rate),
            mfu(run), Verdict(*device_sampler(run))]


def main(argv=None) -> int:
    p = OneLineParser(prog="selfcheck.py", description=__doc__.splitlines()[0])
    p.add_argument("--output_dir", default="outputs/selfcheck")
    p.add_argument("--expect_busbw", type=GBPS, help="GB/s the site's interconnect should give (nccl-tests "
                   "busbw at large messages); without it busbw is only shown")
    p.add_argument("--log", help="the job's log, to read NCCL's transport from (run with NCCL_DEBUG=INFO)")
    args = p.parse_args(argv)
    log_text = None
    if args.log:
        try:
            log_text = files.read_text(args.log, "log")
        except results.ResultError as exc:
            raise UsageError(f"--log {args.log}: {exc}") from None
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
