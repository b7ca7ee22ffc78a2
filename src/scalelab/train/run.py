"""Train and time one run, then write its result: configure -> launch check -> fit -> result.json.

Reads top to bottom. The same code runs as a single process, as N local CPU processes
(Lightning re-launches this script), under srun, torchrun or submitit.
"""

import logging
import os
import sys
import warnings
from datetime import timedelta

from scalelab import config, results
from scalelab.cli import fast_exit, human_count, run_main
from scalelab.errors import RunFailed, UsageError, error_line
from scalelab.launch import cluster, cores
from scalelab.train import loggers


def main(argv=None, process_start=None) -> int:
    process_start = process_start or cluster.process_start_time()
    cfg = config.parse_config(argv)
    _quiet_lightning(cfg.verbose)
    launch = cluster.detect(cfg.devices, cfg.num_nodes, cfg.accelerator)
    cfg = config.for_accelerator(cfg, launch.accelerator)
    batch = cfg.batch_per_device(launch.world_size)
    preflight(cfg, launch)
    # cores.py: on CPU one device = --threads cores (default 1), pinned; before torch starts its thread pool
    device = cores.place(launch, cfg.threads, cfg.oversubscribe)

    import lightning.pytorch as pl
    import torch

    from scalelab import workloads
    from scalelab.train import failure, record, timing

    if device.threads:  # OMP_NUM_THREADS too: else Lightning's DDP setup resets threads to cores // local ranks
        torch.set_num_threads(device.threads)
        os.environ["OMP_NUM_THREADS"] = str(device.threads)  # (the ranks Lightning relaunches inherit it)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    wl = workloads.build(cfg, batch, launch.world_size)
    check_powersgd(cfg, launch, wl.module)
    if launch.accelerator == "gpu" and cfg.model == "transformer" and os.environ.get("SCALELAB_NO_MEMORY_CHECK") != "1":
        check_gpu_memory(cfg, batch)  # an out-of-memory after minutes of start-up, said before it happens
    timer = timing.StepTimer(cfg.warmup_steps, process_start, cfg.comm_probe_every, cfg.comm_hook)
    ctx = record.RunContext(cfg, launch, wl, batch, timer, process_start, device.warning)
    logger = run_logger(ctx)
    watch, stall, faults = watchers(cfg, launch, lambda line: failure.record_stall(ctx, trainer, watch, line))
    callbacks = [timer, watch, stall, *([timing.PinCores(device)] if device.threads else []), *faults,
                 *([step_metrics(ctx)] if logger else [])]  # after the timer: it reads the steps the timer read
    trainer = make_trainer(cfg, launch, callbacks, logger)
    if trainer.global_rank == 0:
        print(banner(cfg, launch, wl, batch, torch.get_num_threads()), flush=True)
        if device.warning:
            print(f"train.py: warning: {device.warning}; the result and the report say so", file=sys.stderr,
                  flush=True)
    try:
        trainer.fit(wl.module, train_dataloaders=wl.train_loader)
        val = trainer.validate(wl.module, dataloaders=wl.val_loader, verbose=False)[0] if wl.val_loader else {}
        stall.disarm()
    except BaseException as exc:  # noqa: BLE001 - record every way a run can end, then re-raise as one line
        # failure.py: which rank failed first and how (rank 0 asks its launched children and the other ranks)
        status, line = failure.classify(exc, watch, trainer.global_rank, len(timer.step_times),
                                        error_line(exc))
        watch.stop_children()  # ranks launched from here cannot finish without this one
        note = failure.record_failure(ctx, trainer, status, line, exc)
        if trainer.global_rank != 0:
            raise RunFailed(f"rank {trainer.global_rank} stopped: {line}") from None
        raise RunFailed(f"run ended with status {status}: {line}{note}") from None

    if trainer.global_rank == 0:
        summary = record.run_summary(ctx, timer.per_rank)
        payload = record.build_payload(ctx, timer.per_rank, summary, val)
        path = results.write(cfg.output_dir, payload, folder=ctx.folder)
        print(one_line_summary(payload, path), flush=True)
    return 0


def preflight(cfg: config.RunConfig, launch: cluster.Launch):
    """What can be refused before any process starts, each in one line (not a traceback after start-up)."""
    loggers.check(cfg.logger)  # its package, its API key
    if cfg.precision == "16-mixed" and launch.accelerator == "cpu":
        raise UsageError("--precision 16-mixed needs a GPU (float16 autocast); on CPU use 32 or bf16-mixed")
    if cluster.env_rank() == 0:
        results.ensure_output_dir(cfg.output_dir)


def run_logger(ctx):
    """Rank 0: the run id, chosen now, and its folder, claimed now when the logger writes into it (the result lands
    there at the end); Lightning's logger for --logger (None: none, or another rank)."""
    if cluster.env_rank() != 0:
        return None
    cfg = ctx.cfg
    ctx.run_id = results.new_run_id(cfg.model, ctx.launch.world_size, cfg.run_name)
    if loggers.wants_folder(cfg.logger):
        ctx.folder = results.claim_folder(cfg.output_dir, ctx.run_id)
        ctx.run_id = os.path.basename(ctx.folder)
    return loggers.build(cfg.logger, ctx.folder, ctx.run_id)


def step_metrics(ctx):
    """The callback that hands the step timer's figures to the logger, one row per optimizer step."""
    from scalelab.train import metrics, record

    samples = ctx.batch * ctx.launch.world_size * ctx.cfg.accumulate_grad_batches
    return metrics.StepMetrics(ctx.timer, samples, ctx.workload.tokens_per_sample, ctx.launch.world_size,
                               record.hyperparameters(ctx))


def watchers(cfg: config.RunConfig, launch: cluster.Launch, on_stall) -> tuple:
    """The callbacks that turn every way a run can end into a record: (RankWatch, StallDeadline, test faults).

    watch.py: rank 0 supervises the ranks it launches; every rank turns signals into a recorded end.
    deadline.py: under NCCL a dead peer blocks the survivors without an error; record before the watchdog.
    """
    from scalelab.testing.faults import blocks_like_nccl, from_env
    from scalelab.train.deadline import StallDeadline, stall_seconds
    from scalelab.train.watch import RankWatch

    faults = from_env()  # a test hook, [] in a real run
    seconds = stall_seconds(cfg.timeout, launch.backend if launch.world_size > 1 else None, blocks_like_nccl(faults))
    return RankWatch(cfg.timeout), StallDeadline(seconds, on_stall), faults


def check_powersgd(cfg: config.RunConfig, launch: cluster.Launch, module):
    """PowerSGD over gloo works with one gradient bucket only: each bucket's chain of all-reduces (P, then Q)
    is issued from gloo's completion threads, in a different order on each rank once there are several, and the
    ranks then mismatch (measured: gloo's "Received data size doesn't match expected size", SIGABRT)."""
    if not cfg.comm_hook.startswith("powersgd") or launch.backend != "gloo" or launch.world_size == 1:
        return
    grad_mb = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad) / 2**20
    if grad_mb > cfg.bucket_cap_mb:
        raise UsageError(f"--comm_hook {cfg.comm_hook} over gloo needs one gradient bucket: the gradients are "
                         f"{grad_mb:.1f} MB, use --bucket_cap_mb {int(grad_mb) + 1} or more (NCCL has no such limit)")


def check_gpu_memory(cfg: config.RunConfig, batch: int):
    """Refuse, before fit, a GPT step this GPU cannot hold (perfmodel.memory's estimate), saying what fits."""
    import torch

    from scalelab.perfmodel import memory
    from scalelab.workloads.transformer import lora_params, shape_of

    shape = shape_of(cfg)
    props = torch.cuda.get_device_properties(0)
    trainable = lora_params(shape, cfg.lora_rank) if cfg.lora_rank else None
    est = memory.training_memory(shape, batch, cfg.precision, trainable_params=trainable)
    if not memory.fits(est, props.total_memory):
        raise UsageError(f"--preset {cfg.preset} at batch {batch}/GPU, seq {shape.seq_len}, precision {cfg.precision} "
                         f"needs {est.describe()} but {props.name} has {props.total_memory / 1e9:.1f} GB: "
                         f"{memory.advice(shape, batch, cfg.precision, props.total_memory)} "
                         "(SCALELAB_NO_MEMORY_CHECK=1 runs anyway)")


def make_trainer(cfg: config.RunConfig, launch: cluster.Launch, callbacks: list, logger=None):
    """Lightning's Trainer for this run: DDP over `launch.backend` when there is more than one rank."""
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy

    strategy = "auto"
    if launch.world_size > 1:
        # gradient_as_bucket_view: gradients live in DDP's buckets, no second gradient-sized copy per step
        strategy = DDPStrategy(process_group_backend=launch.backend, timeout=timedelta(seconds=cfg.timeout),
                               gradient_as_bucket_view=True, bucket_cap_mb=cfg.bucket_cap_mb,
                               static_graph=cfg.static_graph)
    return pl.Trainer(
        accelerator=launch.accelerator,
        devices=launch.devices,
        num_nodes=launch.num_nodes,
        strategy=strategy,
        precision=cfg.precision,
        max_epochs=cfg.max_epochs or -1,
        max_steps=cfg.max_steps or -1,  # optimizer steps: K batches each with --accumulate_grad_batches K
        accumulate_grad_batches=cfg.accumulate_grad_batches,
        callbacks=callbacks,
        logger=logger or False,  # rank 0's (run_logger); Lightning's loggers write on rank 0 only anyway
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=cfg.verbose,
        num_sanity_val_steps=0,
        # Lightning's SLURM auto-requeue (SIGUSR1 from `--signal`) saves its checkpoint here, and a requeued
        # job resumes from it: one folder per job, inside the outputs, never in the repository.
        default_root_dir=os.path.join(cfg.output_dir, "lightning", os.environ.get("SLURM_JOB_ID", "local")),
    )


def _quiet_lightning(verbose: bool):
    if verbose:
        return
    import lightning.pytorch  # noqa: F401  (it sets its loggers to INFO on import: import first, then quieten)

    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for pattern in (".*does not have many workers.*", ".*srun.*", ".*smaller than the logging interval.*",
                    ".*sync_dist=True.*", ".*LeafSpec.*", ".*validation_step.*val_dataloader.*",
                    # validate() after fit shards the val set: at most world_size-1 padded samples count twice
                    ".*DistributedSampler.*trainer.validate.*"):
        warnings.filterwarnings("ignore", message=pattern)


def banner(cfg: config.RunConfig, launch: cluster.Launch, wl, batch: int, threads: int) -> str:
    world = launch.world_size
    comm = launch.backend if world > 1 else "no communication"
    where = (f"{launch.num_nodes} node(s) x {launch.devices} GPU(s), {comm}" if launch.accelerator == "gpu"
             else f"CPU rehearsal: {world} device(s), {comm}, 1 device = {threads} core(s), "
             + ("ranks share cores (oversubscribed)" if cfg.oversubscribe else "each rank pinned"))
    k = cfg.accumulate_grad_batches
    batches = f"batch {batch}/device = {batch * world} global" + (
        f", x {k} accumulated = {batch * world * k} per optimizer step" if k > 1 else "")
    levers = "".join(f", {text}" for text in (
        cfg.comm_hook != "none" and f"comm hook {cfg.comm_hook}", cfg.bucket_cap_mb != 25 and
        f"buckets {cfg.bucket_cap_mb:g} MB", cfg.static_graph and "static graph") if text)
    return (f"scalelab: {wl.describe} ({human_count(wl.n_params)} params), {cfg.scaling} scaling, "
            f"{batches}, precision {cfg.precision}{levers} | {where} | launcher: {launch.launcher}")


def one_line_summary(payload: dict, path: str) -> str:
    t = payload["timing"]
    thr = f"{t['tokens_per_s']:,.0f} tokens/s" if t.get("tokens_per_s") else f"{t['samples_per_s']:,.0f} samples/s"
    return (f"scalelab: done in {t['whole_run_s']:.1f} s (train {t['train_time_s']:.2f} s over "
            f"{t['timed_steps']} timed steps, {t['step_time_s']['median'] * 1e3:.1f} ms/step median, {thr}) "
            f"-> {path}")


def cli():
    """Console-script entry point (see setup.cfg)."""
    fast_exit(run_main("train.py", main))
