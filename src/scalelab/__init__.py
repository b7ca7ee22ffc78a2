"""scalelab: how much faster does the same training job get on 1 GPU, one node, several nodes, and why not more."""

__version__ = "0.1.0"
