"""The network of `--model mlp`: the tutorial's MLP, a LightningModule classifying 2-D spirals (little compute, so
communication shows). workloads/mlp.py declares the workload and builds it."""

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from scalelab.workloads.nets import fused_optimizer


class SpiralMLP(pl.LightningModule):
    def __init__(self, hidden_dims, dropout: float, learning_rate: float, num_classes: int = 2):
        super().__init__()
        layers, width = [], 2
        for h in hidden_dims:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)
        self.learning_rate = learning_rate

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        """Sums over the batch, not means: the loop adds them over batches and ranks, then divides once."""
        x, y = batch
        logits = self(x)
        return {"val_loss": F.cross_entropy(logits, y, reduction="sum"), "val_acc": (logits.argmax(-1) == y).sum()}

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate, fused=fused_optimizer(self.device))
