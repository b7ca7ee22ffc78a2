"""The MLP workload, declared: `--model mlp`'s flags, defaults and identity, its FLOPs, and how a run builds it.

Torch-free until build(); the network is nets/spiral_mlp.py (the tutorial's spiral classifier), the data
data.spiral.
"""

from scalelab import perfmodel
from scalelab.entry import bounded, unit_fraction
from scalelab.workloads.spec import Option, Workload, WorkloadSpec


def build(cfg, batch_per_device: int, world_size: int) -> Workload:
    from torch import nn

    from scalelab.workloads import data
    from scalelab.workloads.nets.spiral_mlp import SpiralMLP

    module = SpiralMLP(cfg.hidden_dims, cfg.dropout, cfg.learning_rate)
    # 6 per weight (forward, input and weight gradient; biases and ReLU are elementwise). The standard 6N
    # convention: autograd skips the first layer's input gradient (the data needs none), 2*in*h1 fewer.
    weights = sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))
    train = data.spiral(cfg.num_samples, cfg.noise, cfg.seed)
    val = data.spiral(max(cfg.num_samples // 5, batch_per_device * world_size), cfg.noise, cfg.seed + 1)
    return Workload(
        module=module,
        train_set=train,
        val_set=val,
        n_params=sum(p.numel() for p in module.parameters()),
        tokens_per_sample=0,
        describe="mlp " + "-".join(map(str, cfg.hidden_dims)),
        flops_per_sample=perfmodel.dense_flops_per_sample(weights),
        trainable_params=sum(p.numel() for p in module.parameters() if p.requires_grad),
    )


SPEC = WorkloadSpec(
    name="mlp",
    help="mlp: spiral classifier",
    # the run length `--model mlp` and `--config mlp` (the demo, the CPU jobs, submit.py) share
    defaults={"batch_size": 64, "learning_rate": 1e-3, "max_epochs": 3, "max_steps": None, "num_samples": 20000},
    options=(
        Option("noise", 0.2, {"type": bounded(float, 0.0, 100.0, "spiral noise"), "help": "spiral noise (mlp)"}),
        Option("hidden_dims", [64, 32, 16], {"type": bounded(int, 1, 2**16, "units a layer"),
                                             "nargs": "+", "help": "hidden layer widths (mlp)"}),
        Option("dropout", 0.1, {"type": unit_fraction, "help": "dropout probability (mlp)"}),
    ),
    identity=("noise", "hidden_dims", "dropout"),
    build=build,
)
