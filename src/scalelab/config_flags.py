"""The train.py flags of three groups: the levers (what DDP does with the gradients), the launch (where and how a
run starts and writes; none changes what it computes) and the MPCDF tutorial's Comet flags. config.build_parser adds
them; config owns the rest (defaults, YAML, replays, validation).

The tutorial's Comet flags are accepted as they are, so its job lines and config file run unchanged: they choose
--logger comet (tutorial_comet); a key given by --comet_api_key goes into COMET_API_KEY, where comet_ml reads it,
and train/loggers.without_key drops it from every command line scalelab hands on."""

import argparse
import os

from scalelab.entry import ACCUMULATE, BUCKET_MB, DEVICES, NODES, THREADS, TIMEOUT_S, label

LOGGERS = ("csv", "tensorboard", "wandb", "comet", "none")  # --logger: Lightning's loggers (train/loggers.py)
PROJECT = "scalelab"  # the wandb / comet project runs land in
COMET_SETTINGS = ("comet_project", "comet_workspace", "experiment_name")  # the tutorial's, kept in the run's config
KEY_FLAG = "--comet_api_key"  # the tutorial's key flag: taken, never kept
KEY_WARNING = (f"{KEY_FLAG} puts the key where others can read it (ps, SLURM's accounting, a config file); the "
               "environment variable COMET_API_KEY is safer: export it in the job's environment instead")


def comm_hook_type(text: str) -> str:
    """--comm_hook: none, fp16, bf16 or powersgd[:RANK] (PyTorch's DDP communication hooks)."""
    name, _, rank = text.partition(":")
    if name in ("none", "fp16", "bf16") and not rank:
        return name
    if name == "powersgd" and (not rank or (rank.isdigit() and int(rank) > 0)):
        return f"powersgd:{rank or 1}"
    raise argparse.ArgumentTypeError(f"expected none, fp16, bf16 or powersgd[:RANK], got {text!r}")


# pragma: no mutate start (flag definitions and --help text)
def levers(g):
    g.add_argument("--strategy", choices=("ddp", "fsdp"),
                   help="ddp: a full replica per device, gradients all-reduced (default); fsdp: parameters, gradients "
                        "and optimizer state sharded over the devices (PyTorch FSDP2), each block all-gathered as it "
                        "runs and its gradients reduce-scattered")
    g.add_argument("--accumulate_grad_batches", type=ACCUMULATE,
                   help="K batches per optimizer step: one all-reduce per K (DDP's no_sync for the others); the "
                        "global batch grows K-fold")
    g.add_argument("--comm_hook", type=comm_hook_type,
                   help="compress the gradients on the wire: none, fp16 or bf16 (half the bytes), powersgd[:RANK] "
                        "(low-rank, (m+n)*RANK per m x n matrix); changes the optimisation too")
    g.add_argument("--bucket_cap_mb", type=BUCKET_MB, help="DDP's gradient bucket size (MB)")
    g.add_argument("--static_graph", action="store_true", default=None,
                   help="tell DDP the set of used parameters never changes (skips per-step bookkeeping); not with "
                        "--accumulate_grad_batches > 1")


def launch(lg):
    """Where and how the run is launched and recorded: none of these changes what it computes."""
    lg.add_argument("--devices", type=DEVICES,
                    help="processes (GPUs) per node; default: SLURM tasks per node, else 1")
    lg.add_argument("--num_nodes", type=NODES, help="default: SLURM's node count, else 1")
    lg.add_argument("--accelerator", choices=("auto", "cpu", "gpu"),
                    help="auto: GPUs with NCCL when visible, else CPU with gloo")
    lg.add_argument("--threads", type=THREADS,
                    help="on CPU, the cores of one device: each rank runs this many threads pinned to its own cores "
                         "(default 1, or SLURM's --cpus-per-task)")
    lg.add_argument("--oversubscribe", action="store_true", default=None,
                    help="run even when devices x threads exceed the node's cores (flagged in the result and report)")
    lg.add_argument("--timeout", type=TIMEOUT_S,
                    help="seconds a rank waits for the others (start-up and collectives) before the run fails")
    lg.add_argument("--output_dir", help="results land in OUTPUT_DIR/<run_id>/result.json")
    lg.add_argument("--run_name", type=label("a run name"), help="a label stored in the result and its run id")
    lg.add_argument("--logger", choices=LOGGERS,
                    help="Lightning's logger for the per-step curves (rank 0): csv writes OUTPUT_DIR/<run_id>/"
                         "metrics.csv; tensorboard, wandb and comet need their package, wandb and comet their API key "
                         "in the environment (docs/06)")
    lg.add_argument("--verbose", action="store_true", default=None, help="show Lightning's own messages")


def comet(g):
    g.add_argument("--comet_project", type=label("a Comet project"), help=f"the Comet project (default: {PROJECT})")
    g.add_argument("--comet_workspace", type=label("a Comet workspace"),
                   help="the Comet workspace (default: your default workspace)")
    g.add_argument("--experiment_name", type=label("a Comet experiment name"),
                   help="the Comet experiment's name (default: the run id)")
    g.add_argument("--comet_api_key", metavar="KEY", help="accepted with a warning: the environment variable "
                   "COMET_API_KEY is safer; never written anywhere")


# pragma: no mutate end
def tutorial_comet(settings: dict, key=None, environ=None) -> list:
    """The MPCDF tutorial's Comet flags in `settings` (given ones, command line over config file) choose
    --logger comet unless a --logger is given; `key` (its --comet_api_key) goes into `environ` and nowhere else.
    Returns the one-line warnings to show."""
    environ = os.environ if environ is None else environ
    said = [KEY_WARNING] if key else []
    given = [f"--{name}" for name in COMET_SETTINGS if settings.get(name) is not None] + ([KEY_FLAG] if key else [])
    if not given:
        return said
    chosen = settings.setdefault("logger", "comet")
    if chosen != "comet":  # --logger csv beside the tutorial's config file: run without Comet, and say so
        for name in COMET_SETTINGS:
            settings.pop(name, None)
        return said + [f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --logger comet only: "
                       f"not used with --logger {chosen}"]
    if key:
        environ["COMET_API_KEY"] = key
    return said
