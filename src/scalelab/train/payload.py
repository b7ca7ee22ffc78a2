"""What a training run's result.json holds: one builder for the result of a completed run and for the partial
record a failed one leaves (failure.record_failure), both from one RunContext."""

import os
import resource
import time
from dataclasses import dataclass
from typing import Optional

import msgspec
import torch
import torch.distributed as dist

from scalelab import fingerprint, perfmodel, record, redaction, results, workloads
from scalelab.config import RunConfig
from scalelab.launch import cluster, cores, slurm_env
from scalelab.launch.cluster import Launch
from scalelab.measure import devices, timing
from scalelab.measure.steps import optimizer_view
from scalelab.train.clock import StepClock
from scalelab.train.probe import AloneProbe
from scalelab.workloads import Workload


@dataclass
class RunContext:
    """The values of one run that every result writer needs, together."""

    cfg: RunConfig
    launch: Launch
    batch: int  # per device
    process_start: float  # wall clock (time.time) when this process started
    clock: StepClock
    probe: AloneProbe
    rank: int = 0  # global rank: the launcher's until the process group exists, then Fabric's
    local_rank: int = 0
    node_rank: int = 0
    workload: Optional[Workload] = None  # built once the ranks exist
    core_warning: Optional[str] = None  # --oversubscribe's recorded warning (launch.cores)
    run_id: Optional[str] = None  # rank 0: chosen at the start of the run
    folder: Optional[str] = None  # rank 0: the run folder, claimed at the start when a logger writes into it
    unpinned: Optional[list] = None  # the cores this process had before its rank was pinned (given back at the end)
    resumed_from: Optional[str] = None  # a requeued job's checkpoint, loaded at the start
    pinning: Optional[dict] = None  # a GPU rank: how its cores were chosen, its GPU's NUMA node (cores.pin_gpu)
    grad_bytes: Optional[int] = None  # what DDP all-reduces a step (comm.attach)
    seen: Optional[object] = None  # the StepObserver of the loop (train/observe.py): what the step ran
    sampler: Optional[devices.Sampler] = None  # what the devices did during the steps (sample_devices)
    written: Optional[str] = None  # rank 0: its own result.json, once on disk (a later failure does not rewrite it)

    @property
    def samples_per_step(self) -> int:
        """Samples of one optimizer step over all ranks: the global batch (per device x ranks x accumulation), the
        figure throughput, the logger and the result's global_batch all count with."""
        return self.batch * self.launch.world_size * self.cfg.accumulate_grad_batches

    def rank_record(self) -> dict:
        """This rank's record: where it ran, what the step clock and the probes measured, what its step ran; also
        what a failed run's partial record holds of its own rank (never waits for the device)."""
        clock, comm = self.clock, self.clock.comm
        figures = clock.figures()
        return {"rank": self.rank, "local_rank": self.local_rank, "node_rank": self.node_rank,
                **inventory(clock.device), **figures, **self.probe.figures(),
                "grad_bytes": self.grad_bytes, "bucket_bytes": comm.bucket_bytes,
                "wire_bytes": comm.wire_bytes,  # what --comm_hook put on the wire for those buckets
                **(self.pinning or {}), "fingerprint": self.seen.record() if self.seen else None,
                "devices": device_figures(self.sampler, clock, figures, self.cfg.warmup_steps)}


def sample_devices(device) -> devices.Sampler:
    """A sampler of this rank's device, started: its GPU by UUID through NVML, or its process's CPU time; one that
    samples nothing (and says why) under SCALELAB_NO_SAMPLER=1, on ROCm, or where NVML cannot start."""
    if os.environ.get(devices.ENV_OFF) == "1":
        return devices.Sampler(note=f"not sampled ({devices.ENV_OFF}=1)")
    kind = "cpu" if device.type != "cuda" else "rocm" if torch.version.hip else "cuda"
    source, why = devices.open_source(kind, device.index or 0, gpu_uuid(device))
    return devices.Sampler(source, why).start()


def device_figures(sampler, clock: StepClock, figures: dict, warmup_steps: int) -> Optional[dict]:
    """The sampler stopped (a failing run's record stops it here) and read over the timed window: from the end of
    warm-up, on the step clock, to the loop's end; None where no sampler started (a run that failed before it)."""
    if sampler is None:
        return None
    sampler.stop()
    times = optimizer_view(figures)["step_times_s"]
    return sampler.figures(*devices.timed_window(clock.loop_start, clock.loop_wall_s, times, warmup_steps))


def inventory(device) -> dict:
    """Where this rank ran and what it held: the host, the device and its memory, the cores, the transport."""
    gpu = device.type == "cuda"
    return {
        "host": cluster.hostname(),
        "device": str(device),
        "device_name": cluster.device_name("gpu" if gpu else "cpu", device),
        # the physical GPU (cuda:N names a slot, the same on every node and under any CUDA_VISIBLE_DEVICES)
        "gpu_uuid": gpu_uuid(device),
        "backend": process_group_backend(),  # as torch.distributed runs it, not as asked for
        "threads": torch.get_num_threads(),
        "cpu_affinity": cores.affinity(),  # the cores this rank ran on, and on which machine (shared_cores)
        "machine": cores.machine_id(),
        "visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        # the most the caching allocator held for tensors at once (GPU only): the self-check's memory claim
        "peak_memory_bytes": _or_none(torch.cuda.max_memory_allocated, device) if gpu else None,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # host memory, so far
        "load_avg": _load_avg(),  # the host's 1-minute load at the end, beside its cores
        "host_cores": os.cpu_count(),
    }


def gpu_uuid(device):
    """The GPU's UUID (unique per physical GPU), or None: a CPU device, or a torch that does not report it."""
    if device.type != "cuda":
        return None
    uuid = getattr(_or_none(torch.cuda.get_device_properties, device), "uuid", None)
    return str(uuid) if uuid is not None else None


def _or_none(read, device):
    """A figure the device gives, or None where it cannot (a sticky CUDA error: the failing run's record must
    still be written)."""
    try:
        return read(device)
    except RuntimeError:
        return None


def process_group_backend():
    """dist.get_backend() of the world group ("nccl", "gloo", or per device: "cpu:gloo,cuda:nccl"); None without a
    process group (one rank)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return str(dist.get_backend())


def _load_avg():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def gather(record: dict) -> list:
    """All ranks' records, ordered by rank (every rank must call this)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [record]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, record)
    return sorted(out, key=lambda r: r["rank"])


def run_summary(ctx: RunContext, per_rank: list[dict]) -> record.Timing:
    """Timing figures of the run; a run shorter than its warm-up still keeps its last step."""
    samples_per_step = ctx.samples_per_step
    tokens = ctx.workload.tokens_per_sample if ctx.workload else 0
    summary = timing.summarize(per_rank, ctx.cfg.warmup_steps, samples_per_step, tokens)
    window = summary.steps - summary.warmup_steps  # the sampled window's steps, probe steps included
    return msgspec.structs.replace(summary, devices=devices.of_run(per_rank, window, samples_per_step))


def build_payload(ctx: RunContext, per_rank: list[dict], summary: record.Timing, val: dict) -> dict:
    """The training result (record.Training's fields): summary, run_summary's (or a failed run's steps=0)."""
    cfg, launch = ctx.cfg, ctx.launch
    payload = results.envelope("training", ctx.run_id or results.new_run_id(
        cfg.model, launch.world_size, cfg.run_name, job=slurm_env.job_label()))
    payload.update(
        status="completed",
        error=None,
        run_name=cfg.run_name,
        workload=workload_record(ctx),
        config=cfg.to_dict(),
        launch=launch.record([r["device_name"] for r in per_rank], [r["host"] for r in per_rank],
                             threads=per_rank[0]["threads"],
                             oversubscribed=ctx.core_warning or cores.shared_cores(per_rank)),
        timing=msgspec.structs.replace(summary, whole_run_s=time.time() - ctx.process_start,
                                       **throughput(ctx, summary, per_rank)),
        metrics={"train_loss": timing.final_loss(per_rank, summary.steps),
                 "val_loss": _num(val.get("val_loss")), "val_acc": _num(val.get("val_acc"))},
        memory=memory_record(ctx, per_rank),
        fingerprint=fingerprint.of_run(per_rank),  # what the step ran, observed in it (train/observe.py)
        versions=results.versions(),
        slurm=slurm_env.job_record(),
        environment=redaction.capture_environment(),
        ranks=per_rank,
    )
    return payload


PROVISIONAL = ("did not end, or is still running: no rank recorded how the run ended (if it is not running, rank 0 "
               "stopped without a word: SIGKILL, the OOM killer, its node lost)")


def provisional_payload(ctx: RunContext) -> dict:
    """The record rank 0 writes as it claims its run folder, before anything can have been measured: what ran and
    where, status failed, why, `provisional`. Every way the run ends replaces it (the result, a failure's record,
    rank 1's for a lost rank 0); a rank 0 killed at any moment in between leaves it, never an empty folder."""
    cfg, launch = ctx.cfg, ctx.launch
    payload = results.envelope("training", ctx.run_id)
    payload.update(status="failed", error=PROVISIONAL, provisional=True, run_name=cfg.run_name,
                   workload=workload_record(ctx), config=cfg.to_dict(), launch=launch.record([], []),
                   timing=record.Timing(steps=0, timed_steps=0), metrics={}, versions=results.versions(),
                   slurm=slurm_env.job_record(), ranks=[])
    return payload


def workload_record(ctx: RunContext) -> record.Workload:
    """What the run computed: the config's workload fields and what the build derived from them."""
    cfg, wl = ctx.cfg, ctx.workload
    built = ({"describe": wl.describe, "params": wl.n_params, "trainable_params": wl.trainable_params,
              "tokens_per_sample": wl.tokens_per_sample} if wl else
             {"describe": cfg.model})  # a run that failed before the build
    return record.Workload(**cfg.workload(), **built, batch_per_device=ctx.batch,
                           global_batch=ctx.samples_per_step)  # per optimizer step


def hyperparameters(ctx: RunContext) -> dict:
    """What a logger records as the run's hyperparameters: the workload and the launch (rank 0's view: the other
    ranks' devices and hosts are known only at the end, in the result)."""
    launch = {k: v for k, v in record.plain(ctx.launch.record([], [])).items()
              if k not in ("device_names", "hostnames")}
    return {"run_id": ctx.run_id, "run_name": ctx.cfg.run_name, "workload": record.plain(workload_record(ctx)),
            "launch": {**launch, "threads": torch.get_num_threads(), "logger": ctx.cfg.logger}}


def memory_record(ctx: RunContext, per_rank: list[dict]) -> dict:
    """The workload's estimated tensor memory per device (WorkloadSpec.memory, without its fixed overhead: the GPT's
    is sharded under --strategy fsdp; null where it declares none) and the peak the ranks' caching allocators
    measured (GPU): the self-check compares them."""
    estimate, model = None, workloads.get(ctx.cfg.model).memory
    if model is not None:
        # the tensors only: torch's allocated peak leaves out the CUDA context and NCCL's buffers (the overhead)
        estimate = model.estimate(ctx.cfg, ctx.batch, ctx.launch.world_size, overhead=0).total
    peaks = [r.get("peak_memory_bytes") for r in per_rank if r.get("peak_memory_bytes")]
    return {"estimate_bytes": estimate, "peak_allocated_bytes": max(peaks) if peaks else None}


def throughput(ctx: RunContext, summary: record.Timing, per_rank: list[dict]) -> dict:
    """Achieved TFLOP/s per device from the FLOPs per sample (analytic, or counted: flops_from); MFU only where the
    datasheet table knows the device's peak, else `peak_note` says why there is none (the report prints it beside
    MFU's "—")."""
    flops = ctx.workload.flops_per_sample if ctx.workload else None
    source = {"flops_from": ctx.workload.flops_from} if ctx.workload else {}
    if not flops or not summary.samples_per_s:
        return {"flops_per_sample": flops, **source, "tflops_per_device": None, "peak_tflops": None, "mfu": None}
    achieved = flops * summary.samples_per_s / ctx.launch.world_size / 1e12
    peak, note = None, None  # on CPU the report says it itself
    if ctx.launch.accelerator == "gpu":
        peak, note = perfmodel.peak_or_reason(per_rank[0]["device_name"], ctx.cfg.precision)
    return {"flops_per_sample": flops, **source, "tflops_per_device": achieved, "peak_tflops": peak,
            "mfu": perfmodel.mfu(achieved, peak), **({"peak_note": note} if note else {})}


def _num(value):
    return None if value is None else float(value)
