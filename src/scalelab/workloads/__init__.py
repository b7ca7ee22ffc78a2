"""Workloads: what a run trains. Each one declares itself once, in its own module, as a `WorkloadSpec`.

The flags, per-workload defaults and the fields that identify the computation (config.py), the model and its
seeded data, the analytic FLOPs per sample and how they count (the report's note beside MFU), the memory estimate
(the check before the ranks start, and the result's) and the throughput unit (the report) all come from the spec,
so a new workload of scalelab's is one declaration module here (plus, if its network is new, a file in `nets/`),
one line in BUILTIN, and its test. A user's is one module anywhere, named by an installed package's entry point
(group scalelab.workloads) or by SCALELAB_WORKLOADS (admit(), when scalelab.config loads; docs/16). Declarations
import no torch: flags are checked in a fraction of a second, before torch and Lightning load; `build` imports the
network when a run actually starts.
"""

import argparse
import importlib
import os
import re
import sys
from importlib import metadata

from scalelab import files
from scalelab.errors import UsageError
from scalelab.workloads import bert, gpt, mlp, resnet
from scalelab.workloads.spec import MemoryCheck, Option, Workload, WorkloadSpec

__all__ = ["BROKEN", "BUILTIN", "GROUP", "MemoryCheck", "REGISTRY", "Option", "Workload", "WorkloadSpec", "admit",
           "build", "get", "throughput_unit"]

GROUP = "scalelab.workloads"  # the entry point group an installed package declares its workloads in
ENV = "SCALELAB_WORKLOADS"  # MODULE:NAME[,...]: workloads of modules on the path, not installed
BUILTIN = {spec.name: spec for spec in (mlp.SPEC, gpt.SPEC, resnet.SPEC, bert.SPEC)}
FORMER = {old: spec.name for spec in BUILTIN.values() for old in spec.formerly}  # old results' names: upgrades.py


def _load(target: str):
    """The object MODULE:NAME names (an entry point's value, or an item of SCALELAB_WORKLOADS)."""
    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError("expected MODULE:NAME")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def flag_words(argv: list, flag: str) -> list:
    """(index, prefix, value) of each value of `flag` on a command line: argv[index] is prefix + value, the prefix
    flag + "=" where the flag and its value are one word, "" where the value follows the flag."""
    found = []
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            found.append((i + 1, "", argv[i + 1]))
        elif word.startswith(flag + "="):
            found.append((i, flag + "=", word[len(flag) + 1:]))
    return found


def model_words(argv: list) -> list:
    """flag_words of --model: what the registry (named_on) and config's renames read."""
    return flag_words(argv, "--model")


def named_on(argv: list) -> list:
    """The MODULE:NAME values a command line names (a workload's name holds no colon): `--model MODULE:NAME`,
    `--model=MODULE:NAME`, and the `model:` of the YAML file its last --config names (what --print_config writes
    for such a workload)."""
    values = [value for _, _, value in model_words(argv)]
    values += [_config_model(path) for _, _, path in flag_words(argv, "--config")[-1:]]
    return [value for value in values if isinstance(value, str) and ":" in value]


def _config_model(path: str):
    """The `model:` of a YAML config file, or None where it has none or is no such file (config.py reads it through
    the same reader, and says why)."""
    try:
        import yaml

        data = yaml.safe_load(files.read_text(path, "config"))
    except Exception:  # noqa: BLE001 - unreadable, too large, not YAML, a folder: config.py's one line, when it reads it
        return None
    return data.get("model") if isinstance(data, dict) else None


def _declared() -> list:
    """(name a user runs it by or None, MODULE:NAME) of every workload declared outside scalelab: the installed
    packages' entry points, then SCALELAB_WORKLOADS's, then this command line's (named_on); each MODULE:NAME once."""
    try:
        points = [(ep.name, ep.value) for ep in metadata.entry_points(group=GROUP)]
    except Exception:  # noqa: BLE001 - a broken distribution's metadata: no plugins rather than no scalelab
        points = []
    points += [(None, t.strip()) for t in [*os.environ.get(ENV, "").split(","), *named_on(sys.argv[1:])]
               if t.strip()]
    seen = set()
    return [(name, target) for name, target in points if not (target in seen or seen.add(target))]


NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # a run folder's name carries it (results.new_run_id)


def _plugins(taken: dict, reserved: frozenset, common: frozenset, declared=None) -> tuple:
    """({name: spec} of the workloads declared outside scalelab, {name: why it cannot run}, {MODULE:NAME: name} of
    those that joined, {name: MODULE:NAME} of those that joined by no entry point's name): each loaded once (every
    rank and the launcher see the same); one that fails is kept with its reason, said in one line where it is asked
    for (--model NAME, or --model MODULE:NAME where its name is a workload that runs), never where it is not.
    reserved: the names no option may take (the common flags, the workload block's fields); common: the flags a
    spec's defaults may set; declared: _declared()'s list, where the caller has it."""
    found, refused, targets, modules = {}, [], {}, {}
    flags = {o.name for spec in taken.values() for o in spec.options}
    for name, target in _declared() if declared is None else declared:
        try:
            spec = _load(target)
        except Exception as exc:  # noqa: BLE001 - whatever a user's module raises on import: said, not a traceback
            refused.append((name or target, target, f"{target} does not import ({_first_line(exc)})"))
            continue
        if not isinstance(spec, WorkloadSpec):
            refused.append((name or target, target, f"{target} is a {type(spec).__name__}, not a scalelab "
                                                    "WorkloadSpec"))
            continue
        why = _refused(spec, name, {**taken, **found}, flags | reserved, common)
        if why:
            refused.append((name or spec.name, target, f"{target}: {why}"))
            continue
        found[spec.name], targets[target] = spec, spec.name
        if name is None:
            modules[spec.name] = target
        flags |= {o.name for o in spec.options}
    broken = {}
    for name, target, why in refused:  # by its name, unless a workload that runs or an earlier refusal has it
        broken[target if name in taken or name in found or name in broken else name] = why
    return found, broken, targets, modules


def _first_line(exc: BaseException) -> str:
    said = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {said[0]}" if said else type(exc).__name__


def _refused(spec: WorkloadSpec, name, taken: dict, flags: set, common: frozenset):
    """Why a declared spec cannot join the registry (it would break another workload's runs or its own), or None."""
    if name is not None and name != spec.name:
        return f"declares the name {spec.name!r}, its entry point {name!r}"
    if not isinstance(spec.name, str) or not NAME.match(spec.name) or spec.name in FORMER:
        return f"the name {spec.name!r} is not one a run can carry (letters, digits, _ . -; at most 64)"
    if spec.formerly:
        return "it declares former names (WorkloadSpec.formerly: scalelab's own workloads' renames only)"
    if spec.name in taken:
        return f"the name {spec.name!r} is taken (by {'scalelab' if spec.name in BUILTIN else 'another package'})"
    names = [o.name for o in spec.options]
    odd = sorted(n for n in names if not (isinstance(n, str) and n.isidentifier()))
    if odd:
        return f"its option name(s) {', '.join(map(repr, odd))} are not Python identifiers"
    clash = sorted(set(names) & flags)
    if clash:
        return f"its option(s) {', '.join('--' + c for c in clash)} are scalelab's or another workload's already"
    missing = sorted(set(spec.identity) - set(names))
    if missing:
        return f"its identity names {', '.join(map(str, missing))}, which it has no option for"
    unknown = sorted(set(spec.defaults) - common)
    if unknown:
        return f"its defaults set {', '.join(map(str, unknown))}, which are no common flags"
    trial = argparse.ArgumentParser(add_help=False)
    for option in spec.options:
        try:
            trial.add_argument(f"--{option.name}", **option.argparse)
        except (TypeError, ValueError) as exc:  # argparse's own words for a keyword it cannot take
            return f"--{option.name}: argparse refuses {option.argparse!r} ({_first_line(exc)})"
    return None


BROKEN = {}  # filled by admit(), which scalelab.config calls before its flags are made
REGISTRY = dict(BUILTIN)
TARGETS = {}  # MODULE:NAME -> the name of the workload it declares (--model takes either)
MODULES = {}  # name -> MODULE:NAME of a workload declared by a module, not an installed entry point: configs name it so


def admit(reserved: frozenset, common: frozenset) -> None:
    """Load the workloads declared outside scalelab into the registry: scalelab.config calls it, once, when it loads,
    with the names its own flags take, before it makes RunConfig and the parser from the registry.

    A `--model MODULE:NAME` of this command line joins SCALELAB_WORKLOADS in this process's environment: every
    process it starts (ranks, a SLURM job submitit writes, an emulated node) declares the same workloads, whatever
    its own command line."""
    declared = _declared()  # the command line and its config file read once
    found, broken, targets, modules = _plugins(BUILTIN, reserved, common, declared)
    BROKEN.update(broken)
    REGISTRY.update(found)
    TARGETS.update(targets)
    MODULES.update(modules)
    given = [t.strip() for t in os.environ.get(ENV, "").split(",") if t.strip()]
    added = [t for name, t in declared if name is None and t not in given]  # the command line's (or its config's)
    if added:
        os.environ[ENV] = ",".join([*given, *added])


def model_name(value: str) -> str:
    """--model's value as the workload's name: MODULE:NAME of a workload that runs as the name it declares."""
    return TARGETS.get(value, value)


def model_target(name: str) -> str:
    """A workload's name as a config names it: the MODULE:NAME of a module that declared it here (so the file
    declares it again where it is read), else its name (scalelab's, or an installed package's entry point)."""
    return MODULES.get(name, name)


def get(name: str) -> WorkloadSpec:
    """The workload --model names; one declared outside scalelab that cannot run: a UsageError saying why."""
    if name in BROKEN:
        raise UsageError(f"--model {name}: {BROKEN[name]}")
    return REGISTRY[name]


def build(cfg, batch_per_device: int, world_size: int) -> Workload:
    """The module and loaders for cfg (a RunConfig) at this per-device batch and world size."""
    return REGISTRY[cfg.model].build(cfg, batch_per_device, world_size)


def throughput_unit(tokens_per_sample) -> str:
    """The unit a workload's throughput is read in: tokens/s where a sample has tokens, else samples/s.

    The one rule for every table, plot and export (they read tokens_per_sample from the result)."""
    return "tokens/s" if tokens_per_sample else "samples/s"
