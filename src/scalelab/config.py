"""Every knob of a training run, in one place: flags, YAML defaults, presets, validation.

The same flags describe the job at every scale; only `--devices`/`--num_nodes` (or the launcher: srun, torchrun)
change between the 1-, 4- and 8-GPU runs of a scaling group. Precedence: built-in default < `--config` < command
line. `--config` takes a YAML file, a named config shipped in the package (configs/: the workloads the demo, the
sbatch scripts and the sweep run, one source) or a result.json (re-run exactly that run).
"""

import argparse
import copy
import dataclasses
import functools
import os
import sys
from dataclasses import asdict, dataclass, field, make_dataclass
from typing import Any, Optional

from scalelab import config_flags, record, upgrades, workloads
from scalelab.entry import LEARNING_RATE, STEPS, WORKERS, OneLineParser, bounded, env_rank, prog_name
from scalelab.errors import UsageError

PRECISIONS = ("32", "bf16-mixed", "16-mixed")
CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")

# What the computation is: identical across a scaling group (each workload adds its own `identity` options).
# Launch fields (devices, nodes, threads, output_dir, seed, ...) stay out so the 1-, 4- and 8-GPU runs group.
# The levers (train.py's flags for what DDP does with the gradients: config_flags.levers) are part of it: each
# setting is its own group. Their defaults are CommonConfig's (LEVER_DEFAULTS, below).
LEVERS = ("strategy", "accumulate_grad_batches", "comm_hook", "bucket_cap_mb", "static_graph")
WORKLOAD_FIELDS = ("model", "batch_size", "scaling", "learning_rate", "max_epochs", "max_steps", "warmup_steps",
                   "comm_probe_every", "precision", "compile", "num_samples", *LEVERS)
# What `--config outputs/<run>/result.json` takes from that run: what it computed (the workload fields, each
# workload's options) and its seed, each checked as its flag is. A result file is data: where and how a run
# launches and writes (output_dir, run_name, logger, devices, ...) is never taken from one, however a key is spelled.
REPLAYED_COMMON = WORKLOAD_FIELDS + ("seed",)


@dataclass
class CommonConfig:
    """The flags every workload shares; RunConfig adds each registered workload's own options as fields."""
    model: str = "mlp"
    num_samples: Optional[int] = None
    # optimisation and run length
    batch_size: Optional[int] = None
    learning_rate: Optional[float] = None
    max_epochs: Optional[int] = None
    max_steps: Optional[int] = None
    warmup_steps: Optional[int] = None  # None until for_accelerator: GPUs warm up longer (DDP's runtime statistics)
    comm_probe_every: int = 5
    scaling: str = "weak"
    precision: Optional[str] = None  # None until for_accelerator: it depends on the hardware the run got
    compile: bool = False
    seed: int = 42
    num_workers: int = 0
    # the levers: replicated (DDP) or sharded (FSDP), and what DDP does with the gradients
    strategy: str = "ddp"
    accumulate_grad_batches: int = 1
    comm_hook: str = "none"
    bucket_cap_mb: float = 25.0
    static_graph: bool = False
    # launch
    devices: Optional[int] = None
    num_nodes: Optional[int] = None
    accelerator: str = "auto"
    threads: Optional[int] = None
    oversubscribe: bool = False
    timeout: float = 180.0
    output_dir: str = "outputs"
    run_name: Optional[str] = None
    logger: str = "csv"
    comet_project: Optional[str] = None  # the MPCDF tutorial's Comet flags (config_flags.py); never its key
    comet_workspace: Optional[str] = None
    experiment_name: Optional[str] = None
    config: Optional[str] = None
    verbose: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def workload(self) -> dict:
        """The fields that define the computation, identical across a scaling group: the common ones, and the
        workload's own (WorkloadSpec.identity) under `options`."""
        return {**{k: getattr(self, k) for k in WORKLOAD_FIELDS},
                "options": {k: getattr(self, k) for k in workloads.get(self.model).identity}}

    def batch_per_device(self, world_size: int) -> int:
        """Weak scaling keeps the per-device batch; strong scaling splits a fixed global batch."""
        if self.scaling == "weak":
            return self.batch_size
        if self.batch_size % world_size:
            raise UsageError(f"--scaling strong splits the global --batch_size {self.batch_size} over {world_size} "
                             f"processes, which does not divide; use a multiple of {world_size}")
        return self.batch_size // world_size


# Each lever's default: what a run that did not set it ran, and what a result written before the lever existed is
# read as (the report's frames).
LEVER_DEFAULTS = {name: CommonConfig.__dataclass_fields__[name].default for name in LEVERS}

# Workloads declared outside scalelab join the registry here, before RunConfig and the parser are made from it: no
# option may take a common flag's name, the parser's own, or a field of the result's workload block.
COMMON = frozenset(f.name for f in dataclasses.fields(CommonConfig))
RESERVED = COMMON | {"help", "version", "print_config", "comet_api_key", "options"} | set(
    record.Workload.__struct_fields__)
workloads.admit(reserved=RESERVED, common=COMMON)


def _options():
    """(owning workload, Option) for every workload option, in registry order."""
    return [(spec.name, option) for spec in workloads.REGISTRY.values() for option in spec.options]


# One flat record, as result.json's config block stores it: cfg.preset, cfg.hidden_dims, ... beside the common fields.
RunConfig = make_dataclass(
    "RunConfig",
    [(o.name, Any, field(default_factory=functools.partial(copy.deepcopy, o.default))) for _, o in _options()],
    bases=(CommonConfig,),
)
RunConfig.__doc__ = "Every knob of a training run: the common flags plus each registered workload's options."
RunConfig.__module__ = __name__  # make_dataclass would say "types" (before Python 3.12): pickle finds it here


# pragma: no mutate start (flag definitions and --help text; make mutation scores the checks below)
def _per_workload(key: str) -> str:
    """'mlp 64, gpt 8': a common flag's per-workload defaults, for its --help."""
    shown = [(spec.name, spec.defaults.get(key)) for spec in workloads.REGISTRY.values()]
    return ", ".join(f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}"
                     for name, value in shown if value is not None) or "no default"


def build_parser(prog: str = "train.py") -> argparse.ArgumentParser:
    p = OneLineParser(prog=prog, description="Train the same job at any scale and write outputs/<run_id>/result.json.")
    p.add_argument("--config", metavar="FILE|NAME",
                   help="defaults from a YAML file (keys = flag names), a named config "
                        f"({', '.join(named_configs())}) or a result.json (re-run that run); the command line wins")
    p.add_argument("--print_config", action="store_true", default=None,
                   help="print the resolved settings as YAML (what --config reads back) and exit")
    w = p.add_argument_group("workload")
    # a workload declared outside scalelab that cannot run is a choice too: asked for, it says why (workloads.get)
    w.add_argument("--model", choices=(*workloads.REGISTRY, *workloads.BROKEN),
                   help="; ".join(spec.help for spec in workloads.REGISTRY.values()))
    w.add_argument("--num_samples", type=bounded(int, 1, 10**9, "samples, made in memory"),
                   help=f"training set size ({_per_workload('num_samples')}; else enough for max_steps)")
    for spec in workloads.REGISTRY.values():
        group = p.add_argument_group(f"{spec.name} workload")
        for option in spec.options:
            group.add_argument(f"--{option.name}", **option.argparse)
    o = p.add_argument_group("optimisation and timing")
    o.add_argument("--batch_size", type=bounded(int, 1, 2**20, "samples in one step"),
                   help="per device with --scaling weak, global with --scaling strong "
                        f"({_per_workload('batch_size')})")
    o.add_argument("--scaling", choices=("weak", "strong"),
                   help="weak: batch per device fixed, global batch grows; strong: global batch fixed and split")
    o.add_argument("--learning_rate", type=LEARNING_RATE, help=f"({_per_workload('learning_rate')})")
    o.add_argument("--max_epochs", type=bounded(int, 1, 10**6, "epochs"), help=f"({_per_workload('max_epochs')})")
    o.add_argument("--max_steps", type=STEPS,
                   help=f"stop after this many optimizer steps ({_per_workload('max_steps')})")
    o.add_argument("--warmup_steps", type=bounded(int, 0, 10**6, "steps"),
                   help="first steps left out of every timing figure (default 5; 11 on GPUs, past DDP's runtime "
                        "statistics)")
    o.add_argument("--comm_probe_every", type=bounded(int, 0, 10**6, "steps"),
                   help="every Nth step after warm-up runs without gradient sync and without an update, to time "
                        "compute alone (communication = the difference); 0 = off")
    o.add_argument("--precision", choices=PRECISIONS,
                   help="default: 32 on CPU; on GPUs bf16-mixed for the GPT, 32 for the MLP")
    o.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    o.add_argument("--seed", type=bounded(int, 0, 2**32 - 1, "NumPy's seeds"), help="data, initial weights and dropout")
    o.add_argument("--num_workers", type=WORKERS, help="DataLoader workers per process")
    config_flags.levers(p.add_argument_group("the levers: what DDP does with the gradients (docs/07)"))
    config_flags.launch(p.add_argument_group("launch (defaults come from SLURM or torchrun when present)"))
    config_flags.comet(p.add_argument_group("the MPCDF tutorial's Comet flags: any of them chooses --logger comet"))
    real = {f.name: f.default for f in dataclasses.fields(CommonConfig)}
    real.update((o.name, o.default) for _, o in _options())
    for action in p._actions:  # parse_config sets every default to None: --help shows the real ones
        action.shown_default = real.get(action.dest)
    return p


# pragma: no mutate end
def default_config(kind: str) -> str:
    """The config a job trains when none is named, for kind "gpu" or "cpu" (configs/default-workload.txt, which the
    sbatch scripts read too)."""
    with open(os.path.join(CONFIG_DIR, "default-workload.txt"), encoding="utf-8") as f:
        names = dict(line.split() for line in f if line.strip() and not line.startswith("#"))
    return names[kind]


def named_configs() -> list:
    """The configs shipped in the package: gpt-small, mlp, ..."""
    try:
        return sorted(f[:-5] for f in os.listdir(CONFIG_DIR) if f.endswith(".yaml"))
    except OSError:
        return []


def _config_path(given: str) -> str:
    if os.path.isfile(given):
        return given
    if given in named_configs():
        return os.path.join(CONFIG_DIR, f"{given}.yaml")
    raise UsageError(f"--config {given}: no such file, nor a named config ({', '.join(named_configs())})")


def _model_name(old: str, where: str, prog: str) -> str:
    """A model's old name (a result.json replayed, a job script's MODEL=) as its new one (upgrades.MODEL_NAMES),
    said once per run (rank 0); any other name as it is."""
    new = upgrades.MODEL_NAMES.get(old)
    if new is None:
        return old
    if env_rank() == 0:
        print(f"{prog_name(prog)}: warning: {where}{old} is now {where}{new} (read as such)", file=sys.stderr,
              flush=True)
    return new


def _new_model_names(argv: list, prog: str) -> list:
    """The command line with `--model OLD` / `--model=OLD` given their new names, and `--model MODULE:NAME` the
    name of the workload it declares."""
    out = list(argv)
    for i, prefix, value in workloads.model_words(out):
        out[i] = prefix + _model_name(workloads.model_name(value), "--model ", prog)
    return out


def _load_yaml(given: str, parser: argparse.ArgumentParser, prog: str) -> dict:
    import yaml

    from scalelab import files, results
    from scalelab.errors import ResultError

    path = _config_path(given)
    kind = "result" if os.path.basename(path) == "result.json" else "config"  # a run's settings: its result
    try:
        data = yaml.safe_load(files.read_text(path, kind))  # a result.json too: JSON is YAML
    except ResultError as exc:
        raise UsageError(f"--config {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--config {path}: not readable YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a mapping of flag names to values")
    if data.get("schema") == results.SCHEMA:  # a result.json: the settings of that run
        if data.get("kind") != "training" or not isinstance(data.get("config"), dict):
            raise UsageError(f"--config {path}: a scalelab {data.get('kind')} result, not a training run's")
        replayed = set(REPLAYED_COMMON) | {o.name for _, o in _options()}
        data = {k: v for k, v in data["config"].items() if _dest(k) in replayed and v is not None}
    if isinstance(data.get("model"), str):
        if data["model"] in workloads.BROKEN:  # before its options read as unknown keys
            raise UsageError(f"--config {path}: model: {workloads.BROKEN[data['model']]}")
        data = dict(data, model=_model_name(workloads.model_name(data["model"]), "model: ", prog))
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "version", "config", "print_config")}
    out = {}
    for key, value in data.items():
        dest = _dest(key)
        if dest not in actions:
            raise UsageError(f"--config {path}: unknown key {key!r} (keys are flag names, e.g. batch_size)")
        if value is not None:  # null: not set here, the flag's default (a None seed or K would fail the run)
            out[dest] = _coerce(actions[dest], value, f"--config {path}: {dest}")
    return out


def _dest(key) -> str:
    """A config key as the flag it names: `--batch-size`, `batch-size` and `batch_size` are one."""
    return str(key).lstrip("-").replace("-", "_")


def _coerce(action: argparse.Action, value, where: str):
    """Give a YAML value (not null: _load_yaml drops those) the same checks the command line gets."""
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise UsageError(f"{where}: expected true or false, got {value!r}")
        return value
    many = action.nargs in ("+", "*")
    values = value if isinstance(value, list) else [value]
    if not many and isinstance(value, list):
        raise UsageError(f"{where}: expected one value, got a list")
    converted = []
    for item in values:
        if isinstance(item, (dict, list)):
            raise UsageError(f"{where}: expected a value, got {item!r}")
        try:
            item = action.type(str(item)) if action.type else str(item)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"{where}: {exc}") from None
        if action.choices is not None and item not in action.choices:
            raise UsageError(f"{where}: {item!r} is not one of {', '.join(map(str, action.choices))}")
        converted.append(item)
    return converted if many else converted[0]


def parse_config(argv=None, prog: str = "train.py") -> RunConfig:
    """Flags (+ optional YAML) -> a validated RunConfig with model defaults filled in."""
    parser = build_parser(prog)
    # Every flag defaults to None so we can tell "given" from "not given" and layer YAML below the CLI.
    parser.set_defaults(**{a.dest: None for a in parser._actions if a.dest not in ("help", "version")})
    args = parser.parse_args(_new_model_names(sys.argv[1:] if argv is None else list(argv), prog))
    layered = _load_yaml(args.config, parser, prog) if args.config else {}
    layered.update({k: v for k, v in vars(args).items() if v is not None})
    said = config_flags.tutorial_comet(layered, layered.pop("comet_api_key", None))
    if env_rank() == 0:  # once per run, not once per rank
        for line in said:
            print(f"{prog_name(prog)}: warning: {line}", file=sys.stderr, flush=True)
    cfg = finalize(RunConfig(**{k: v for k, v in layered.items() if k in RunConfig.__dataclass_fields__}),
                   given=set(layered))
    if cfg.strategy == "fsdp" and args.comm_probe_every:
        raise UsageError(f"--comm_probe_every {args.comm_probe_every}: no probe step under --strategy fsdp (a no-sync "
                         "step still all-gathers every block and keeps its gradients for the next reduce-scatter); "
                         "drop it")
    if args.print_config:
        print(settings_yaml(cfg), end="", flush=True)
        raise SystemExit(0)
    return cfg


def settings_yaml(cfg: RunConfig) -> str:
    """The resolved settings as `--config` reads them: this workload's options and the common flags, unset
    ones (decided at launch: devices, precision, ...) left out."""
    import yaml

    others = {o.name for owner, o in _options() if owner != cfg.model}
    keep = {k: v for k, v in cfg.to_dict().items() if v is not None and k not in others and k != "config"}
    keep["model"] = workloads.model_target(cfg.model)  # a workload of a module named on the command line: by it
    return yaml.safe_dump(keep, sort_keys=False)


def finalize(cfg: RunConfig, given=()) -> RunConfig:
    """Fill workload-specific defaults and check combinations a single flag cannot.

    given: the flags the user set (command line or YAML). Another workload's flag among them, set to anything
    but its default, is refused: it would change nothing (`train.py --preset small` trains the default MLP, not
    a GPT); at its default it is harmless (`--lora_rank 0`: full training).
    """
    spec = workloads.get(cfg.model)
    length = {"max_epochs", "max_steps"}
    for key, value in spec.defaults.items():
        # a run length the user gave is the run's length: the workload's other one (the MLP's 3 epochs) would end
        # `--max_steps 500` at step 117 (Lightning's Trainer, too, lifts its epoch default for a max_steps)
        if getattr(cfg, key) is None and not (key in length and length & set(given)):
            setattr(cfg, key, value)
    if cfg.max_epochs is None and cfg.max_steps is None:
        cfg.max_epochs = 1
    for owner, option in _options():
        if owner != cfg.model and option.name in given and getattr(cfg, option.name) != option.default:
            raise UsageError(f"--{option.name} applies to --model {owner} only")
    spec.finalize(cfg)
    _check_strategy(cfg, spec)
    if cfg.static_graph and cfg.accumulate_grad_batches > 1:
        # DDP's static graph records the graph in its first backward, which must be synchronised; accumulation's
        # first batch runs under no_sync, where PyTorch's reducer fails an internal assert (expect_autograd_hooks_)
        raise UsageError(
            f"--static_graph cannot be used with --accumulate_grad_batches {cfg.accumulate_grad_batches}: the "
            "first batch would run under DDP's no_sync, which a static graph does not allow; drop one of them"
        )
    _check_warmup(cfg.max_steps, WARMUP_STEPS["cpu"] if cfg.warmup_steps is None else cfg.warmup_steps)
    return cfg


def _check_strategy(cfg, spec) -> None:
    """--strategy fsdp shards what a workload declares; DDP's own knobs mean nothing to it."""
    if cfg.strategy != "fsdp":
        return
    if not spec.shards:
        raise UsageError(f"--strategy fsdp: --model {cfg.model} declares nothing to shard (WorkloadSpec.shards, "
                         "and its module's shard method); use --strategy ddp")
    ddp_only = [f"--{name}" for name in ("comm_hook", "bucket_cap_mb", "static_graph")
                if getattr(cfg, name) != LEVER_DEFAULTS[name]]
    if ddp_only:
        raise UsageError(f"{', '.join(ddp_only)}: DDP's, not FSDP's (it all-gathers each block's parameters and "
                         "reduce-scatters their gradients itself); drop it or use --strategy ddp")
    if cfg.precision == "16-mixed":
        raise UsageError("--precision 16-mixed: Lightning's FSDP2 strategy takes 32, bf16-mixed (or 16-true); use "
                         "bf16-mixed, or --strategy ddp")
    # no probe step: a no-sync FSDP step still all-gathers every block and keeps its gradients for the next step's
    # reduce-scatter (a replayed DDP result's cadence is dropped; one typed on the command line is refused there)
    cfg.comm_probe_every = 0


def _check_warmup(max_steps, warmup: int):
    if max_steps is not None and warmup >= max_steps:
        raise UsageError(f"--warmup_steps {warmup} leaves no timed step out of --max_steps {max_steps}; use fewer "
                         "warm-up steps or more steps")


WARMUP_STEPS = {"cpu": 5, "gpu": 11}  # GPU: past DDP's runtime statistics, a device sync in its steps 2-11 (docs/08)


def for_accelerator(cfg: RunConfig, accelerator: str) -> RunConfig:
    """The defaults that depend on the hardware the run got, in one place for every launcher (train.py under sbatch,
    submit.py, the demo): --precision and --warmup_steps, unless given."""
    if cfg.precision is None:
        cfg.precision = workloads.get(cfg.model).gpu_precision if accelerator == "gpu" else "32"
    if cfg.warmup_steps is None:
        cfg.warmup_steps = WARMUP_STEPS["gpu" if accelerator == "gpu" else "cpu"]
        _check_warmup(cfg.max_steps, cfg.warmup_steps)
    return cfg
