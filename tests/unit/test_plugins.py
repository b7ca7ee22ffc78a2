"""A workload declared outside scalelab (an installed package's entry point, or SCALELAB_WORKLOADS) joins the
registry or is refused in one line where it is asked for, never anywhere else.

The registry is made when scalelab.workloads is imported, so each case runs its commands in a fresh process with
its own PYTHONPATH and environment: what a user's shell does."""

import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ROOT
from scalelab import config, files, workloads
from scalelab.workloads import Option, WorkloadSpec

EXAMPLE = ROOT / "examples" / "tiny_cnn"


def _run(tmp_path, *args, env=None, paths=()):
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *map(str, paths)]), **(env or {}))
    if "SCALELAB_WORKLOADS" not in (env or {}):
        full.pop("SCALELAB_WORKLOADS", None)  # the caller's shell's, never a test's
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *args], capture_output=True, text=True,
                          timeout=120, env=full, cwd=tmp_path)


def _dist_info(site, name: str, entry: str):
    """What `pip install` leaves for a package with one scalelab.workloads entry point."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[scalelab.workloads]\n{entry}\n")


BAD = """
from scalelab.workloads import Option, WorkloadSpec
build = lambda cfg, batch, world: None
TAKEN = WorkloadSpec(name="mlp", help="h", defaults={}, options=(), identity=(), build=build)
CLASH = WorkloadSpec(name="clash", help="h", defaults={}, options=(Option("preset", 1),), identity=(), build=build)
NO_OPTION = WorkloadSpec(name="no-option", help="h", defaults={}, options=(), identity=("width",), build=build)
NOT_A_SPEC = {"name": "x"}
COMMON_FLAG = WorkloadSpec(name="common", help="h", defaults={}, options=(Option("seed", 1),), identity=(),
                           build=build)
RECORD_FIELD = WorkloadSpec(name="field", help="h", defaults={}, options=(Option("params", 1),), identity=(),
                            build=build)
DASHED = WorkloadSpec(name="dashed", help="h", defaults={}, options=(Option("my-opt", 1),), identity=(), build=build)
ARGPARSE = WorkloadSpec(name="argparse", help="h", defaults={}, options=(Option("k", 1, {"nargs": 0}),),
                        identity=(), build=build)
DEFAULTS = WorkloadSpec(name="defaults", help="h", defaults={"batchsize": 4}, options=(), identity=(), build=build)
SLASHED = WorkloadSpec(name="a/b", help="h", defaults={}, options=(), identity=(), build=build)
RENAMED = WorkloadSpec(name="renamed", help="h", defaults={}, options=(), identity=(), build=build, formerly=("old",))
"""


@pytest.mark.parametrize("target, name, said", [
    ("nowhere_at_all:SPEC", "nowhere_at_all:SPEC",
     "--model nowhere_at_all:SPEC: nowhere_at_all:SPEC does not import (ModuleNotFoundError: No module named "
     "'nowhere_at_all')"),
    ("bad_specs:NOT_A_SPEC", "bad_specs:NOT_A_SPEC",
     "--model bad_specs:NOT_A_SPEC: bad_specs:NOT_A_SPEC is a dict, not a scalelab WorkloadSpec"),
    ("bad_specs:CLASH", "clash", "--model clash: bad_specs:CLASH: its option(s) --preset are scalelab's or "
                                 "another workload's already"),
    ("bad_specs:COMMON_FLAG", "common", "--model common: bad_specs:COMMON_FLAG: its option(s) --seed are "
                                        "scalelab's or another workload's already"),
    ("bad_specs:RECORD_FIELD", "field", "--model field: bad_specs:RECORD_FIELD: its option(s) --params are "
                                        "scalelab's or another workload's already"),
    ("bad_specs:DASHED", "dashed", "--model dashed: bad_specs:DASHED: its option name(s) 'my-opt' are not Python "
                                   "identifiers"),
    ("bad_specs:ARGPARSE", "argparse", "--model argparse: bad_specs:ARGPARSE: --k: argparse refuses {'nargs': 0} "
                                       "(ValueError: nargs for store actions must be != 0; if you have nothing to "
                                       "store, actions such as store true or store const may be more appropriate)"),
    ("bad_specs:DEFAULTS", "defaults", "--model defaults: bad_specs:DEFAULTS: its defaults set batchsize, which are "
                                       "no common flags"),
    ("bad_specs:SLASHED", "a/b", "--model a/b: bad_specs:SLASHED: the name 'a/b' is not one a run can carry "
                                 "(letters, digits, _ . -; at most 64)"),
    ("bad_specs:RENAMED", "renamed", "--model renamed: bad_specs:RENAMED: it declares former names "
                                     "(WorkloadSpec.formerly: scalelab's own workloads' renames only)"),
    ("bad_specs:NO_OPTION", "no-option", "--model no-option: bad_specs:NO_OPTION: its identity names width, which it "
                                         "has no option for"),
])
def test_a_workload_that_cannot_run_is_one_line_where_asked_for_and_silent_elsewhere(tmp_path, target, name, said):
    (tmp_path / "bad_specs.py").write_text(BAD)
    env = {"SCALELAB_WORKLOADS": target}
    asked = _run(tmp_path, "--model", name, "--print_config", env=env, paths=[tmp_path])
    assert asked.returncode == 2 and asked.stdout == "", asked.stderr
    assert asked.stderr.strip().splitlines() == [f"train.py: error: {said}"], asked.stderr
    other = _run(tmp_path, "--model", "mlp", "--print_config", env=env, paths=[tmp_path])
    assert other.returncode == 0 and "model: mlp" in other.stdout and other.stderr == "", other.stderr


def test_a_name_scalelab_has_stays_scalelabs_and_the_module_says_why_by_its_target(tmp_path):
    (tmp_path / "bad_specs.py").write_text(BAD)
    env = {"SCALELAB_WORKLOADS": "bad_specs:TAKEN"}
    proc = _run(tmp_path, "--model", "mlp", "--print_config", env=env, paths=[tmp_path])
    assert proc.returncode == 0 and "hidden_dims" in proc.stdout, proc.stderr  # scalelab's MLP, not the module's
    proc = _run(tmp_path, "--model", "bad_specs:TAKEN", env=env, paths=[tmp_path])
    assert proc.returncode == 2 and proc.stderr.strip() == ("train.py: error: --model bad_specs:TAKEN: "
                                                            "bad_specs:TAKEN: the name 'mlp' is taken (by scalelab)")


def test_an_installed_packages_entry_point_is_a_model_with_its_options(tmp_path):
    """The example, as `pip install -e examples/tiny_cnn` registers it: its flag, default and identity."""
    site = tmp_path / "site"
    _dist_info(site, "scalelab-example-tiny-cnn", "tiny-cnn = tiny_cnn:SPEC")
    proc = _run(tmp_path, "--model", "tiny-cnn", "--width", "8", "--print_config", paths=[site, EXAMPLE])
    assert proc.returncode == 0 and "model: tiny-cnn" in proc.stdout and "width: 8" in proc.stdout, proc.stderr
    assert "--width" in _run(tmp_path, "--help", paths=[site, EXAMPLE]).stdout
    renamed = tmp_path / "renamed"
    _dist_info(renamed, "other", "cnn = tiny_cnn:SPEC")
    proc = _run(tmp_path, "--model", "cnn", paths=[renamed, EXAMPLE])
    assert proc.returncode == 2 and proc.stderr.strip() == ("train.py: error: --model cnn: tiny_cnn:SPEC: declares "
                                                            "the name 'tiny-cnn', its entry point 'cnn'")


NAMES = st.sampled_from(["mlp", "gpt", "a", "b", "c", "transformer", "d e"])
OPTIONS = st.lists(st.sampled_from(["preset", "noise", "width", "depth", "k", "seed", "params", "options", "x-y",
                                    "help"]), max_size=3, unique=True)


@settings(max_examples=80, deadline=None)
@given(declared=st.lists(st.tuples(NAMES, OPTIONS, st.data()), max_size=5))
def test_every_declared_workload_joins_or_is_refused_and_the_registry_keeps_one_name_one_flag(declared):
    """The rule for any set of declarations: each one is in the registry or refused with its reason, never both or
    neither; no name is two workloads'; no flag is two workloads'; a spec's identity is among its own options; and
    scalelab's own workloads are never displaced."""
    module, targets = type(sys)("generated_specs"), []
    for i, (name, options, data) in enumerate(declared):
        identity = tuple(data.draw(st.lists(st.sampled_from(options + ["zz"]), max_size=2, unique=True)))
        spec = WorkloadSpec(name=name, help="h", defaults={}, options=tuple(Option(o, 0) for o in options),
                            identity=identity, build=lambda *a: None)
        setattr(module, f"S{i}", spec)
        targets.append((None, f"generated_specs:S{i}"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "generated_specs", module)
        mp.setattr(workloads, "_declared", lambda: targets)
        found, broken, targets, modules = workloads._plugins(workloads.BUILTIN, config.RESERVED, config.COMMON)
    for i in range(len(declared)):  # each joined, or refused by its name or its target
        spec, target = getattr(module, f"S{i}"), f"generated_specs:S{i}"
        assert found.get(spec.name) is spec or target in broken or broken.get(spec.name, "").startswith(target)
    assert not set(found) & set(workloads.BUILTIN)  # scalelab's stay scalelab's
    assert not set(broken) & (set(found) | set(workloads.BUILTIN))  # a name that runs is never refused
    flags = [o.name for spec in [*workloads.BUILTIN.values(), *found.values()] for o in spec.options]
    assert len(flags) == len(set(flags)) and not set(flags) & config.RESERVED  # no flag two's; none scalelab's
    assert all(n.isidentifier() for n in flags) and all(workloads.NAME.match(n) for n in found)
    assert all(set(spec.identity) <= {o.name for o in spec.options} for spec in found.values())
    for spec in found.values():
        assert spec.name not in broken
    assert targets == {f"generated_specs:S{i}": getattr(module, f"S{i}").name for i in range(len(declared))
                       if found.get(getattr(module, f"S{i}").name) is getattr(module, f"S{i}")}
    assert modules == {name: target for target, name in targets.items()}  # no entry point among them


def test_the_example_declares_a_spec_without_importing_torch():
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(ROOT / "src")!r}, {str(EXAMPLE)!r}]
        import tiny_cnn
        assert "torch" not in sys.modules, "torch"
        print(tiny_cnn.SPEC.name)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "tiny-cnn", proc.stderr


@pytest.mark.parametrize("given", [["--model", "tiny_cnn:SPEC"], ["--model=tiny_cnn:SPEC"]])
def test_a_module_named_by_model_is_the_workload_it_declares_with_its_options(tmp_path, given):
    """`--model MODULE:NAME`: no install, no environment variable; the run carries the name the module declares."""
    proc = _run(tmp_path, *given, "--width", "8", "--print_config", paths=[EXAMPLE])
    assert proc.returncode == 0 and "model: tiny_cnn:SPEC" in proc.stdout and "width: 8" in proc.stdout, proc.stderr
    code = "from scalelab import config; print(config.parse_config(['--model', 'tiny_cnn:SPEC']).model)"
    named = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(EXAMPLE)]), SCALELAB_WORKLOADS="tiny_cnn:SPEC"))
    assert named.stdout.strip() == "tiny-cnn", named.stderr  # the run's name: the one the module declares


def test_a_step_that_returns_no_loss_is_one_line_before_the_ranks_meet_and_writes_nothing(tmp_path):
    """A per-sample loss (reduction="none"): before, rank 1 stopped with torch's "grad can be implicitly created
    only for scalar outputs" and the run left a failed result; now its meta step finds it on every rank."""
    text = (EXAMPLE / "tiny_cnn.py").read_text()
    assert "F.cross_entropy(self.net(images), labels)" in text
    (tmp_path / "per_sample.py").write_text(text.replace("F.cross_entropy(self.net(images), labels)",
                                                         "F.cross_entropy(self.net(images), labels, reduction='none')"))
    proc = _run(tmp_path, "--model", "per_sample:SPEC", "--devices", "2", "--max_steps", "2", "--warmup_steps", "1",
                "--output_dir", str(tmp_path / "out"), paths=[tmp_path])
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "train.py: error: --model tiny-cnn: its training_step returns a tensor of shape (32,), not one value (reduce "
        "it: .mean() or .sum()); the loop calls backward on the loss it returns"], proc.stderr
    assert not any((tmp_path / "out").rglob("*")), list((tmp_path / "out").rglob("*"))


_VALUE = st.from_regex(r"[a-z_]{1,6}(:[A-Z]{1,4})?", fullmatch=True)
_WORD = st.one_of(st.just("--model"), _VALUE.map("--model=".__add__), _VALUE, st.just("--flag"), st.just("--mod"))


@settings(max_examples=300, deadline=None)
@given(st.lists(_WORD, max_size=8))
def test_the_model_words_scalelab_reads_are_the_ones_argparse_reads(argv):
    """workloads.model_words (the registry's scan for MODULE:NAME, config's rename of old names) agrees with
    scalelab's parser on every command line it accepts: each word it names is prefix + value, and the last one is
    the --model argparse keeps. `--mod` is no --model (no abbreviations: before, argparse took `--mod x` as
    --model x, which neither scan saw)."""
    from scalelab.entry import OneLineParser
    from scalelab.errors import UsageError

    parser = OneLineParser(prog="t")
    parser.add_argument("--model")
    parser.add_argument("--flag", action="store_true")
    parser.add_argument("rest", nargs="*")
    found = workloads.model_words(argv)
    assert all(argv[i] == prefix + value and (prefix or argv[i - 1] == "--model") for i, prefix, value in found)
    try:
        parsed = parser.parse_args(argv)
    except UsageError:
        return
    assert parsed.model == (found[-1][2] if found else None)
    assert workloads.named_on(argv) == [value for _, _, value in found if ":" in value]


def test_print_config_of_a_modules_workload_reads_back_as_the_same_run(tmp_path):
    """--print_config writes `model: tiny_cnn:SPEC` (the module it was named by), and --config of that file
    declares the workload again: its options are keys, the settings the same. Before, the file said
    `model: tiny-cnn`, which no later command knew."""
    printed = _run(tmp_path, "--model", "tiny_cnn:SPEC", "--width", "4", "--print_config", paths=[EXAMPLE])
    assert printed.returncode == 0 and printed.stdout.startswith("model: tiny_cnn:SPEC\n"), printed.stderr
    (tmp_path / "cnn.yaml").write_text(printed.stdout)
    again = _run(tmp_path, "--config", "cnn.yaml", "--print_config", paths=[EXAMPLE])
    assert again.returncode == 0 and again.stdout == printed.stdout, again.stderr
    lost = _run(tmp_path, "--config", "cnn.yaml")  # the module not on the path: said, not "unknown key 'width'"
    assert lost.returncode == 2 and lost.stderr.strip() == (
        "train.py: error: --config cnn.yaml: model: tiny_cnn:SPEC does not import (ModuleNotFoundError: No module "
        "named 'tiny_cnn')")


def test_named_on_reads_the_model_of_the_last_config_file_only_where_it_is_a_modules(tmp_path):
    (tmp_path / "a.yaml").write_text("model: pkg.mod:SPEC\nwidth: 3\n")
    (tmp_path / "b.yaml").write_text("model: mlp\n")
    (tmp_path / "big.yaml").write_text("model: pkg.big:SPEC\n" + "#" * files.LIMITS["config"])  # read by no one
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    at = str(tmp_path)
    assert workloads.named_on(["--config", f"{at}/a.yaml"]) == ["pkg.mod:SPEC"]
    assert workloads.named_on([f"--config={at}/a.yaml", "--model", "x.y:Z"]) == ["x.y:Z", "pkg.mod:SPEC"]
    assert workloads.named_on(["--config", f"{at}/a.yaml", "--config", f"{at}/b.yaml"]) == []  # the last one counts
    for name in ("b.yaml", "big.yaml", "bad.yaml", "missing.yaml", ""):
        assert workloads.named_on(["--config", f"{at}/{name}"]) == [], name
