"""Train and time one run, then write its result: configure -> launch -> the loop -> result.json -> teardown.

Reads top to bottom. The same code runs as a single process, as N local CPU processes (Fabric re-runs this
script for ranks 1..N-1), under srun, torchrun or submitit. The loop itself is train/loop.py.
"""

import logging
import os
import sys
from datetime import timedelta

from scalelab import config, results
from scalelab.entry import fast_exit, human_count, run_main
from scalelab.errors import RunFailed, UsageError, error_line
from scalelab.launch import cluster, cores, slurm_env
from scalelab.measure import cpushare
from scalelab.train import loggers


def main(argv=None, process_start=None) -> int:
    process_start = process_start or cluster.process_start_time()
    cfg = config.parse_config(argv)
    if argv is None:  # Fabric starts the other local ranks with sys.argv: a --comet_api_key reaches them in the env
        sys.argv[1:] = loggers.without_key(sys.argv[1:])
    launch = cluster.detect(cfg.devices, cfg.num_nodes, cfg.accelerator)
    if launch.accelerator == "gpu":
        nccl_errors_reach_python()
    cfg = config.for_accelerator(cfg, launch.accelerator)
    batch = cfg.batch_per_device(launch.world_size)
    preflight(cfg, launch, batch)
    # cores.py: on CPU one device = --threads cores (default 1), pinned; before torch starts its thread pool
    device = cores.place(launch, cfg.threads, cfg.oversubscribe)
    if device.threads:  # the ranks Fabric launches inherit it (else Fabric sets cores // local ranks)
        os.environ["OMP_NUM_THREADS"] = str(device.threads)

    import torch
    from lightning.fabric import Fabric

    if not cfg.verbose:  # Lightning sets these to INFO on import ("Initializing distributed: ..." once per rank)
        for name in ("lightning", "lightning.fabric", "lightning.pytorch"):
            logging.getLogger(name).setLevel(logging.WARNING)
    from scalelab.testing import faults
    from scalelab.train import requeue
    from scalelab.train.clock import StepClock
    from scalelab.train.record import RunContext
    from scalelab.train.watch import RankWatch

    if device.threads:
        torch.set_num_threads(device.threads)
    fabric = Fabric(accelerator=launch.accelerator, devices=launch.devices, num_nodes=launch.num_nodes,
                    strategy=strategy(cfg, launch), precision=cfg.precision)
    ctx = RunContext(cfg, launch, batch, process_start, StepClock(fabric.device, launch.world_size, process_start,
                                                                  cfg.comm_hook),
                     rank=cluster.env_rank(), core_warning=device.warning)
    # signals: acted on from here on (SIGUSR1, SLURM's time-limit warning, noted since train.py began)
    watch = RankWatch(cfg.timeout, requeue_on_sigusr1=launch.launcher == "slurm", no_requeue=requeue.refusal())
    metrics = stall = None
    try:  # from here on every way the run ends is recorded (failed), or refused in one line (UsageError)
        injected = faults.from_env()  # a test hook, [] in a real run
        build_workload(fabric, ctx)
        metrics = step_metrics(ctx, run_logger(ctx))
        stall = stall_deadline(ctx, watch, injected)
        # armed before the ranks meet: a bootstrap that hangs in C (NCCL with a wrong NCCL_SOCKET_IFNAME, a peer
        # that never joins) runs no Python handler, and SLURM's SIGKILL would follow its SIGTERM with no record
        stall.arm()
        stop, val, per_rank = train(fabric, ctx, device, watch, injected, metrics, stall)
        path = finish(fabric, ctx, metrics, stop, val, per_rank)  # rank 0 writes result.json; the ranks meet
        stall.disarm()
    except UsageError:
        raise
    except BaseException as exc:  # noqa: BLE001 - record every way a run can end, then re-raise as one line
        if stall:
            stall.disarm()  # the main thread records it: the deadline's thread must not write a second record
        raise failed(ctx, watch, metrics, exc) from None
    faults.at_teardown(injected)  # (a test hook: the record must already be on disk here)
    watch.wait_children()  # teardown: the launched ranks end; nothing is copied off the device
    if stop and ctx.rank == 0:  # the ranks stopped together: rank 0 says why, once, for all of them
        raise RunFailed(f"run ended with status {stop.status()}: {stop.line()} (partial result: {path})")
    return 1 if stop else 0


NCCL_ERROR_HANDLING = "2"  # torch's CleanUpOnly: abort the communicators on an error, raise, do not kill the process


def nccl_errors_reach_python(environ=None) -> None:
    """TORCH_NCCL_ASYNC_ERROR_HANDLING=2 unless the user chose a value (set before any process group forms; the
    ranks Fabric launches inherit it).

    What torch's NCCL watchdog does when a collective fails or passes --timeout (ProcessGroupNCCL.hpp's
    ErrorHandlingMode): 0 nothing (the main thread stays blocked in its device sync for good); 1 abort the
    communicators and rethrow in the watchdog thread, which ends the process (SIGABRT); 3, torch's default, the
    same without the abort. Either way Python never runs again and no record is written. 2 aborts the
    communicators only: the pending NCCL kernels return, so the blocked device sync returns, and the next NCCL
    call raises in Python, where failure.py records the run and names the rank. docs/08."""
    environ = os.environ if environ is None else environ
    environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", NCCL_ERROR_HANDLING)


def build_workload(fabric, ctx):
    """The model and data, seeded alike on every rank, and what can be refused about them before launch."""
    from scalelab import workloads

    cfg, launch, batch = ctx.cfg, ctx.launch, ctx.batch
    fabric.seed_everything(cfg.seed, verbose=False)
    ctx.workload = workloads.build(cfg, batch, launch.world_size)
    per_rank = -(-len(ctx.workload.train_set) // launch.world_size)  # DistributedSampler: ceil(N / ranks)
    if per_rank < batch:
        raise UsageError(f"{len(ctx.workload.train_set)} training samples give each of the {launch.world_size} "
                         f"rank(s) {per_rank}, less than one batch of {batch}: raise --num_samples or lower "
                         "--batch_size")
    check_powersgd(cfg, launch, ctx.workload.module)


def train(fabric, ctx, device, watch, injected, metrics, stall):
    """Launch, set up, run the loop and validation, gather every rank's figures: (stop, val, per_rank)."""
    from scalelab.testing import faults
    from scalelab.train import loop, peers, record, requeue
    from scalelab.train.clock import gather
    from scalelab.train.observe import StepObserver
    from scalelab.workloads import data

    cfg, wl, clock = ctx.cfg, ctx.workload, ctx.clock
    if ctx.rank == 0:
        print(banner(cfg, ctx.launch, wl, ctx.batch, device), flush=True)
        if device.warning:
            print(f"train.py: warning: {device.warning}; the result and the report say so", file=sys.stderr,
                  flush=True)
    fabric.launch()  # rank 0 starts the other local ranks here (they re-run this script); the process group forms
    ctx.rank, ctx.local_rank, ctx.node_rank = fabric.global_rank, fabric.local_rank, fabric.node_rank
    watch.joined(fabric.world_size, fabric.global_rank)
    if fabric.world_size > 1:  # a survivor records into rank 0's folder should rank 0 be lost (failure.py)
        ctx.run_id, ctx.folder = peers.share_run(ctx.rank, ctx.run_id, ctx.folder)
        watch.run_folder = ctx.folder
    if ctx.launch.accelerator == "gpu":  # near its GPU, where the launcher did not bind it: cores.pin_gpu
        ctx.unpinned = cores.affinity()
        ctx.pinning = pin_near_gpu(fabric.local_rank, ctx.launch.devices, device.threads)
    elif device.threads:  # the transport's threads (started with the group) keep the node's cores: cores.pin says why
        ctx.unpinned = cores.affinity()
        cores.pin(fabric.local_rank, device.threads, device.node_cores)
    model = fabric.setup_module(wl.module)  # to the device, precision applied, inside DDP when there are ranks
    optimizer = fabric.setup_optimizers(wl.module.configure_optimizers())
    clock.attach(model)  # DDP's all-reduce through a timing comm hook
    pinned = ctx.launch.accelerator == "gpu"  # page-locked batches: the copy to the GPU does not wait
    loader = data.train_loader(wl.train_set, ctx.batch, fabric.global_rank, fabric.world_size, cfg.seed,
                               cfg.num_workers, pin_memory=pinned)
    plan = loop.Plan(cfg.max_steps, cfg.max_epochs, cfg.accumulate_grad_batches, cfg.warmup_steps,
                     cfg.comm_probe_every)
    checkpoint = requeue.checkpoint_path(cfg.output_dir)
    with stall.held():  # loading 20 GB of checkpoint is no stall
        resumed = requeue.resume(fabric, model, optimizer, plan, checkpoint)
    if resumed:
        ctx.resumed_from = checkpoint
        if ctx.rank == 0:
            print(f"scalelab: resumed from {checkpoint} at step {plan.step} (a requeued job)", flush=True)
    if metrics:
        metrics.log_hyperparams(record.hyperparameters(ctx))
    # what the step ran, observed in the last warm-up step (never timed): the result's fingerprint
    ctx.seen = StepObserver(at=plan.step + max(plan.warmup_steps - 1, 0))
    stop = loop.train(fabric, model, optimizer, faults.wrap_loader(loader, injected, plan.accumulate), plan, clock,
                      watch.signals, metrics, ctx.seen)
    clock.loop_end()  # the host's interval around the loop: the self-check's independent clock
    if stop and stop.requeue:
        with stall.held():  # a save is no step: 16 GB and more for xl
            stop.saved = requeue.save(fabric, model, optimizer, plan, checkpoint)
    val = {}
    if wl.val_set is not None and not stop:
        val = loop.validate(fabric, model, data.eval_loader(wl.val_set, ctx.batch, fabric.global_rank,
                                                            fabric.world_size, cfg.num_workers, pin_memory=pinned))
    per_rank = gather(ctx.rank_record())
    stall.disarm()
    return stop, val, per_rank


def gpu_addresses(count: int) -> list:
    """The PCI addresses of cuda:0..count-1 as sysfs names them (None for one torch does not place), fewer where
    fewer GPUs are visible."""
    import torch

    out = []
    for i in range(min(count, torch.cuda.device_count())):
        p = torch.cuda.get_device_properties(i)
        ids = [getattr(p, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
        out.append(cores.pci_name(*ids) if None not in ids else None)
    return out


def pin_near_gpu(local_rank: int, local_ranks: int, threads) -> dict:
    """cores.pin_gpu for this rank (Lightning puts local rank i on cuda:i), then no more torch threads than the
    cores it was given: Lightning sized them from the cores the rank had before (the whole node's share)."""
    import torch

    done = cores.pin_gpu(local_rank, local_ranks, gpu_addresses(local_ranks), threads)
    if done["cpu_pin"] in ("numa", "split") and torch.get_num_threads() > len(cores.affinity()):
        torch.set_num_threads(len(cores.affinity()))
    return done


def finish(fabric, ctx, metrics, stop, val, per_rank):
    """Rank 0 writes result.json (a requeue is asked for first: the record says whether SLURM took it); every
    rank waits until it is on disk, so none ends before it (srun --kill-on-bad-exit would end rank 0 too). A
    resumed job that completed has no more use for its checkpoint."""
    from scalelab.train import record, requeue

    path = None
    if ctx.rank == 0:
        if stop and stop.requeue:
            stop.refused = requeue.ask_slurm()
        if stop and stop.reason == "SIGTERM" and ctx.launch.launcher == "slurm":
            stop.cause = requeue.end_cause()
        if stop and stop.reason == "time limit":  # not requeued: no attempt will resume from it (GBs for xl)
            requeue.done_with(ctx.resumed_from)
        payload = record.build_payload(ctx, per_rank, record.run_summary(ctx, per_rank), val)
        if stop:
            payload.update(status=stop.status(), error=stop.line())
        path = results.write(ctx.cfg.output_dir, payload, folder=ctx.folder)
        if not stop:
            print(one_line_summary(payload, path), flush=True)
            ended = record.epochs_first(ctx.cfg, payload["timing"]["steps"]) if not ctx.resumed_from else None
            if ended:
                print(f"scalelab: note: {ended}", flush=True)
            busy = cpushare.contended(payload["timing"].get("had_cpu"))
            if busy:
                print(f"scalelab: ! {busy} (host load {_load(per_rank)}); these times are slower than this "
                      "hardware's: run again when it is quiet", flush=True)
            requeue.done_with(ctx.resumed_from)
        if metrics:
            metrics.finish(val, "success" if not stop else "failed")
    fabric.barrier()
    if ctx.unpinned:
        cores.restore(ctx.unpinned)
    return path


def failed(ctx, watch, metrics, exc: BaseException) -> RunFailed:
    """The one-line error of a run that raised (or whose peer did): name the cause, leave a partial record."""
    from scalelab.train import failure

    # failure.py: which rank failed first and how (rank 0 asks its launched children and the other ranks)
    status, line = failure.classify(exc, watch, ctx.rank, ctx.clock.steps, error_line(exc))
    watch.stop_children()  # ranks launched from here cannot finish without this one
    note = failure.record_failure(ctx, status, line, exc, for_rank0=watch.records_for_rank0)
    if metrics:
        try:
            metrics.finish({}, "failed")
        except Exception:  # noqa: BLE001 - the logger may be what failed: the run's own line says more
            pass
    if ctx.rank != 0:
        return RunFailed(f"rank {ctx.rank} stopped: {line}{note}")
    return RunFailed(f"run ended with status {status}: {line}{note}")


def strategy(cfg: config.RunConfig, launch: cluster.Launch):
    """DDP over `launch.backend` when there is more than one rank (Fabric's DDPStrategy, torch's DDP knobs)."""
    if launch.world_size == 1:
        return "auto"
    from lightning.fabric.strategies import DDPStrategy

    # gradient_as_bucket_view: gradients live in DDP's buckets, no second gradient-sized copy per step
    return DDPStrategy(process_group_backend=launch.backend, timeout=timedelta(seconds=cfg.timeout),
                       gradient_as_bucket_view=True, bucket_cap_mb=cfg.bucket_cap_mb, static_graph=cfg.static_graph)


def preflight(cfg: config.RunConfig, launch: cluster.Launch, batch: int):
    """What can be refused before any process starts, each in one line (not a traceback after start-up)."""
    from scalelab.train import memcheck

    loggers.check(cfg.logger, cfg=cfg)  # its package, its API key
    if cfg.precision == "16-mixed" and launch.accelerator == "cpu":
        raise UsageError("--precision 16-mixed needs a GPU (float16 autocast); on CPU use 32 or bf16-mixed")
    memcheck.check(cfg, launch, batch)  # an out-of-memory after minutes of start-up, or the OOM killer, said now
    if cluster.env_rank() == 0:
        results.ensure_output_dir(cfg.output_dir)
        if launch.accelerator == "gpu" and launch.world_size > 1 and cfg.warmup_steps < config.WARMUP_STEPS["gpu"]:
            print(f"train.py: warning: --warmup_steps {cfg.warmup_steps} times steps {cfg.warmup_steps + 1}-"
                  f"{config.WARMUP_STEPS['gpu']}, where DDP syncs the GPU for its runtime statistics (a 1-GPU run "
                  f"does not): {config.WARMUP_STEPS['gpu']} or more leaves them out", file=sys.stderr, flush=True)


def run_logger(ctx):
    """Rank 0: the run id and its folder, claimed now (the logger writes into it, the result lands there at the end,
    rank 1 records into it should rank 0 be lost); Lightning's logger for --logger (None: none, or another rank)."""
    if ctx.rank != 0:
        return None
    cfg = ctx.cfg
    ctx.run_id = results.new_run_id(cfg.model, ctx.launch.world_size, cfg.run_name, job=slurm_env.job_label())
    ctx.folder = results.claim_folder(cfg.output_dir, ctx.run_id)  # rank 1 records into it should rank 0 be lost
    ctx.run_id = os.path.basename(ctx.folder)
    return loggers.build(cfg.logger, ctx.folder, ctx.run_id, comet=cfg)


def step_metrics(ctx, logger):
    """The rows --logger records, one per optimizer step, from the step clock's figures (None without a logger)."""
    if logger is None:
        return None
    from scalelab.train import metrics

    return metrics.StepMetrics(ctx.clock, [logger], ctx.samples_per_step, ctx.workload.tokens_per_sample,
                               ctx.launch.world_size, ctx.cfg.warmup_steps)


def stall_deadline(ctx, watch, injected):
    """deadline.py: under NCCL a dead peer blocks the survivors without an error; record before the watchdog."""
    from scalelab.testing.faults import blocks_like_nccl, wedge_anywhere
    from scalelab.train import failure, peers
    from scalelab.train.deadline import StallDeadline, first_batch_seconds, sigterm_grace, stall_seconds

    several = ctx.launch.world_size > 1
    backend = ctx.launch.backend if several else None
    seconds = stall_seconds(ctx.cfg.timeout, backend, blocks_like_nccl(injected) or wedge_anywhere())
    clock = ctx.clock

    def step_s():
        recent = sorted(clock.step_times[-20:])
        return recent[len(recent) // 2] if recent else 0.0

    # progress: batches and steps ended, gradient all-reduces issued (finer than a step: failure.hung_line), and
    # whether the ranks agreed to stop (a rank acting on SIGTERM is not blocked)
    return StallDeadline(seconds, lambda line, signal=None: failure.record_stall(ctx, watch, line, signal=signal),
                         lambda: (clock.batches, clock.steps, clock.buckets.issued, watch.signals.ending),
                         signals=watch.signals if several else None, grace=lambda: sigterm_grace(step_s()),
                         on_idle=(lambda: ctx.rank and peers.post_progress(
                             ctx.rank, (clock.steps, clock.batches, clock.buckets.issued))) if several else None,
                         first_seconds=first_batch_seconds(seconds, ctx.cfg.compile))


def check_powersgd(cfg: config.RunConfig, launch: cluster.Launch, module):
    """PowerSGD over gloo works with one gradient bucket only: each bucket's chain of all-reduces (P, then Q)
    is issued from gloo's completion threads, in a different order on each rank once there are several, and the
    ranks then mismatch (measured: gloo's "Received data size doesn't match expected size", SIGABRT)."""
    if not cfg.comm_hook.startswith("powersgd") or launch.backend != "gloo" or launch.world_size == 1:
        return
    from scalelab.train.comm import grad_bytes

    grad_mb = grad_bytes(module) / 2**20
    if grad_mb > cfg.bucket_cap_mb:
        raise UsageError(f"--comm_hook {cfg.comm_hook} over gloo needs one gradient bucket: the gradients are "
                         f"{grad_mb:.1f} MB, use --bucket_cap_mb {int(grad_mb) + 1} or more (NCCL has no such limit)")


def banner(cfg: config.RunConfig, launch: cluster.Launch, wl, batch: int, device: cores.Placement) -> str:
    """The run's first line: the job, the batch, the levers and where it runs (on CPU: whether every thread has a
    core of its own, cores.describe)."""
    import torch

    world = launch.world_size
    comm = launch.backend if world > 1 else "no communication"
    threads = device.threads or torch.get_num_threads()
    where = (f"{launch.num_nodes} node(s) x {launch.devices} GPU(s), {comm}" if launch.accelerator == "gpu"
             else f"CPU rehearsal: {world} device(s), {comm}, "
             + cores.describe(threads, launch.devices, device.node_cores, launch.launcher))
    k = cfg.accumulate_grad_batches
    batches = f"batch {batch}/device = {batch * world} global" + (
        f", x {k} accumulated = {batch * world * k} per optimizer step" if k > 1 else "")
    levers = "".join(f", {text}" for text in (
        cfg.comm_hook != "none" and f"comm hook {cfg.comm_hook}", cfg.bucket_cap_mb != 25 and
        f"buckets {cfg.bucket_cap_mb:g} MB", cfg.static_graph and "static graph") if text)
    return (f"scalelab: {wl.describe} ({human_count(wl.n_params)} params), {cfg.scaling} scaling, "
            f"{batches}, precision {cfg.precision}{levers} | {where} | launcher: {launch.launcher}")


def _load(per_rank: list) -> str:
    r = per_rank[0]
    return f"{r['load_avg']:g} on {r['host_cores']} cores" if r.get("load_avg") is not None else "unknown"


def one_line_summary(payload: dict, path: str) -> str:
    t = payload["timing"]
    if not t.get("samples_per_s"):  # a requeued job resumed at its very end: nothing was left to time
        return f"scalelab: done in {t['whole_run_s']:.1f} s, no step timed -> {path}"
    thr = f"{t['tokens_per_s']:,.0f} tokens/s" if t.get("tokens_per_s") else f"{t['samples_per_s']:,.0f} samples/s"
    return (f"scalelab: done in {t['whole_run_s']:.1f} s (train {t['train_time_s']:.2f} s over "
            f"{t['timed_steps']} timed steps, {t['step_s']['median'] * 1e3:.1f} ms/step median, {thr}) "
            f"-> {path}")


def cli():
    """Console-script entry point (see setup.cfg)."""
    from scalelab.train.signals import note_early

    note_early()
    fast_exit(run_main("train.py", main))
