"""The loop itself (train/loop.py), in this process on one CPU device through Lightning Fabric: where a step ends,
where the ranks meet, and what a signal does at the run's end."""

import pytest
import torch
from lightning.fabric import Fabric

from helpers import run_script
from scalelab.train import loop
from scalelab.train.clock import StepClock
from scalelab.train.comm import CommTimer
from scalelab.train.guard.signals import RunSignals
from scalelab.train.probe import AloneProbe
from scalelab.workloads import data
from scalelab.workloads.nets.spiral_mlp import SpiralMLP

# Fabric's own detection, where srun is installed (train.py silences it in launch/cluster.py)
pytestmark = pytest.mark.filterwarnings("ignore:The `srun` command is available")


def probe():
    return AloneProbe(torch.device("cpu"), 1, CommTimer())


class Signalled:
    """A loader that notes SIGTERM (as the handler would) when batch `at` is fetched."""

    def __init__(self, loader, signals, at):
        self.loader, self.signals, self.at = loader, signals, at
        self.sampler = loader.sampler

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for i, batch in enumerate(self.loader):
            if i == self.at:
                self.signals.received["SIGTERM"] = True
            yield batch


def run(plan, batches=40, signal_at=None, average_over=1):
    """(what train returned, the clock, the signals) for the MLP over `batches` batches of 8; `average_over`: the
    ranks comm.attach would have the loss divided by."""
    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu", devices=1, precision="32")
    module = SpiralMLP([8], 0.0, 1e-3)
    model = fabric.setup_module(module)
    optimizer = fabric.setup_optimizers(module.configure_optimizers())
    loader = data.train_loader(data.spiral(batches * 8, 0.2, 0), 8, rank=0, world_size=1, seed=0)
    signals = RunSignals()
    clock = StepClock(torch.device("cpu"), 0.0, CommTimer())
    clock.comm.average_over = average_over
    if signal_at is not None:
        loader = Signalled(loader, signals, signal_at)
    return loop.train(fabric, model, optimizer, loader, plan, clock, probe(), signals), clock, signals


def test_a_signal_in_the_last_window_does_not_stop_a_run_that_has_finished():
    # sync points after step 1 and step 11; step 11 is the last: the run completes, nothing to requeue or stop
    stop, clock, _ = run(loop.Plan(max_steps=11, max_epochs=None, probe_every=0), signal_at=5)
    assert stop is None and clock.steps == 11
    # one step more: step 11 is a sync point before the end, and the ranks stop there
    stop, clock, _ = run(loop.Plan(max_steps=12, max_epochs=None, probe_every=0), signal_at=5)
    assert stop.reason == "SIGTERM" and stop.steps == 11 and clock.steps == 11


def test_accumulated_steps_end_on_every_kth_batch_and_the_epochs_short_last_one():
    plan = loop.Plan(max_steps=None, max_epochs=2, accumulate=3, probe_every=0)
    stop, clock, _ = run(plan, batches=10)  # per epoch: batches 3, 6, 9 end a step, and the 10th, a short one
    assert stop is None and plan.step == 8 and clock.steps == 8 and clock.batches == 20
    assert clock.step_ends == [2, 5, 8, 9, 12, 15, 18, 19] and len(clock.epoch_times) == 2


@pytest.mark.parametrize("accumulate,ranks", [(1, 1), (1, 4), (3, 1), (3, 2)])
def test_backward_gets_the_loss_divided_by_the_batches_and_the_ranks_it_is_summed_over(accumulate, ranks,
                                                                                       monkeypatch):
    """The collectives sum (comm.REDUCE_OP): a step's gradient is their mean only if every backward saw its loss
    divided by K batches and N ranks (N from comm.attach; Adam would hide an N-fold gradient)."""
    seen = []
    monkeypatch.setattr(Fabric, "backward", lambda self, loss, *a, **k: seen.append(loss.item()) or loss.backward())
    losses = []
    monkeypatch.setattr(StepClock, "batch_end", lambda self, loss, *a: losses.append(loss.item()))
    run(loop.Plan(max_steps=2, max_epochs=None, accumulate=accumulate, probe_every=0), average_over=ranks)
    assert len(seen) == len(losses) == 2 * accumulate
    assert seen == pytest.approx([loss / (accumulate * ranks) for loss in losses], rel=1e-6)


def test_sync_points_come_sooner_when_steps_are_long():
    clock = StepClock(torch.device("cpu"), 0.0, CommTimer())
    clock.step_times = [0.001] * 10
    assert clock.steps_within(loop.SYNC_SECONDS, loop.SYNC_EVERY) == loop.SYNC_EVERY
    clock.step_times = [2.0] * 10  # 2 s steps: meet every 2 steps, so a SIGTERM is acted on within ~5 s
    assert clock.steps_within(loop.SYNC_SECONDS, loop.SYNC_EVERY) == 2
    clock.step_times = [30.0]
    assert clock.steps_within(loop.SYNC_SECONDS, loop.SYNC_EVERY) == 1


@pytest.mark.slow
def test_too_few_samples_for_a_batch_is_one_line_before_anything_starts(tmp_path):
    proc = run_script("train.py", "--model", "gpt", "--num_samples", "4", "--output_dir", tmp_path,
                      timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "train.py: error: 4 training samples give each of the 1 rank(s) 4, less than one batch of 8: raise "
        "--num_samples or lower --batch_size"]


def gpt_run(precision, warmup_steps=2):
    """(the fingerprint of step warmup-1, the clock) of the tiny-shaped GPT on one CPU device through Fabric."""
    from scalelab.train.observe import StepObserver
    from scalelab.workloads.nets.transformer import GPTModule
    from scalelab.workloads.presets import TransformerShape

    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu", devices=1, precision=precision)
    module = GPTModule(TransformerShape(2, 4, 64, 32, 128), 1e-3)
    model = fabric.setup_module(module)
    optimizer = fabric.setup_optimizers(module.configure_optimizers())
    loader = data.train_loader(data.TokenSequences(64, 32, 128, 0), 4, rank=0, world_size=1, seed=0)
    seen = StepObserver(at=warmup_steps - 1)
    clock = StepClock(torch.device("cpu"), 0.0, CommTimer())
    plan = loop.Plan(max_steps=warmup_steps + 2, max_epochs=None, warmup_steps=warmup_steps, probe_every=0)
    loop.train(fabric, model, optimizer, loader, plan, clock, probe(), RunSignals(), seen=seen)
    return seen.record(), clock


def test_the_one_device_step_runs_under_the_runs_precision_as_n_devices_do():
    # Fabric leaves one device's module unwrapped, and its training_step then ran bare, in fp32 (lightning#16857):
    # the loop enters the precision itself, so the step's matmuls are bf16 at one device too
    seen, clock = gpt_run("bf16-mixed")
    assert seen["matmul_dtypes"] == ["bfloat16"] and seen["param_dtypes"] == ["float32"]
    assert seen["grad_dtypes"] == ["float32"] and seen["step"] == 1 and clock.steps == 4
    assert gpt_run("32")[0]["matmul_dtypes"] == ["float32"]


def test_validation_runs_under_the_runs_precision():
    class Probe(SpiralMLP):
        def validation_step(self, batch, batch_idx):
            self.autocast.append(torch.is_autocast_enabled("cpu"))
            return super().validation_step(batch, batch_idx)

    for precision, expected in (("bf16-mixed", True), ("32", False)):
        fabric = Fabric(accelerator="cpu", devices=1, precision=precision)
        module = Probe([8], 0.0, 1e-3)
        module.autocast = []
        model = fabric.setup_module(module)
        got = loop.validate(fabric, model, data.eval_loader(data.spiral(32, 0.2, 0), 8, 0, 1))
        assert module.autocast == [expected] * 4 and 0 <= got["val_acc"] <= 1


# --- two ranks, one with long steps: when they next meet ---------------------------------------------------


class _Slow:
    """A loader whose every batch takes `seconds` to fetch (a long step), noting SIGTERM at batch `signal_at`."""

    def __init__(self, loader, signals, seconds=0.0, signal_at=None):
        self.loader, self.signals, self.seconds, self.signal_at = loader, signals, seconds, signal_at
        self.sampler = loader.sampler

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        import time

        for i, batch in enumerate(self.loader):
            time.sleep(self.seconds)
            if i == self.signal_at:
                self.signals.received["SIGTERM"] = True
            yield batch


class _OneOfTwo:
    """Fabric on one CPU device, as rank `rank` of the two-rank group two_gloo_ranks formed: the loop's
    agreement all-reduces over that group (no DDP: each rank trains its own copy, they meet only to agree)."""

    world_size = 2

    def __init__(self, fabric):
        self._fabric = fabric

    def __getattr__(self, name):
        return getattr(self._fabric, name)


def _long_steps_rank(rank, out):
    """Rank 1's steps take 0.3 s, rank 0's a few ms; rank 0 alone gets SIGTERM, in step 6."""
    loop.SYNC_SECONDS = 0.5  # this spawned process's own module: rank 1 fits 1 step in it, rank 0 several
    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu", devices=1, precision="32")
    module = SpiralMLP([8], 0.0, 1e-3)
    model = fabric.setup_module(module)
    optimizer = fabric.setup_optimizers(module.configure_optimizers())
    signals = RunSignals()
    loader = data.train_loader(data.spiral(40 * 8, 0.2, 0), 8, rank=0, world_size=1, seed=0)
    loader = _Slow(loader, signals, seconds=0.3 if rank == 1 else 0.0, signal_at=5 if rank == 0 else None)
    met, agree = [], signals.agree

    def noted(device, world_size, steps, every):
        met.append((steps, every))
        return agree(device, world_size, steps, every)

    signals.agree = noted
    clock = StepClock(torch.device("cpu"), 0.0, CommTimer())
    plan = loop.Plan(max_steps=20, max_epochs=None, probe_every=0)
    stop = loop.train(_OneOfTwo(fabric), model, optimizer, loader, plan, clock, probe(), signals)
    out.put((rank, [steps for steps, _ in met], [every for _, every in met], stop and (stop.reason, stop.steps)))


@pytest.mark.slow
def test_one_ranks_long_steps_bring_every_ranks_next_meeting_forward_so_a_signal_is_acted_on_in_time():
    """Rank 1's 0.3 s steps fit once in SYNC_SECONDS (0.5 s here): it proposes to meet after every step, rank 0
    (ms steps) after several; the fewer win, on both ranks. Rank 0's SIGTERM in step 6 then stops both after step 6,
    not at the next meeting SYNC_EVERY steps on (the loop must pass its own proposal, and meet when agreed)."""
    from helpers import two_gloo_ranks

    got = dict((rank, rest) for rank, *rest in two_gloo_ranks(_long_steps_rank, timeout=120))
    for rank in (0, 1):
        met, proposed, stop = got[rank]
        assert met == [1, 2, 3, 4, 5, 6] and stop == ("SIGTERM", 6), (rank, got)
    assert all(every == 1 for every in got[1][1]) and got[0][1][0] > 1, got  # the proposals: 1 won over rank 0's
