"""`--logger`: which of Lightning's own loggers records the run's curves, and whether it can, said before training.

csv (the default) needs nothing beyond Lightning and writes into the run's own folder, so every run has its curves
without a service. tensorboard needs the tensorboard (or tensorboardX) package; wandb and comet need their package
and an API key in the environment (WANDB_API_KEY, COMET_API_KEY): the service's client reads it from there, and
scalelab never passes it on or writes it anywhere. What is missing is said in one line before any process starts.
Only rank 0 gets a logger: the other ranks' curves would repeat its own.
"""

import importlib.util
import os

from scalelab.errors import UsageError

LOGGERS = ("csv", "tensorboard", "wandb", "comet", "none")
METRICS_FILE = "metrics.csv"  # CSVLogger's file in the run folder (the report's loss plot reads it)
# logger: (packages, any one of which will do; the environment variable its key is read from, if it needs one)
NEEDS = {"tensorboard": (("tensorboard", "tensorboardX"), None), "wandb": (("wandb",), "WANDB_API_KEY"),
         "comet": (("comet_ml",), "COMET_API_KEY")}
PROJECT = "scalelab"  # the wandb / comet project runs land in


def check(name: str, environ=None):
    """Refuse, in one line, a logger whose package or key is missing (before any process group starts)."""
    environ = os.environ if environ is None else environ
    if name not in NEEDS:
        return
    packages, key = NEEDS[name]
    if not any(importlib.util.find_spec(p) for p in packages):
        raise UsageError(f"--logger {name} needs the {' or '.join(packages)} package, which is not installed: "
                         f"pip install {packages[0]}, or use --logger csv (no package, no service)")
    if key and not environ.get(key):
        raise UsageError(f"--logger {name} reads its API key from the environment variable {key}, which is not set: "
                         f"export it in the job's environment (scalelab never writes it anywhere), or use --logger csv")


def wants_folder(name: str) -> bool:
    """Loggers that write into the run's folder: it must exist from the start of the run, not only at its end."""
    return name in ("csv", "tensorboard", "wandb")


def build(name: str, folder: str, run_id: str):
    """Lightning's logger for this run on rank 0 (None for --logger none); its files go into the run folder."""
    if name == "none":
        return None
    from lightning.pytorch import loggers

    if name == "csv":  # name="" and version="": folder/metrics.csv and folder/hparams.yaml, no version_N level
        return loggers.CSVLogger(folder, name="", version="")
    if name == "tensorboard":
        return loggers.TensorBoardLogger(folder, name="", version="", default_hp_metric=False)
    if name == "wandb":  # the key: wandb's client reads WANDB_API_KEY itself
        return loggers.WandbLogger(name=run_id, save_dir=folder, project=PROJECT)
    return loggers.CometLogger(project=PROJECT, name=run_id)  # the key: comet_ml reads COMET_API_KEY itself
