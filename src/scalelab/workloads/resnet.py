"""ResNet-50, declared: `--model resnet50`, the model most published data-parallel measurements use (chapter 12).

The network is torchvision's ResNet-50 layer for layer (nets/resnet50.py says why it is scalelab's copy), trained
from its initialisation on synthetic ImageNet-shaped batches: 3 x image_size² images of a seeded pool, a label
drawn for each. Its FLOPs per sample are counted by torch on one step (train/flopcount.py), not written as a
formula: at 224² the forward is torchvision's 4.09 G multiply-adds, counted as 2 FLOPs each (8.2 GFLOPs; a
training step 3 times that, less the first convolution's input gradient, which nothing needs). A step's wire bytes
are its 25.6 M parameters' gradients. Torch-free until build().
"""

from scalelab.entry import bounded
from scalelab.workloads.spec import Option, Workload, WorkloadSpec

POOL = 64  # distinct images; sample i is image i % POOL: collating a batch costs what real decoded images cost


def build(cfg, batch_per_device: int, world_size: int) -> Workload:
    import lightning.pytorch as pl
    import torch
    import torch.nn.functional as F

    from scalelab.workloads.data import ImagePool
    from scalelab.workloads.nets.resnet50 import ResNet50 as Net

    class ResNet50(pl.LightningModule):
        def __init__(self, num_classes: int, learning_rate: float):
            super().__init__()
            self.net = Net(num_classes)
            self.learning_rate = learning_rate

        def training_step(self, batch, batch_idx):
            images, labels = batch
            return F.cross_entropy(self.net(images), labels)

        def configure_optimizers(self):  # torchvision's reference recipe: SGD, momentum 0.9, weight decay 1e-4
            return torch.optim.SGD(self.parameters(), lr=self.learning_rate, momentum=0.9, weight_decay=1e-4)

    module = ResNet50(cfg.num_classes, cfg.learning_rate)
    params = sum(p.numel() for p in module.parameters())
    return Workload(
        module=module,
        train_set=ImagePool(cfg.num_samples, cfg.image_size, cfg.num_classes, POOL, cfg.seed),
        val_set=None,
        n_params=params,
        tokens_per_sample=0,
        describe=f"resnet50 {cfg.image_size}px",
        flops_per_sample=None,  # counted on one step (train/flopcount.py)
        trainable_params=sum(p.numel() for p in module.parameters() if p.requires_grad),
    )


SPEC = WorkloadSpec(
    name="resnet50",
    help="resnet50: ResNet-50 (torchvision's layers) on synthetic ImageNet-shaped images",
    # 32 images a device, as torchvision's reference recipe (-b 32 per GPU); a short run: every step is ~4 GMACs each
    # learning rate: the reference recipe's 0.1 (for 256 images, with 5 warm-up epochs) diverges in a few steps on
    # synthetic images; 1e-3 lets the loss fall. A step costs the same at any rate.
    defaults={"batch_size": 32, "learning_rate": 1e-3, "max_epochs": None, "max_steps": 30, "num_samples": 8192},
    options=(
        Option("image_size", 224, {"type": bounded(int, 32, 1024, "pixels a side"),
                                   "help": "image side (resnet50; 224 as ImageNet's published runs, less on a CPU)"}),
        Option("num_classes", 1000, {"type": bounded(int, 2, 100_000, "classes"),
                                     "help": "classes of the last layer (resnet50; 1000 as ImageNet)"}),
    ),
    identity=("image_size", "num_classes"),
    build=build,
    gpu_precision="bf16-mixed",  # as the GPT's; --precision 32 for the fp32/TF32 rows of published tables
)
