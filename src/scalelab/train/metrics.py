"""Per-step curves for `--logger`: the step timer's own figures, handed to Lightning's loggers, one row per step.

Nothing is measured twice: the callback reads what timing.StepTimer has already read off the device clock (every
step on CPU, every SYNC_EVERY steps on a GPU, without a sync of its own), so logging adds a few dict operations per
step and never a device sync. Runs on rank 0 only; its loss is rank 0's shard's (the result averages the ranks).
"""

import statistics
from bisect import bisect_left

import lightning.pytorch as pl

from scalelab import results


class StepMetrics(pl.Callback):
    """One row per optimizer step: elapsed_s (sum of the step times so far: the run's training clock, warm-up and
    probes included, validation and start-up not), step_time_s, samples_per_s (tokens_per_s for a GPT),
    train_loss, allreduce_s (how long the all-reduce ran), comm_share (what the step waited for communication,
    over its time: the step's gradients-ready less the compute-only probes' median, 0 on one rank) and timed (1 when
    the step enters the result's figures: after warm-up, not a probe)."""

    def __init__(self, timer, samples_per_step: int, tokens_per_sample, world_size: int, hparams: dict):
        self.timer, self.samples, self.tokens = timer, samples_per_step, tokens_per_sample
        self.world_size, self.hparams = world_size, hparams
        self.batches = 0  # the timer's batches already turned into rows
        self.steps = 0  # its optimizer steps, likewise
        self.elapsed = 0.0
        self.computes = []  # gradients-ready of the probe steps so far: the step's compute alone
        self.compute = None  # their median (updated at a probe, not every step)

    def on_train_start(self, trainer, pl_module):
        for logger in trainer.loggers:
            logger.log_hyperparams(results.scrub(self.hparams))  # the project's secret filter, as for a result

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.flush(trainer)

    def on_train_end(self, trainer, pl_module):
        self.flush(trainer)  # the timer read its last steps in its own on_train_end (it runs first)

    def flush(self, trainer):
        """Log the optimizer steps the timer has read since the last call."""
        t = self.timer
        ends = t.step_ends  # the batch that ended each optimizer step, as the timer read them
        while self.steps < len(ends) and ends[self.steps] < len(t.step_times):
            first, last = self.batches, ends[self.steps]
            row = self.row(self.steps, first, last)
            self.batches, self.steps = last + 1, self.steps + 1
            for logger in trainer.loggers:
                logger.log_metrics(row, step=self.steps - 1)

    def row(self, step: int, first: int, last: int) -> dict:
        t = self.timer
        took = sum(t.step_times[first:last + 1])
        ready = sum(t.step_times[first:last]) + t.grads_ready[last]
        self.elapsed += took
        at = bisect_left(t.probe_steps, step)  # probe_steps: ascending
        probe = at < len(t.probe_steps) and t.probe_steps[at] == step
        if probe:
            self.computes.append(ready)
            self.compute = statistics.median(self.computes)
        waited = max(0.0, ready - self.compute) if self.compute is not None and not probe else None
        row = {"elapsed_s": self.elapsed, "step_time_s": took, "allreduce_s": sum(t.comm_times[first:last + 1]),
               "comm_share": (0.0 if self.world_size == 1 else None if waited is None else waited / took) if took else
               None, "timed": int(step >= t.warmup_steps and not probe)}
        if took > 0:
            row["samples_per_s"] = self.samples / took
            if self.tokens:
                row["tokens_per_s"] = self.samples * self.tokens / took
        if len(t.losses) > last:  # one loss per batch; the step's is the mean of its batches'
            row["train_loss"] = sum(t.losses[first:last + 1]) / (last + 1 - first)
        return {k: v for k, v in row.items() if v is not None}
