"""Train and time one run, then write its result: configure -> launch check -> fit -> result.json.

Reads top to bottom. The same code runs as a single process, as N local CPU processes
(Lightning re-launches this script), under srun, torchrun or submitit.
"""

import logging
import os
import time
import warnings
from datetime import timedelta

from scalelab import config, results
from scalelab.cli import human_count
from scalelab.errors import RunFailed, UsageError
from scalelab.launch import cluster


def main(argv=None, process_start=None) -> int:
    process_start = process_start or cluster.process_start_time()
    cfg = config.parse_config(argv)
    _quiet_lightning(cfg.verbose)
    launch = cluster.detect(cfg.devices, cfg.num_nodes, cfg.accelerator)
    batch = cfg.batch_per_device(launch.world_size)
    if cfg.precision == "16-mixed" and launch.accelerator == "cpu":
        raise UsageError("--precision 16-mixed needs a GPU (float16 autocast); on CPU use 32 or bf16-mixed")
    if cluster.env_rank() == 0:
        results.ensure_output_dir(cfg.output_dir)

    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.strategies import DDPStrategy

    from scalelab import workloads
    from scalelab.train import faults, timing

    threads = cluster.cpu_threads(launch, cfg.threads) if launch.accelerator == "cpu" else torch.get_num_threads()
    torch.set_num_threads(threads)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    wl = workloads.build(cfg, batch, launch.world_size)
    timer = timing.StepTimer(cfg.warmup_steps, process_start, cfg.comm_probe_every)
    strategy = "auto"
    if launch.world_size > 1:
        strategy = DDPStrategy(process_group_backend=launch.backend, timeout=timedelta(seconds=cfg.timeout))
    trainer = pl.Trainer(
        accelerator=launch.accelerator,
        devices=launch.devices,
        num_nodes=launch.num_nodes,
        strategy=strategy,
        precision=cfg.precision,
        max_epochs=cfg.max_epochs or -1,
        max_steps=cfg.max_steps or -1,
        callbacks=[timer, faults.RankWatch(cfg.timeout), *faults.from_env()],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=cfg.verbose,
        num_sanity_val_steps=0,
        # Lightning's SLURM auto-requeue (SIGUSR1 from `--signal`) saves its checkpoint here, and a requeued
        # job resumes from it: one folder per job, inside the outputs, never in the repository.
        default_root_dir=os.path.join(cfg.output_dir, "lightning", os.environ.get("SLURM_JOB_ID", "local")),
    )
    if trainer.global_rank == 0:
        print(banner(cfg, launch, wl, batch, threads), flush=True)
    try:
        trainer.fit(wl.module, train_dataloaders=wl.train_loader)
        val = trainer.validate(wl.module, dataloaders=wl.val_loader, verbose=False)[0] if wl.val_loader else {}
    except BaseException as exc:  # noqa: B902 - record every way a run can end, then re-raise as one line
        # faults.py: which rank failed first and how (rank 0 asks its launched children and the other ranks)
        status, line = faults.classify(exc, trainer, len(timer.step_times), error_line(exc))
        faults.stop_children(trainer)  # ranks launched from here cannot finish without this one
        note = record_failure(cfg, launch, wl, batch, timer, trainer, process_start, status, line, exc)
        if trainer.global_rank != 0:
            raise RunFailed(f"rank {trainer.global_rank} stopped: {line}") from None
        raise RunFailed(f"run ended with status {status}: {line}{note}") from None

    if trainer.global_rank == 0:
        summary = run_summary(cfg, launch, wl, batch, timer.per_rank)
        payload = build_payload(cfg, launch, wl, batch, timer.per_rank, summary, val, process_start)
        path = results.write(cfg.output_dir, payload)
        print(one_line_summary(payload, path), flush=True)
    return 0


def error_line(exc) -> str:
    import re

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    if isinstance(exc, SIGTERMException):
        return "received SIGTERM (job time limit, preemption or scancel) and stopped after the current step"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    name, text = type(exc).__name__, lines[0] if lines else ""
    # torch wraps an error in a gradient hook as "Got the following error when running the callback: X: ..."
    # (twice), and gloo starts with its source position: keep the innermost error, as a person would read it.
    while True:
        inner = re.match(r"Got the following error when running the callback: (?:(\w+): )?(.*)", text)
        if not inner:
            break
        name, text = inner.group(1) or name, inner.group(2)
    text = re.sub(r"^\[[^\]]*:\d+\]\s*", "", text)
    return f"{name}: {text}"[:300]


def run_summary(cfg, launch, wl, batch, per_rank) -> dict:
    """Timing figures of the run; a run shorter than its warm-up still keeps its last step."""
    from scalelab.train import timing

    steps = len(per_rank[0]["step_times_s"])
    return timing.summarize(per_rank, min(cfg.warmup_steps, steps - 1), batch * launch.world_size,
                            wl.tokens_per_sample)


def record_failure(cfg, launch, wl, batch, timer, trainer, process_start, status, line, exc) -> str:
    """Rank 0 writes what it has (its own timings: the other ranks may be gone) plus the traceback.

    Only local, collective-free work here: a peer may be dead, and a collective would wait for it.
    Returns the note for the one-line message: " (partial result: PATH)", or why no record could be written.
    """
    import traceback

    if trainer.global_rank != 0:
        return ""
    try:
        own = [timer.rank_record(trainer)]
        summary = (run_summary(cfg, launch, wl, batch, own) if timer.step_times
                   else {"steps": 0, "final_train_loss": None})
        payload = build_payload(cfg, launch, wl, batch, own, summary, {}, process_start)
        payload.update(status=status, error=line)
        path = results.write(cfg.output_dir, payload)
        results.atomic_write_text(os.path.join(os.path.dirname(path), "error.log"),
                                  "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except Exception as err:  # noqa: BLE001 - a second failure must not hide the first behind a traceback
        return f" (and no result could be written: {error_line(err)})"
    return f" (partial result: {path})"


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


def banner(cfg, launch, wl, batch, threads) -> str:
    world = launch.world_size
    comm = launch.backend if world > 1 else "no communication"
    where = (f"{launch.num_nodes} node(s) x {launch.devices} GPU(s), {comm}" if launch.accelerator == "gpu"
             else f"CPU rehearsal: {world} process(es), {comm}, {threads} thread(s) per process")
    return (f"scalelab: {wl.describe} ({human_count(wl.n_params)} params), {cfg.scaling} scaling, "
            f"batch {batch}/device = {batch * world} global, precision {cfg.precision} | {where} | "
            f"launcher: {launch.launcher}")


def build_payload(cfg, launch, wl, batch, per_rank, summary, val, process_start) -> dict:
    summary = dict(summary)
    final_loss = summary.pop("final_train_loss")
    payload = results.envelope("training", results.new_run_id(cfg.model, launch.world_size, cfg.run_name))
    payload.update(
        status="completed",
        error=None,
        run_name=cfg.run_name,
        workload={
            **cfg.workload(),
            "describe": wl.describe,
            "params": wl.n_params,
            "tokens_per_sample": wl.tokens_per_sample,
            "batch_per_device": batch,
            "global_batch": batch * launch.world_size,
        },
        config=cfg.to_dict(),
        launch=launch.record([r["device_name"] for r in per_rank], [r["host"] for r in per_rank],
                             threads_per_proc=per_rank[0]["threads"]),
        timing={**summary, "whole_run_s": time.time() - process_start,
                **throughput(summary, wl, launch, cfg.precision, per_rank)},
        metrics={"final_train_loss": final_loss,
                 "val_loss": _num(val.get("val_loss")), "val_acc": _num(val.get("val_acc"))},
        versions=results.versions(),
        slurm=results.slurm_info(),
        environment=results.capture_environment(),
        ranks=per_rank,
    )
    return payload


def throughput(summary, wl, launch, precision, per_rank) -> dict:
    """Achieved TFLOP/s per device from the analytic FLOPs per sample; MFU only where a peak is known."""
    from scalelab import perfmodel

    flops = wl.flops_per_sample
    if not flops or not summary.get("samples_per_s"):
        return {"flops_per_sample": flops, "tflops_per_device": None, "peak_tflops": None, "mfu": None}
    achieved = flops * summary["samples_per_s"] / launch.world_size / 1e12
    peak = perfmodel.peak_tflops(per_rank[0]["device_name"], precision) if launch.accelerator == "gpu" else None
    return {"flops_per_sample": flops, "tflops_per_device": achieved, "peak_tflops": peak,
            "mfu": perfmodel.mfu(achieved, peak)}


def _num(value):
    return None if value is None else float(value)


def one_line_summary(payload, path) -> str:
    t = payload["timing"]
    thr = f"{t['tokens_per_s']:,.0f} tokens/s" if t.get("tokens_per_s") else f"{t['samples_per_s']:,.0f} samples/s"
    return (f"scalelab: done in {t['whole_run_s']:.1f} s (train {t['train_time_s']:.2f} s over "
            f"{t['timed_steps']} timed steps, {t['step_time_s']['median'] * 1e3:.1f} ms/step median, {thr}) "
            f"-> {path}")


def cli():
    """Console-script entry point (see setup.cfg)."""
    import sys

    from scalelab.cli import run_main

    sys.exit(run_main("scalelab-training", main))
