"""A user's own model as a scalelab workload, in one file: a small CNN on synthetic 16x16 images.

scalelab finds it one of two ways, then `--model tiny-cnn` runs it at any scale like its own workloads:

    pip install -e examples/tiny_cnn                 # its entry point (pyproject.toml, group scalelab.workloads)
    SCALELAB_WORKLOADS=tiny_cnn:SPEC PYTHONPATH=examples/tiny_cnn python src/train.py --model tiny-cnn ...

The declaration (SPEC) imports no torch: scalelab reads every flag before torch loads; `build` imports it when a
run starts. A workload gives a LightningModule whose training_step returns the loss (a scalar tensor) and whose
configure_optimizers returns a torch optimizer, and a training set of (input, label) batches. FLOPs per sample and
a memory estimate are optional: without FLOPs each run counts them with torch's FLOP counter on one step (the
result's timing.flops_from says so); without an estimate nothing is checked before the ranks start.
"""

from scalelab.entry import bounded
from scalelab.workloads import Option, Workload, WorkloadSpec


def build(cfg, batch_per_device: int, world_size: int) -> Workload:
    import lightning.pytorch as pl
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import TensorDataset

    class TinyCNN(pl.LightningModule):
        def __init__(self, width: int, learning_rate: float):
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                nn.Flatten(), nn.Linear(2 * width, 10))
            self.learning_rate = learning_rate

        def training_step(self, batch, batch_idx):
            images, labels = batch
            return F.cross_entropy(self.net(images), labels)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.learning_rate, momentum=0.9)

    module = TinyCNN(cfg.width, cfg.learning_rate)
    # enough images for every rank to reach max_steps in one epoch; seeded: the same set at every scale
    steps = (cfg.max_steps or 100) * cfg.accumulate_grad_batches
    n = cfg.num_samples or steps * batch_per_device * world_size
    g = torch.Generator().manual_seed(cfg.seed)
    images, labels = torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)
    return Workload(module=module, train_set=TensorDataset(images, labels), val_set=None,
                    n_params=sum(p.numel() for p in module.parameters()), tokens_per_sample=0,
                    describe=f"tiny-cnn w{cfg.width}", flops_per_sample=None,
                    trainable_params=sum(p.numel() for p in module.parameters() if p.requires_grad))


SPEC = WorkloadSpec(
    name="tiny-cnn",
    help="tiny-cnn: a user's small CNN on synthetic 16x16 images (examples/tiny_cnn)",
    defaults={"batch_size": 32, "learning_rate": 0.01, "max_epochs": None, "max_steps": 30},
    options=(Option("width", 16, {"type": bounded(int, 1, 4096, "channels"),
                                  "help": "channels of the first convolution (tiny-cnn)"}),),
    identity=("width",),
    build=build,
)
