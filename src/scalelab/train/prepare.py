"""Before the loop, in the order train/run.py calls them: what is refused before any process starts, the workload,
where a rank's threads go, and the logger. Each refusal is one line (a UsageError), never a traceback after start-up.
Imports no torch (a flag is refused before torch loads, and the rank's cores are placed before its threads start):
what needs torch imports it where it runs."""

import os
import sys

from scalelab import config, results, workloads
from scalelab.errors import UsageError
from scalelab.launch import cluster, cores, slurm_env
from scalelab.train import loggers, memcheck, metrics

NCCL_ERROR_HANDLING = "2"  # torch's CleanUpOnly: abort the communicators on an error, raise, do not kill the process


def nccl_errors_reach_python(environ=None) -> None:
    """TORCH_NCCL_ASYNC_ERROR_HANDLING=2 unless the user chose a value (set by every rank, before any process group
    forms).

    What torch's NCCL watchdog does when a collective fails or passes --timeout (ProcessGroupNCCL.hpp's
    ErrorHandlingMode): 0 nothing (the main thread stays blocked in its device sync for good); 1 abort the
    communicators and rethrow in the watchdog thread, which ends the process (SIGABRT); 3, torch's default, the
    same without the abort. Either way Python never runs again and no record is written. 2 aborts the
    communicators only: the pending NCCL kernels return, so the blocked device sync returns, and the next NCCL
    call raises in Python, where failure.py records the run and names the rank. docs/08."""
    environ = os.environ if environ is None else environ
    environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", NCCL_ERROR_HANDLING)


def preflight(cfg: config.RunConfig, launch: cluster.Launch, batch: int):
    """What can be refused before any process starts, each in one line (not a traceback after start-up)."""
    loggers.check(cfg.logger, cfg=cfg)  # its package, its API key
    if cfg.precision == "16-mixed" and launch.accelerator == "cpu":
        raise UsageError("--precision 16-mixed needs a GPU (float16 autocast); on CPU use 32 or bf16-mixed")
    memcheck.check(cfg, launch, batch)  # an out-of-memory after minutes of start-up, or the OOM killer, said now
    if cluster.env_rank() == 0:
        results.ensure_output_dir(cfg.output_dir)
        ddp_gpus = cfg.strategy == "ddp" and launch.accelerator == "gpu" and launch.world_size > 1  # FSDP: no stats
        if ddp_gpus and cfg.warmup_steps < config.WARMUP_STEPS["gpu"]:
            print(f"train.py: warning: --warmup_steps {cfg.warmup_steps} times steps {cfg.warmup_steps + 1}-"
                  f"{config.WARMUP_STEPS['gpu']}, where DDP syncs the GPU for its runtime statistics (a 1-GPU run "
                  f"does not): {config.WARMUP_STEPS['gpu']} or more leaves them out", file=sys.stderr, flush=True)


def build_workload(fabric, ctx):
    """The model and data, seeded alike on every rank, and what can be refused about them before launch."""
    cfg, launch, batch = ctx.cfg, ctx.launch, ctx.batch
    fabric.seed_everything(cfg.seed, verbose=False)
    ctx.workload = workloads.build(cfg, batch, launch.world_size)
    per_rank = -(-len(ctx.workload.train_set) // launch.world_size)  # DistributedSampler: ceil(N / ranks)
    if per_rank < batch:
        raise UsageError(f"{len(ctx.workload.train_set)} training samples give each of the {launch.world_size} "
                         f"rank(s) {per_rank}, less than one batch of {batch}: raise --num_samples or lower "
                         "--batch_size")
    check_powersgd(cfg, launch, ctx.workload.module)
    if ctx.workload.flops_per_sample is None or cfg.model not in workloads.BUILTIN:
        # a workload without an analytic figure: counted, before compile; one of a user's: its step tried first
        from scalelab.train import flopcount

        try:
            flops, how = flopcount.count(ctx.workload.module, ctx.workload.train_set, batch)
        except flopcount.NoLoss as exc:
            raise UsageError(f"--model {cfg.model}: its training_step returns {exc}; the loop calls backward on the "
                             "loss it returns") from None
        if ctx.workload.flops_per_sample is None:
            ctx.workload.flops_per_sample, ctx.workload.flops_from = flops, how
    if cfg.compile:  # every workload alike, before DDP or FSDP wraps it; its graphs' runs counted (train/compiled.py)
        from scalelab.train import compiled

        compiled.apply(ctx.workload.module)


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


def pin(fabric, ctx, device) -> None:
    """This rank's cores, once the process group exists: near its GPU where the launcher did not bind it
    (cores.pin_gpu); on CPU its --threads cores, so the transport's threads (started with the group) keep the
    node's cores (cores.pin says why). What it had before is given back at the end."""
    if ctx.launch.accelerator == "gpu":
        ctx.unpinned = cores.affinity()
        ctx.pinning = pin_near_gpu(fabric.local_rank, ctx.launch.devices, device.threads)
    elif device.threads:
        ctx.unpinned = cores.affinity()
        cores.pin(fabric.local_rank, device.threads, device.node_cores)


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


def run_logger(ctx):
    """Rank 0: the run id and its folder, claimed now with the provisional record in it (payload.provisional_payload:
    any end replaces it; a rank 0 killed at any moment leaves it, never an empty folder); the logger writes into the
    folder, the result lands there, rank 1 records into it should rank 0 be lost. A disk that refuses the record now
    would refuse the result later: the run fails now, in one line, before it trains. Returns Lightning's logger for
    --logger (None: none, or another rank)."""
    from scalelab.train.payload import provisional_payload  # torch: imported by run.py once the cores are placed

    if ctx.rank != 0:
        return None
    cfg = ctx.cfg
    ctx.run_id = results.new_run_id(cfg.model, ctx.launch.world_size, cfg.run_name, job=slurm_env.job_label())
    ctx.folder = os.path.dirname(results.write(cfg.output_dir, provisional_payload(ctx)))
    ctx.run_id = os.path.basename(ctx.folder)
    return loggers.build(cfg.logger, ctx.folder, ctx.run_id, comet=cfg)


def step_metrics(ctx, logger):
    """The rows --logger records, one per optimizer step, from the step clock's figures (None without a logger)."""
    if logger is None:
        return None
    return metrics.StepMetrics(ctx.clock, [logger], ctx.samples_per_step, ctx.workload.tokens_per_sample,
                               ctx.launch.world_size, ctx.cfg.warmup_steps)
