"""Per-step curves for `--logger`: the step clock's own figures, handed to Lightning's loggers, one row per step.

Nothing is measured twice: the rows are made from what the step clock (train/clock.py) has already read off the
device clock, at the loop's sync point every SYNC_EVERY steps, without a sync of its own: logging adds a few dict
operations per step and never a device sync. Rank 0 only; its loss is rank 0's shard's (the result averages the
ranks).
"""

from bisect import bisect_left

from scalelab import redaction


class StepMetrics:
    """One row per optimizer step: elapsed_s (sum of the step times so far: the run's training clock, warm-up and
    probes included, validation and start-up not), step_s, samples_per_s (tokens_per_s for a GPT),
    train_loss, allreduce_s (how long the all-reduce ran), comm_share (what rank 0 waited for communication in the
    step, over its time: gradients-ready less the end of its backward's compute; 0 on one rank, none in a probe) and
    timed (1 when the step enters the result's figures: after warm-up, not a probe)."""

    def __init__(self, clock, loggers: list, samples_per_step: int, tokens_per_sample, world_size: int,
                 warmup_steps: int):
        self.clock, self.loggers, self.samples, self.tokens = clock, loggers, samples_per_step, tokens_per_sample
        self.world_size, self.warmup_steps = world_size, warmup_steps
        self.batches = 0  # the clock's batches already turned into rows
        self.steps = 0  # its optimizer steps, likewise
        self.elapsed = 0.0

    def log_hyperparams(self, hparams: dict):
        for logger in self.loggers:
            logger.log_hyperparams(redaction.scrub(hparams))  # the project's secret filter, as for a result

    def flush(self):
        """Log the optimizer steps the clock has read since the last call."""
        t = self.clock
        ends = t.step_ends  # the batch that ended each optimizer step, as the clock read them
        while self.steps < len(ends) and ends[self.steps] < len(t.step_times):
            first, last = self.batches, ends[self.steps]
            row = self.row(self.steps, first, last)
            self.batches, self.steps = last + 1, self.steps + 1
            for logger in self.loggers:
                logger.log_metrics(row, step=self.steps - 1)

    def finish(self, values: dict, status: str):
        """The rows left, the run's closing values (validation), and the loggers' own end (CSV: the file flushed)."""
        self.flush()
        for logger in self.loggers:
            if values:
                logger.log_metrics(values, step=self.steps)
            logger.finalize(status)

    def row(self, step: int, first: int, last: int) -> dict:
        t = self.clock
        took = sum(t.step_times[first:last + 1])
        self.elapsed += took
        at = bisect_left(t.probe_steps, step)  # probe_steps: ascending
        probe = at < len(t.probe_steps) and t.probe_steps[at] == step
        waited = None if probe else max(0.0, t.ready_times[last] - t.backward_times[last])
        row = {"elapsed_s": self.elapsed, "step_s": took, "allreduce_s": sum(t.comm_times[first:last + 1]),
               "comm_share": (0.0 if self.world_size == 1 else None if waited is None else waited / took) if took else
               None, "timed": int(step >= self.warmup_steps and not probe)}
        if took > 0:
            row["samples_per_s"] = self.samples / took
            if self.tokens:
                row["tokens_per_s"] = self.samples * self.tokens / took
        if len(t.losses) > last:  # one loss per batch; the step's is the mean of its batches'
            row["train_loss"] = sum(t.losses[first:last + 1]) / (last + 1 - first)
        return {k: v for k, v in row.items() if v is not None}
