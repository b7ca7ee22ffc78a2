"""Collective bandwidth, nccl-tests `*_perf` style: one job measures, checks and writes one result.

    python src/allreduce_bench.py                      # 1 process
    python src/allreduce_bench.py --devices 2          # 2 local processes (CPU: gloo)
    python src/allreduce_bench.py --format nccl-tests  # all_reduce_perf's layout (src/benchmark.py reads it back)
    srun python src/allreduce_bench.py                 # sizes from SLURM (one task per GPU)
    torchrun --nproc_per_node 4 src/allreduce_bench.py
    python src/allreduce_bench.py --devices 2 --collective all_gather   # or reduce_scatter (FSDP/ZeRO's)

Why it exists: training's step time mixes compute and communication; this isolates the second, so the report
can say what busbw a run's gradient all-reduce could have had (`busbw_at`). Definitions are nccl-tests':
algbw = S / t, busbw = algbw * 2(n-1)/n (perfmodel.network.busbw_from_algbw), 1 GB = 1e9 B. torch.distributed is
used directly (no Lightning): nothing else may run between the timed collectives. Local ranks are started by
scalelab.launch.local (`python -m scalelab.bench.allreduce` per rank); this module is the engine each rank runs,
the same for every collective: bench/collectives.py holds what differs (sizes, bus factor, buffers, call, check).
"""

import os
import signal
import sys
import threading
import time
import warnings
from datetime import timedelta

from scalelab import redaction, results
from scalelab.bench import collectives, flags, nccl_format, pattern, table
from scalelab.entry import fast_exit, run_main
from scalelab.errors import RunFailed, UsageError, error_line
from scalelab.launch import cluster, cores, slurm_env
from scalelab.launch.local import is_started_rank, rank_info, spawn_local, spawned_world
from scalelab.perfmodel.network import bandwidths, bench_summary, human_bytes
from scalelab.train.guard.signals import Terminated

PROG = flags.PROG
MODULE = "scalelab.bench.allreduce"  # how spawn_local starts each local rank: python -m MODULE
# pragma: no mutate start (launching and timing on a live process group: the slow tests run them)
def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = flags.build_parser().parse_args(argv)  # flag syntax first: fails before torch is even imported
    # Lightning's SLURM detection warns wherever srun is installed but not used: noise for a local run.
    warnings.filterwarnings("ignore", message=".*`srun` command is available.*")
    launch = cluster.detect(args.devices, args.num_nodes, args.accelerator)
    args = flags.resolve(args, launch)
    if cluster.env_rank() == 0:
        results.ensure_output_dir(args.output_dir)
    if launch.launcher == "local" and launch.world_size > 1 and not is_started_rank():
        return spawn_local(MODULE, argv, launch.world_size)
    return run(args, launch)


def spawned_rank_main(argv=None) -> int:
    """Entry of a rank that spawn_local started. The parent already ran cluster.detect and checked the flags;
    the launch is what detect would say here (external, sizes from the environment), built without
    detect's Lightning import: seconds per rank on a small machine."""
    argv = list(sys.argv[1:] if argv is None else argv)
    world = spawned_world()
    if world is None:
        return main(argv)
    args = flags.build_parser().parse_args(argv)
    launch = cluster.Launch("local", world, 1, cluster.resolve_accelerator(args.accelerator))
    return run(flags.resolve(args, launch), launch)


# --- one rank ---------------------------------------------------------------------------------------


def run(args, launch) -> int:
    """This rank's whole job: join the group, measure every size, rank 0 prints and writes the result."""
    import torch
    import torch.distributed as dist

    rank, local_rank, world, addr, port = rank_info(launch)
    if world != launch.world_size:
        raise UsageError(f"the launcher announces {world} ranks but the launch has {launch.world_size}")
    if launch.accelerator == "gpu":
        count = torch.cuda.device_count()
        device = torch.device("cuda", local_rank if count >= launch.devices else local_rank % count)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        cpu = cores.place(launch, oversubscribe=args.oversubscribe)
        torch.set_num_threads(cpu.threads)
    host = f"[{addr}]" if ":" in addr else addr  # an IPv6 address needs brackets in a URL
    dist.init_process_group(launch.backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.timeout))
    before = cores.affinity()  # given back at the end: a rank run in-process must not leave its caller pinned
    if launch.accelerator == "cpu":
        cores.pin(local_rank, cpu.threads, cpu.node_cores)  # gloo's threads, started above, keep the node
    try:
        bench = Bench(args, launch, device, rank, world)
        return bench.execute()
    finally:
        dist.destroy_process_group()
        cores.restore(before)


class Bench:
    """State of one rank's measurement; rank 0 also owns the output."""

    def __init__(self, args, launch, device, rank, world):
        import torch

        self.args, self.launch, self.device, self.rank, self.world = args, launch, device, rank, world
        self.dtype = getattr(torch, args.dtype)
        self.itemsize = torch.empty(0, dtype=self.dtype).element_size()
        self.rows, self.hosts, self.device_names, self.ranks = [], [], [], []
        self.coll = collectives.COLLECTIVES[getattr(args, "collective", "all_reduce")]
        self.nccl_tests = args.format == "nccl-tests"
        # torch has no out-of-place all-reduce (see time_size_oop); all-gather and reduce-scatter are only that
        self.out_of_place = self.nccl_tests and self.coll is collectives.ALL_REDUCE
        # named before measuring: nccl-tests' format prints its header (which names the run) first
        self.run_id = (results.new_run_id(self.coll.name.replace("_", ""), world, args.run_name,
                                          job=slurm_env.job_label()) if rank == 0 else None)

    # collectives ---------------------------------------------------------------------------------
    def _reduce(self, value: float, op) -> float:
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=op)
        return float(t.item())

    # one size ------------------------------------------------------------------------------------
    def time_single(self, inp, out, back_to_back_s: float) -> float:
        """Seconds of one collective started together on all ranks (a barrier before each), median over iters.

        DDP issues a step's few buckets this way, not back to back; on shared CPU cores the two differ
        several-fold for small messages (a 11 KB gloo all-reduce: about 0.6 ms alone, 2 ms back to back on
        2 cores), so the report's prediction reads this figure and busbw keeps nccl-tests' definition.
        Single ops are heavy-tailed (a descheduled peer costs a 4 ms tick): up to 100 of them, about half a
        second's worth, so the median is stable; the count comes from the rank-agreed back-to-back time.
        """
        import statistics

        import torch.distributed as dist

        from scalelab.train import comm

        ops = max(self.args.iters, min(100, int(0.5 / max(back_to_back_s, 1e-6))))
        times = []  # as comm.median_allreduce_s times DDP's buckets, for any collective
        for _ in range(ops):
            comm.barrier(self.device)
            comm.sync(self.device)
            t0 = time.perf_counter()
            collectives.call(self.coll, inp, out)
            comm.sync(self.device)
            times.append(time.perf_counter() - t0)
        # MIN over ranks, as the run's "alone" figure: the rank that left the barrier last waited least
        return self._reduce(statistics.median(times), dist.ReduceOp.MIN)

    def time_size(self, inp, out) -> float:
        """Seconds per collective (inp -> out): slowest rank's mean over the timed iterations."""
        import torch.distributed as dist

        from scalelab.train import comm

        for _ in range(self.args.warmup_iters):
            collectives.call(self.coll, inp, out)
        comm.sync(self.device)
        comm.barrier(self.device)
        comm.sync(self.device)
        start = time.perf_counter()
        for _ in range(self.args.iters):
            collectives.call(self.coll, inp, out)
        comm.sync(self.device)
        per_op = (time.perf_counter() - start) / self.args.iters
        return self._reduce(per_op, dist.ReduceOp.MAX)

    def time_size_oop(self, src, out) -> float:
        """Seconds per out-of-place all-reduce, measured like time_size: copy src into out, all-reduce out.

        torch.distributed has no out-of-place all-reduce: all_reduce(t) always writes its sum over t. nccl-tests'
        out-of-place reads sendbuff and writes recvbuff in the one kernel. The nearest torch comes is a copy
        then an in-place all-reduce: the input survives, as out-of-place promises, but the time includes one
        local copy of the message (on a GPU S / memory bandwidth, small beside the link; on CPU, gloo over
        loopback, comparable to the transfer). So this column is in-place plus a copy, not NCCL's out-of-place
        kernel; the report reads the in-place column, which is what DDP does to its buckets.
        """
        import torch.distributed as dist

        from scalelab.train import comm

        for _ in range(self.args.warmup_iters):
            out.copy_(src)
            dist.all_reduce(out)
        comm.sync(self.device)
        comm.barrier(self.device)
        comm.sync(self.device)
        start = time.perf_counter()
        for _ in range(self.args.iters):
            out.copy_(src)
            dist.all_reduce(out)
        comm.sync(self.device)
        per_op = (time.perf_counter() - start) / self.args.iters
        return self._reduce(per_op, dist.ReduceOp.MAX)

    def check_size(self, inp, out, count: int) -> int:
        """Wrong elements after one collective of a known pattern (collectives.fill_pattern), summed over ranks
        (each rank checks its own result)."""
        import torch.distributed as dist

        collectives.fill_pattern(self.coll, inp, self.world, self.rank)
        if self.args.inject_wrong and self.rank == self.world - 1:
            inp[0] += 1  # the hidden test hook: one wrong contribution
        collectives.call(self.coll, inp, out)
        wrong = collectives.check_wrong(self.coll, inp, out, self.world, self.rank, count)
        return int(self._reduce(wrong, dist.ReduceOp.SUM))

    def check_size_oop(self, buf, out) -> int:
        """The all-reduce's out-of-place check: the sum lands in out, and buf, the input, must come back
        unchanged (nccl-tests' out-of-place contract), so a changed input counts as wrong too."""
        import torch.distributed as dist

        expected, mine = pattern.contributions(self.world, self.rank, self.device, self.dtype)
        pattern.tile_into(buf, mine)
        if self.args.inject_wrong and self.rank == self.world - 1:
            buf[0] += 1  # the hidden test hook: one wrong contribution
        out.copy_(buf)
        dist.all_reduce(out)
        wrong = pattern.count_mismatches(out, expected) + pattern.count_mismatches(buf, mine)
        if self.args.inject_wrong and self.rank == self.world - 1:
            wrong -= 1  # the injected element is this rank's input as it was given: not a changed input
        return int(self._reduce(wrong, dist.ReduceOp.SUM))

    def measure(self):
        import torch

        name = self.coll.name
        for nbytes, count in self.coll.sizes(self.args.min_bytes, self.args.max_bytes, self.args.factor,
                                             self.itemsize, self.world):
            # Zeros: the contents do not change the speed of a sum, and zeros never overflow over repeated
            # in-place reductions (float16 would reach inf within a few rounds at large n).
            buf, res = collectives.buffers(self.coll, count, self.world, self.dtype, self.device)
            row = {"bytes": nbytes, "count": count, "dtype": self.args.dtype}
            if self.out_of_place:  # first, as nccl-tests runs it
                out = torch.zeros_like(buf)
                t = self.time_size_oop(buf, out)
                row["oop_time_s"] = t
                row["oop_algbw_GBps"], row["oop_busbw_GBps"] = bandwidths(nbytes, t, self.world, name)
                row["oop_wrong"] = self.check_size_oop(buf, out) if self.args.check else None
                del out
                buf.zero_()
            t = self.time_size(buf, res)
            single = self.time_single(buf, res, t)
            wrong = self.check_size(buf, res, count) if self.args.check else None
            del buf, res
            algbw, busbw = bandwidths(nbytes, t, self.world, name)
            row.update(time_s=t, algbw_GBps=algbw, busbw_GBps=busbw, single_op_s=single, wrong=wrong)
            self.rows.append(row)
            if self.rank == 0 and self.nccl_tests:
                print(nccl_format.row_line(row, self.coll.redop), flush=True)

    # the job -------------------------------------------------------------------------------------
    def execute(self) -> int:
        import torch.distributed as dist

        from scalelab.train import comm

        where = [None] * self.world
        dist.all_gather_object(where, self.rank_line())
        self.ranks = where
        self.hosts = sorted({r["host"] for r in where})
        self.device_names = sorted({r["name"] for r in where})
        if self.rank == 0:
            print(self.nccl_tests_header() if self.nccl_tests else self.banner(), flush=True)
        previous = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is \
            threading.main_thread() else None
        try:
            self.measure()
        except (Exception, Terminated) as exc:  # noqa: BLE001 - a peer died, a timeout, out of memory, SIGTERM
            status, line = ("timeout", f"received {exc.name} (the launcher ended, a time limit or scancel) after "
                            f"{len(self.rows)} size(s)") if isinstance(exc, Terminated) else ("failed", error_line(exc))
            ended = "failed" if status == "failed" else f"ended with status {status}"
            if self.rank == 0:
                path = self.write(status, line)
                raise RunFailed(f"{self.what()} {ended}: {line} (partial result: {path})") from None
            raise RunFailed(f"rank {self.rank}: {self.what()} {ended}: {line}") from None
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        error = self.correctness_error()
        if self.rank == 0 and self.nccl_tests:
            print(nccl_format.footer(self.rows, self.program()), flush=True)
            path = self.write("failed" if error else "completed", error)
            print(f"# -> {path}", flush=True)
        elif self.rank == 0:
            print(table.table(self.rows), flush=True)
            print(table.avg_line(self.rows), flush=True)
            path = self.write("failed" if error else "completed", error)
            print(f"-> {path}", flush=True)
        # the other ranks end after rank 0 wrote the result: a launcher may stop them all then
        comm.barrier(self.device)
        if error:
            if self.rank == 0:
                raise RunFailed(error)
            return 1  # rank 0 says why; the others stay quiet
        return 0

    def rank_line(self) -> dict:
        """What nccl-tests' `#  Rank` line says about this rank."""
        bus = "0x00"
        if self.device.type == "cuda":
            import torch

            props = torch.cuda.get_device_properties(self.device)
            bus = (f"{getattr(props, 'pci_domain_id', 0):04x}:{getattr(props, 'pci_bus_id', 0):02x}:"
                   f"{getattr(props, 'pci_device_id', 0):02x}")
        return {"rank": self.rank, "pid": os.getpid(), "host": cluster.hostname(),
                "device": self.device.index or 0, "bus": bus,
                "name": cluster.device_name(self.launch.accelerator, self.device)}

    # pragma: no mutate end
    def correctness_error(self):
        bad = [r for r in self.rows if r["wrong"] or r.get("oop_wrong")]
        if not bad:
            return None
        more = f" (and at {len(bad) - 1} more size(s))" if len(bad) > 1 else ""
        wrong = bad[0]["wrong"] or bad[0].get("oop_wrong")
        return f"{self.what()} returned {wrong} wrong values at size {human_bytes(bad[0]['bytes'])}{more}"

    # output (rank 0) -----------------------------------------------------------------------------
    def what(self) -> str:
        """The collective as people write it: all-reduce, all-gather, reduce-scatter."""
        return self.coll.name.replace("_", "-")

    def program(self) -> str:
        """The program an nccl-tests-format log names: this script for the all-reduce (as before --collective),
        else the nccl-tests binary whose layout it prints, so that no reader takes it for an all-reduce log."""
        coll = self.coll
        return PROG if coll is collectives.ALL_REDUCE else coll.perf

    def banner(self) -> str:
        a, launch = self.args, self.launch
        return (f"scalelab {self.what()}: world size {self.world} = {launch.num_nodes} node(s) x {launch.devices} "
                f"process(es), backend {launch.backend}, device {', '.join(self.device_names)} | {a.dtype}, "
                f"{human_bytes(a.min_bytes)} to {human_bytes(a.max_bytes)} x{a.factor}, {a.iters} timed + "
                f"{a.warmup_iters} warm-up {self.what()}s per size, check {'on' if a.check else 'off'} | "
                f"launcher: {launch.launcher}")

    def nccl_tests_header(self) -> str:
        """all_reduce_perf's header; the banner as a comment, so the whole output parses back."""
        a = self.args
        params = {"min_bytes": a.min_bytes, "max_bytes": a.max_bytes, "factor": a.factor,
                  "warmup_iters": a.warmup_iters, "iters": a.iters, "check": a.check}
        run = (self.run_id, self.launch.accelerator, self.launch.backend)
        return f"# {self.banner()}\n" + nccl_format.header(self.ranks, params, self.program(), run)

    def write(self, status: str, error) -> str:
        launch = self.launch
        config = {k: v for k, v in vars(self.args).items() if k != "inject_wrong" or v}
        config["collective"] = self.coll.name  # what the report tells apart: only all_reduce predicts DDP
        payload = results.envelope("allreduce", self.run_id)
        payload.update(
            status=status,
            error=error,
            run_name=self.args.run_name,
            launch=launch.record(self.device_names, self.hosts, backend=launch.backend),  # a group even at 1 rank
            config=config,
            rows=self.rows,
            summary=bench_summary(self.rows),
            versions=results.versions(),
            slurm=slurm_env.job_record(),
            environment=redaction.capture_environment(),
        )
        return results.write(self.args.output_dir, payload)


def _terminated(signum, frame):
    """SIGTERM (its launcher died: PR_SET_PDEATHSIG, launch/local.py; scancel; a time limit): the sizes measured so
    far are recorded, status timeout."""
    raise Terminated(signal.Signals(signum).name)


def cli():
    """Console-script entry point (see setup.cfg), and `python -m scalelab.bench`."""
    fast_exit(run_main(PROG, main))  # pragma: no mutate (the console-script entry)


if __name__ == "__main__":  # how spawn_local starts each local rank (python -m MODULE)
    fast_exit(run_main(PROG, spawned_rank_main))
