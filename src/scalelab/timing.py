"""Time every training step honestly, on every rank, and gather the figures on rank 0.

A step is measured from the end of the previous one (so data loading, forward, backward,
gradient all-reduce and the optimizer all count), after synchronising the device: CUDA
kernels run asynchronously and a clock read without a sync times the launch, not the work.
Validation and the first `warmup_steps` steps never enter a timing figure.
"""

import statistics
import time

import lightning.pytorch as pl
import torch


def _sync(trainer):
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize(trainer.strategy.root_device)


class StepTimer(pl.Callback):
    def __init__(self, warmup_steps: int, process_start: float):
        self.warmup_steps = warmup_steps
        self.process_start = process_start  # wall clock (time.time) when this process started
        self.step_times = []  # seconds, every step including warm-up
        self.losses = []
        self.epoch_times = []
        self.first_step_end = None  # wall clock
        self.train_start = None
        self.per_rank = None  # filled on every rank by gather(); rank 0 writes it
        self._last = None
        self._epoch_start = None

    def on_train_start(self, trainer, pl_module):
        _sync(trainer)
        self.train_start = time.time()

    def on_train_epoch_start(self, trainer, pl_module):
        _sync(trainer)
        self._epoch_start = self._last = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        _sync(trainer)
        now = time.perf_counter()
        self.step_times.append(round(now - self._last, 6))  # 1 us: far below run-to-run noise
        self._last = now
        if self.first_step_end is None:
            self.first_step_end = time.time()
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.losses.append(float(f"{float(loss.detach()):.6g}"))

    def on_validation_end(self, trainer, pl_module):
        # Mid-epoch validation must not be billed to the next training step.
        _sync(trainer)
        self._last = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        self.epoch_times.append(self._last - self._epoch_start)

    def on_train_end(self, trainer, pl_module):
        self.per_rank = gather(self.rank_record(trainer))

    def rank_record(self, trainer) -> dict:
        from scalelab import cluster

        return {
            "rank": trainer.global_rank,
            "local_rank": trainer.local_rank,
            "node_rank": trainer.node_rank,
            "host": cluster.hostname(),
            "device": str(trainer.strategy.root_device),
            "device_name": cluster.device_name(trainer.strategy.root_device.type.replace("cuda", "gpu"),
                                               trainer.local_rank),
            "threads": torch.get_num_threads(),
            "process_start": self.process_start,
            "first_step_end": self.first_step_end,
            "step_times_s": self.step_times,
            "epoch_times_s": self.epoch_times,
            "losses": self.losses,
        }


def gather(record: dict) -> list:
    """All ranks' records, ordered by rank (every rank must call this)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [record]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, record)
    return sorted(out, key=lambda r: r["rank"])


def summarize(per_rank: list, warmup_steps: int, samples_per_step: int, tokens_per_sample: int) -> dict:
    """Run-level figures from per-rank step times.

    DDP steps end together (the all-reduce is a barrier), so the slowest rank sets the pace:
    a step's time is the max over ranks, and throughput counts every rank's samples.
    """
    steps = min(len(r["step_times_s"]) for r in per_rank)
    timed = [max(r["step_times_s"][i] for r in per_rank) for i in range(warmup_steps, steps)]
    train_time = sum(timed)
    samples = samples_per_step * len(timed)
    rank0 = per_rank[0]
    tail = max(1, steps // 10)
    final_losses = [statistics.fmean(r["losses"][-tail:]) for r in per_rank if r["losses"]]
    out = {
        "warmup_steps": warmup_steps,
        "steps": steps,
        "timed_steps": len(timed),
        "train_time_s": train_time,
        "step_time_s": _stats(timed),
        "samples_per_step": samples_per_step,
        "samples_per_s": samples / train_time if train_time > 0 else None,
        "tokens_per_s": samples * tokens_per_sample / train_time if tokens_per_sample and train_time > 0 else None,
        "epoch_times_s": rank0["epoch_times_s"],
        "time_to_first_step_s": (rank0["first_step_end"] - rank0["process_start"]) if rank0["first_step_end"] else None,
        "final_train_loss": statistics.fmean(final_losses) if final_losses else None,
    }
    return out


def _stats(values):
    if not values:
        return None
    q = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "min": min(values), "max": max(values), "p90": q[8]}

