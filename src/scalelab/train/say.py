"""What a run prints on rank 0: its first line (the job, the batch, the levers, where it runs) and its last (the
figures and the path of result.json), with the notes a participant should read beside them."""

import sys
from typing import Optional

from scalelab import config, fingerprint, record
from scalelab.entry import human_count
from scalelab.launch import cluster, cores
from scalelab.measure import cpushare


def started(cfg: config.RunConfig, launch: cluster.Launch, wl, batch: int, device: cores.Placement) -> None:
    print(banner(cfg, launch, wl, batch, device), flush=True)
    if device.warning:
        print(f"train.py: warning: {device.warning}; the result and the report say so", file=sys.stderr, flush=True)


def done(ctx, payload: dict, path: str, per_rank: list) -> None:
    """The completed run's line, and what the participant should know about its figures."""
    print(one_line_summary(payload["timing"], path), flush=True)
    ended = epochs_first(ctx.cfg, payload["timing"].steps) if not ctx.resumed_from else None
    if ended:
        print(f"scalelab: note: {ended}", flush=True)
    for line in fingerprint.asked_differences(record.plain(payload.get("fingerprint")), ctx.cfg.compile):
        print(f"scalelab: ! {line} (Dynamo fell back): these are not a compiled step's times, and the report "
              "gives the run no speedup", flush=True)
    busy = cpushare.contended(payload["timing"].had_cpu)
    if busy:
        print(f"scalelab: ! {busy} (host load {_load(per_rank)}); these times are slower than this "
              "hardware's: run again when it is quiet", flush=True)


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
    sharded = ", FSDP (sharded)" if cfg.strategy == "fsdp" else ""
    return (f"scalelab: {wl.describe} ({human_count(wl.n_params)} params){sharded}, {cfg.scaling} scaling, "
            f"{batches}, precision {cfg.precision}{levers} | {where} | launcher: {launch.launcher}")


def _load(per_rank: list) -> str:
    r = per_rank[0]
    return f"{r['load_avg']:g} on {r['host_cores']} cores" if r.get("load_avg") is not None else "unknown"


def one_line_summary(t: record.Timing, path: str) -> str:
    """The completed run's line from its timing block."""
    if not t.samples_per_s:  # a requeued job resumed at its very end: nothing was left to time
        return f"scalelab: done in {t.whole_run_s:.1f} s, no step timed -> {path}"
    thr = f"{t.tokens_per_s:,.0f} tokens/s" if t.tokens_per_s else f"{t.samples_per_s:,.0f} samples/s"
    return (f"scalelab: done in {t.whole_run_s:.1f} s (train {t.train_time_s:.2f} s over "
            f"{t.timed_steps} timed steps, {t.step_s['median'] * 1e3:.1f} ms/step median, {thr}) -> {path}")


def epochs_first(cfg, steps: int) -> Optional[str]:
    """Given both run lengths, the epochs can end a run before its --max_steps: say which one did."""
    if cfg.max_steps and cfg.max_epochs and steps < cfg.max_steps:
        return (f"--max_epochs {cfg.max_epochs} ended the run at step {steps}, before --max_steps {cfg.max_steps} "
                "(give only --max_steps to train that many steps)")
    return None
