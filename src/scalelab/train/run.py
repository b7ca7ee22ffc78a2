"""Train and time one run, then write its result: configure -> launch -> workload -> the loop -> result.json ->
teardown, in `main`, top to bottom.

The same code runs as a single process, as N local processes (rank 0 starts ranks 1..N-1: launch/local.py), under
srun, torchrun or submitit. The step is train/loop.py; DDP's gradient all-reduce, timed, is train/comm.py.
What keeps the run alive and recorded when something fails is train/guard/ (one object, `RunGuard`).
"""

import logging
import os
import sys
from datetime import timedelta

from scalelab import config, results
from scalelab.entry import fast_exit, run_main
from scalelab.errors import RunFailed
from scalelab.launch import cluster, cores, local
from scalelab.train import loggers, prepare, say


def main(argv=None, process_start=None) -> int:  # long: the whole run in one place, read top to bottom
    # configure: the flags, the launcher's sizes, what can be refused before any process starts
    process_start = process_start or cluster.process_start_time()
    local.wait_for_go()  # a rank that rank 0 started (below): its imports run beside rank 0's, then rank 0's go
    cfg = config.parse_config(argv)
    if argv is None:  # the other local ranks run sys.argv again: a --comet_api_key reaches them in the env
        sys.argv[1:] = loggers.without_key(sys.argv[1:])
    # launch, part 1: `--devices N` here: rank 0 starts ranks 1..N-1 before torch is imported where it can tell
    ranks = local.start_early(cfg.devices, cfg.num_nodes, cfg.threads)
    launch = cluster.detect(cfg.devices, cfg.num_nodes, cfg.accelerator)
    if launch.accelerator == "gpu":
        prepare.nccl_errors_reach_python()
    cfg = config.for_accelerator(cfg, launch.accelerator)
    batch = cfg.batch_per_device(launch.world_size)
    prepare.preflight(cfg, launch, batch)
    # cores.py: on CPU one device = --threads cores (default 1), pinned; before torch starts its thread pool
    device = cores.place(launch, cfg.threads, cfg.oversubscribe)
    if device.threads:  # the ranks' torch threads (else Fabric sets cores // local ranks)
        os.environ["OMP_NUM_THREADS"] = str(device.threads)

    # torch's threads start on the cores just placed (their pool starts at the first op, after set_num_threads)
    import torch
    from lightning.fabric import Fabric

    from scalelab.train import comm, loop
    from scalelab.train.clock import StepClock
    from scalelab.train.guard.run_guard import RunGuard
    from scalelab.train.observe import StepObserver
    from scalelab.train.payload import RunContext, build_payload, gather, hyperparameters, run_summary, sample_devices
    from scalelab.train.probe import AloneProbe
    from scalelab.workloads import data

    if not cfg.verbose:  # Lightning sets these to INFO on import ("Initializing distributed: ..." once per rank)
        for name in ("lightning", "lightning.fabric", "lightning.pytorch"):
            logging.getLogger(name).setLevel(logging.WARNING)
    if device.threads:
        torch.set_num_threads(device.threads)
    fabric = Fabric(accelerator=launch.accelerator, devices=launch.devices, num_nodes=launch.num_nodes,
                    strategy=strategy(cfg, launch), precision=cfg.precision)
    timer = comm.CommTimer(cfg.comm_hook)  # DDP's all-reduce, timed (its comm hook's state)
    ctx = RunContext(cfg, launch, batch, process_start, StepClock(fabric.device, process_start, timer),
                     AloneProbe(fabric.device, launch.world_size, timer), rank=cluster.env_rank(),
                     core_warning=device.warning)
    with RunGuard(ctx, slurm=launch.launcher == "slurm") as guard:  # every way the run ends is recorded
        # the workload: seeded alike on every rank
        prepare.build_workload(fabric, ctx)
        metrics = prepare.step_metrics(ctx, prepare.run_logger(ctx))
        guard.arm(metrics)
        if ctx.rank == 0:
            say.started(cfg, launch, ctx.workload, batch, device)
        # launch, part 2: the ranks rank 0 started go on (else, a salloc shell or --oversubscribe: start now); the
        # process group forms
        guard.launch(ranks or local.start_late(launch))
        fabric.launch()
        guard.joined(fabric)
        prepare.pin(fabric, ctx, device)
        model = fabric.setup_module(ctx.workload.module)  # to the device, precision applied, wrapped (DDP, FSDP)
        optimizer = fabric.setup_optimizers(ctx.workload.module.configure_optimizers())
        ctx.grad_bytes = comm.attach(model, timer)  # DDP's all-reduce through the timing comm hook
        pinned = launch.accelerator == "gpu"  # page-locked batches: the copy to the GPU does not wait
        loader = data.train_loader(ctx.workload.train_set, batch, fabric.global_rank, fabric.world_size, cfg.seed,
                                   cfg.num_workers, pin_memory=pinned)
        plan = loop.Plan(cfg.max_steps, cfg.max_epochs, cfg.accumulate_grad_batches, cfg.warmup_steps,
                         cfg.comm_probe_every)
        guard.resume(fabric, model, optimizer, plan)  # a requeued job: where its checkpoint left off
        if metrics:
            metrics.log_hyperparams(hyperparameters(ctx))
        # the loop; what the step ran is observed in the last warm-up step (never timed): the result's fingerprint
        ctx.seen = StepObserver(at=plan.step + max(plan.warmup_steps - 1, 0))
        ctx.sampler = sample_devices(fabric.device)  # what the device did in the steps: a thread, never in the loop
        stop = loop.train(fabric, model, optimizer, guard.loader(loader, plan.accumulate), plan, ctx.clock,
                          ctx.probe, guard.signals, metrics, ctx.seen)
        ctx.clock.loop_end()  # the host's interval around the loop: the self-check's independent clock
        ctx.sampler.stop()
        guard.save(stop, fabric, model, optimizer, plan)  # a requeue: every rank saves at the agreed step
        val = {}
        if ctx.workload.val_set is not None and not stop:
            val = loop.validate(fabric, model, data.eval_loader(ctx.workload.val_set, batch, fabric.global_rank,
                                                                fabric.world_size, cfg.num_workers, pin_memory=pinned))
        # result.json: every rank's figures gathered; rank 0 writes; every rank waits until it is on disk, so none
        # ends before it (srun --kill-on-bad-exit would end rank 0 too)
        per_rank = gather(ctx.rank_record())
        guard.disarm()  # the ranks have met: a slow write or scontrol on rank 0 is no stall of the others
        path = None
        if ctx.rank == 0:
            guard.before_record(stop)
            payload = build_payload(ctx, per_rank, run_summary(ctx, per_rank), val)
            if stop:
                payload.update(status=stop.status(), error=stop.line())
            if metrics:  # the logger's files first: a record says "completed" only beside the files it names
                metrics.finish(val, "success" if not stop else "failed")
            path = ctx.written = results.write(cfg.output_dir, payload, folder=ctx.folder)
            if not stop:
                say.done(ctx, payload, path, per_rank)
            guard.recorded(stop)
        fabric.barrier()
        if ctx.unpinned:
            cores.restore(ctx.unpinned)
    # teardown: the launched ranks end; nothing is copied off the device
    guard.teardown()
    if stop and ctx.rank == 0:  # the ranks stopped together: rank 0 says why, once, for all of them
        raise RunFailed(f"run ended with status {stop.status()}: {stop.line()} (partial result: {path})")
    return 1 if stop else 0


def strategy(cfg: config.RunConfig, launch: cluster.Launch):
    """DDP over `launch.backend` when there is more than one rank (Fabric's DDPStrategy, torch's DDP knobs); FSDP2
    (`--strategy fsdp`) through Fabric's ModelParallelStrategy at every world size, 1 included: the baseline runs
    the same sharded module, its all-gathers and reduce-scatters over one rank."""
    from lightning.fabric.strategies import DDPStrategy, ModelParallelStrategy

    if cfg.strategy == "fsdp":  # the workload's module shards itself (its `shard`: which units, which precision)
        # one full state dict in one file: requeue.save's write-then-rename keeps a cut save from leaving half of one
        return ModelParallelStrategy(lambda module, mesh: module.shard(mesh["data_parallel"], cfg.precision),
                                     data_parallel_size=launch.world_size, tensor_parallel_size=1,
                                     save_distributed_checkpoint=False, process_group_backend=launch.backend,
                                     timeout=timedelta(seconds=cfg.timeout))
    if launch.world_size == 1:
        return "auto"
    # gradient_as_bucket_view: gradients live in DDP's buckets, no second gradient-sized copy per step
    return DDPStrategy(process_group_backend=launch.backend, timeout=timedelta(seconds=cfg.timeout),
                       gradient_as_bucket_view=True, bucket_cap_mb=cfg.bucket_cap_mb, static_graph=cfg.static_graph)


def cli():
    """Console-script entry point (see setup.cfg)."""
    from scalelab.train.guard.signals import note_early

    note_early()
    fast_exit(run_main("train.py", main))
