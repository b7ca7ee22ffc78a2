"""`--logger`: which of Lightning's own loggers records the run's curves, and whether it can, said before training.

csv (the default) needs nothing beyond Lightning and writes into the run's own folder, so every run has its curves
without a service. tensorboard needs the tensorboard (or tensorboardX) package; wandb and comet need their package
and an API key in the environment (WANDB_API_KEY, COMET_API_KEY): the service's client reads it from there, and
scalelab never passes it on or writes it anywhere. What is missing is said in one line before any process starts.
Only rank 0 gets a logger: the other ranks' curves would repeat its own.

The MPCDF tutorial's Comet flags (--comet_api_key, --comet_project, --comet_workspace, --experiment_name) are
accepted as they are (config_flags.py: they choose --logger comet, and a key given that way is moved into
COMET_API_KEY, where comet_ml reads it); here the key flag is dropped from the command line the other local ranks and
submitted jobs get (without_key): it is never a setting of the run, so no result, hyperparameter or log can hold it.
"""

import importlib.util
import os
import warnings

from scalelab.config_flags import COMET_SETTINGS, KEY_FLAG, PROJECT
from scalelab.errors import UsageError

# logger: (packages, any one of which will do; the environment variable its key is read from, if it needs one)
NEEDS = {"tensorboard": (("tensorboard", "tensorboardX"), None), "wandb": (("wandb",), "WANDB_API_KEY"),
         "comet": (("comet_ml",), "COMET_API_KEY")}


def check(name: str, environ=None, cfg=None):
    """Refuse, in one line, a logger whose package or key is missing (before any process group starts); cfg: the
    run's config, to name the tutorial's flags that chose comet."""
    environ = os.environ if environ is None else environ
    if name not in NEEDS:
        return
    packages, key = NEEDS[name]
    via = [f"--{s}" for s in COMET_SETTINGS if name == "comet" and getattr(cfg, s, None) is not None]
    what = f"--logger {name}" + (f" (chosen by {', '.join(via)})" if via else "")
    if not any(importlib.util.find_spec(p) for p in packages):
        raise UsageError(f"{what} needs the {' or '.join(packages)} package, which is not installed: "
                         f"pip install {packages[0]}, or use --logger csv (no package, no service)")
    if key and not environ.get(key):
        raise UsageError(f"{what} reads its API key from the environment variable {key}, which is not set: "
                         f"export it in the job's environment (scalelab never writes it anywhere), or use --logger csv")


def without_key(argv: list) -> list:
    """argv less --comet_api_key and its value (also as --comet_api_key=K, or abbreviated as argparse allows)."""
    out, skip = [], False
    for word in argv:
        flag = word.split("=", 1)[0]
        if skip or (len(flag) > len("--comet_") and KEY_FLAG.startswith(flag)):
            skip = not skip and "=" not in word
            continue
        out.append(word)
    return out


def wants_folder(name: str) -> bool:
    """Loggers that write into the run's folder: it must exist from the start of the run, not only at its end."""
    return name in ("csv", "tensorboard", "wandb")


def build(name: str, folder: str, run_id: str, comet=None):
    """Lightning's logger for this run on rank 0 (None for --logger none); its files go into the run folder.
    comet: the run's config, for its comet_project, comet_workspace and experiment_name (else scalelab, the
    default workspace and the run id)."""
    if name == "none":
        return None
    from lightning.pytorch import loggers

    if name == "csv":  # name="" and version="": folder/metrics.csv and folder/hparams.yaml, no version_N level
        # the run's folder already holds its provisional result.json (train/payload.py): Lightning warns of a folder
        # that is not empty, and removes nothing but an old metrics.csv of its own
        warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty")
        return loggers.CSVLogger(folder, name="", version="")
    if name == "tensorboard":
        return loggers.TensorBoardLogger(folder, name="", version="", default_hp_metric=False)
    if name == "wandb":  # the key: wandb's client reads WANDB_API_KEY itself
        return loggers.WandbLogger(name=run_id, save_dir=folder, project=PROJECT)
    # the key: comet_ml reads COMET_API_KEY itself
    return loggers.CometLogger(project=getattr(comet, "comet_project", None) or PROJECT,
                               workspace=getattr(comet, "comet_workspace", None),
                               name=getattr(comet, "experiment_name", None) or run_id)
