"""The house rules a reader relies on: small modules, short functions, no import circle, nothing outside the repo.

A long function may stay long when it says why: a comment `# long: <reason>` on its def line or the line above.
"""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "src" / "scalelab"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MODULES = sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_module_is_at_most_400_lines():
    long = {module_name(p): n for p in MODULES if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_every_function_is_at_most_60_lines_or_says_why():
    long = []
    for path in MODULES:
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            size = node.end_lineno - first + 1
            said = any("# long:" in lines[i - 1] for i in (first - 1, first, node.lineno) if i >= 1)
            if size > MAX_FUNCTION_LINES and not said:
                long.append(f"{module_name(path)}.{node.name} ({size} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines without a '# long:' reason: {long}"


def imports_of(path: Path) -> set:
    """scalelab modules this module imports, at any depth of the file (a function-local import still ties
    the two modules together)."""
    here = module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith("scalelab.") and n != here}
    return found


def test_no_import_circle_between_modules():
    known = {module_name(p) for p in MODULES}
    graph = {module_name(p): {m for m in imports_of(p) if m in known} for p in MODULES}
    # A package's __init__ importing its own modules is how a package is assembled, not a circle.
    graph = {m: {d for d in deps if not m or not d.startswith(m + ".")} for m, deps in graph.items()}
    circles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    circles.append(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert not circles, f"import circles: {sorted(set(circles))[:5]}"


def test_the_repository_names_no_path_outside_itself():
    # A user's clone has only the repository: no machine paths, no notes that live beside it.
    outside = re.compile("/" + "work/|" + r"\.\./" + "shared")
    tops = ("src", "tests", "docs", "benchmarks", "slurm_jobs", ".ci", "reframe")
    files = [p for top in tops for p in (ROOT / top).rglob("*")
             if p.is_file() and p.suffix in (".py", ".sh", ".md", ".cfg", ".toml", ".yaml", "")]
    files += [ROOT / name for name in ("README.md", "Makefile", "setup.cfg", "pyproject.toml")]
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in files for i, line in enumerate(p.read_text(errors="replace")
                                                                                 .splitlines(), 1)
            if outside.search(line)]
    assert not hits, f"paths outside the repository: {hits}"


def test_every_row_of_the_troubleshooting_chapters_failure_table_is_a_test():
    """docs/08's "Every death leaves a record": each row names the test that does it to real processes."""
    text = (ROOT / "docs" / "08-troubleshooting.md").read_text()
    table = text.split("### Every death leaves a record", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| failure")]
    assert len(rows) >= 10
    for row in rows:
        names = re.findall(r"`(?:tests/unit/)?(test_\w+\.py)::(test_\w+)`", row)
        assert len(names) == 1, row
        file, test = names[0]
        found = [p for p in (ROOT / "tests").rglob(file) if f"def {test}(" in p.read_text()]
        assert found, f"docs/08 names {file}::{test}, which does not exist"


def test_the_run_reads_in_one_sitting_without_test_hooks():
    """train/run.py is what docs/02 sends a participant to right after the loop: the run top to bottom, short, and
    nothing in it that only tests use (their faults act through the guard: train/guard/run_guard.py)."""
    run = PACKAGE / "train" / "run.py"
    text = run.read_text()
    assert len(text.splitlines()) <= 150
    hooks = [word for word in ("faults?", "testing", "SCALELAB_FAULT", "injected") if re.search(rf"\b{word}\b", text)]
    assert not hooks, f"train/run.py names test hooks: {hooks}"
    hookers = {module_name(p) for p in MODULES if any(m.startswith("scalelab.testing") for m in imports_of(p))}
    assert hookers <= {"scalelab.train.guard.run_guard", "scalelab.testing.faults", "scalelab.testing.tensors"}, \
        f"the test hooks are reached from outside the guard: {sorted(hookers)}"


def test_the_step_clock_only_times():
    """clock.py marks and reads; DDP's hook (comm.py), the probes (probe.py) and the host inventory (record.py)
    live elsewhere: the clock imports nothing of scalelab but the device sync it reads after."""
    assert imports_of(PACKAGE / "train" / "clock.py") <= {"scalelab.train", "scalelab.train.comm"}


def test_the_loop_and_the_clock_know_no_guard_but_its_signals():
    """What keeps the run alive is train/guard/, behind one object: the loop asks only its signals (a Stop)."""
    for name in ("loop.py", "clock.py", "comm.py", "probe.py", "payload.py"):
        guard = {m for m in imports_of(PACKAGE / "train" / name) if m.startswith("scalelab.train.guard")}
        assert guard <= {"scalelab.train.guard.signals", "scalelab.train.guard.signals.Stop"}, (name, guard)


def test_the_run_loads_torch_only_after_its_cores_are_placed():
    """train/run.py imports torch (and all that imports it) only inside `main`, after cores.place: a refused flag
    is said before torch loads, and torch's threads start on the cores the rank was given."""
    import subprocess
    import sys

    code = "import sys; import scalelab.train.run; print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(PACKAGE.parent)})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --- the data flows one way (README's map: configure -> launch -> train and time -> result.json -> report) ---------

BEFORE_THE_RESULT = ("scalelab.train", "scalelab.launch")  # the code that makes a result
MEASURE = sorted((PACKAGE / "measure").glob("*.py"))  # the arithmetic the run and the report both read


def under(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def reached_from(start: str) -> dict:
    """{module: the chain of imports that reaches it from `start`}, through every scalelab module on the way (an
    import at any depth of a file, as imports_of reads it; importing a module runs its packages' __init__ too)."""
    known = {module_name(p): p for p in MODULES}

    def deps(module):
        out = set()
        for name in imports_of(known[module]):
            while name and name not in known:
                name = name.rpartition(".")[0]
            parts = name.split(".")
            out |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & set(known)
        return out - {module}

    chains, todo = {start: [start]}, [start]
    while todo:
        module = todo.pop()
        for dep in deps(module):
            if dep not in chains:
                chains[dep] = chains[module] + [dep]
                todo.append(dep)
    return chains


def crossings(modules, forbidden) -> list:
    """Each module of `modules` that reaches a module under `forbidden`, with the chain of imports that does."""
    found = []
    for module in modules:
        for reached, chain in reached_from(module).items():
            if under(reached, forbidden):
                found.append(" -> ".join(chain))
                break
    return found


def test_the_report_never_imports_the_code_that_made_a_result():
    """The report reads result files: no module of scalelab.report imports scalelab.train or scalelab.launch,
    directly or through another module, at module level or inside a function."""
    report = [module_name(p) for p in MODULES if under(module_name(p), ("scalelab.report",))]
    assert len(report) > 10
    assert not (found := crossings(report, BEFORE_THE_RESULT)), f"the report imports train/ or launch/: {found}"


def test_config_imports_nothing_downstream_of_it():
    """Configuring is the first stage: config.py (and the flag groups it assembles, config_flags.py) import neither
    scalelab.launch nor scalelab.train, directly or through another module."""
    found = crossings(["scalelab.config", "scalelab.config_flags"], BEFORE_THE_RESULT)
    assert not found, f"config imports launch/ or train/: {found}"


def third_party(path: Path, module_level: bool = False) -> set:
    """Top-level names of everything a module imports, at any depth of the file (or at its module level only)."""
    names = set()
    tree = ast.parse(path.read_text())
    for node in (tree.body if module_level else ast.walk(tree)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_result_schema_and_the_measurement_arithmetic_need_no_torch_and_no_training_code():
    """results.py and measure/ are read by every stage: they import neither torch (nor Lightning) nor train/ or
    launch/, directly or through another module. measure/ not even inside a function; results.py only there, in
    versions(), which records torch's version where a run has torch."""
    paths = [PACKAGE / "results.py", *MEASURE]
    assert len(MEASURE) >= 3
    torch = {module_name(p): sorted(third_party(p, module_level=p.parent == PACKAGE) & {"torch", "lightning"})
             for p in paths}
    assert not {m: t for m, t in torch.items() if t}, f"imports torch: {torch}"
    found = crossings([module_name(p) for p in paths], BEFORE_THE_RESULT)
    assert not found, f"results.py or measure/ import train/ or launch/: {found}"


def test_importing_the_result_schema_and_the_measurement_arithmetic_loads_no_torch():
    code = ("import sys, scalelab.results, " + ", ".join(module_name(p) for p in MEASURE) +
            "; print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_report_that_draws_nothing_loads_no_plotting_library():
    """matplotlib is imported where a figure is drawn: a table-only report (a site's nightly check, 100,000 results)
    does not pay its import (about 0.1 s of each report's start)."""
    code = ("import sys, scalelab.report.cli, scalelab.predict; "
            "print(sorted(m for m in sys.modules if 'matplotlib' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_model_is_arithmetic_the_report_only_formats():
    """Prediction has one home, perfmodel/: the a-priori model and the forecast calibrated on a folder. It imports
    neither torch, pandas nor matplotlib (at any depth) nor the report, so predict.py, the report and the tests read
    the same arithmetic, and the report's modules keep only the frames and the printing around it."""
    model = sorted((PACKAGE / "perfmodel").glob("*.py"))
    assert {p.name for p in model} >= {"scaling.py", "calibrate.py", "forecast.py"}
    heavy = {module_name(p): sorted(third_party(p) & {"torch", "lightning", "pandas", "matplotlib"}) for p in model}
    assert not {m: t for m, t in heavy.items() if t}, f"perfmodel imports a heavy library: {heavy}"
    found = crossings([module_name(p) for p in model], ("scalelab.report", *BEFORE_THE_RESULT))
    assert not found, f"perfmodel imports the report or the training code: {found}"


# --- names ------------------------------------------------------------------------------------------------------

def test_no_two_modules_of_the_package_share_a_base_name():
    """`cli.py` or `levers.py` twice makes a reader ask which one; each module's file name says what it is."""
    by_name = {}
    for path in MODULES:
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.stem, []).append(module_name(path))
    shared = {name: modules for name, modules in by_name.items() if len(modules) > 1}
    assert not shared, f"modules sharing a base name: {shared}"


ENTRY_SCRIPTS = sorted((ROOT / "src").glob("*.py"))


def test_entry_scripts_are_thin_and_run_the_module_they_are_named_after():
    """src/*.py: a docstring, imports, at most one early call (train.py notes SIGUSR1 before torch loads) and the
    `if __name__ == "__main__":` line that runs the package. One that carries the name of a package module
    (src/emulate.py, src/predict.py, src/selfcheck.py) imports that module: the same name, the same program."""
    assert len(ENTRY_SCRIPTS) >= 7
    by_stem = {}
    for path in MODULES:
        by_stem.setdefault(path.stem, []).append(module_name(path))
    for path in ENTRY_SCRIPTS:
        body = ast.parse(path.read_text()).body
        docstring = body[:1] and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        rest = body[1:] if docstring else body
        calls = [n for n in rest if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
        main = [n for n in rest if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
        others = [n for n in rest if not isinstance(n, (ast.Import, ast.ImportFrom)) and n not in calls + main]
        assert docstring and len(calls) <= 1 and len(main) == 1 and len(main[0].body) == 1 and not others, \
            f"{path.name} is not a thin entry script"
        named = by_stem.get(path.stem, [])
        assert not named or set(named) & imports_of(path), f"{path.name} is named like {named} but runs another module"


def test_each_concept_has_one_home():
    """The levers are config.py's, a configuration's key is keys.py's, "is this a number" is numeric.py's:
    a second definition elsewhere drifts from the first (three LEVERS once meant three different things)."""
    homes = {"LEVERS": "scalelab.config", "LEVER_DEFAULTS": "scalelab.config", "SCALE": "scalelab.keys",
             "CONFIGURATION": "scalelab.keys"}
    found = []
    for path in MODULES:
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            found += [(t.id, module_name(path)) for t in targets if isinstance(t, ast.Name) and t.id in homes]
            if isinstance(node, ast.FunctionDef) and re.fullmatch(r"_?(is_)?(number|finite|numeric)", node.name):
                found.append((node.name, module_name(path)))
    strays = [(name, where) for name, where in found if homes.get(name, "scalelab.numeric") != where]
    assert not strays, f"defined away from its home: {strays}"
    spelled = [module_name(p) for p in MODULES if module_name(p) != "scalelab.keys"
               and re.search(r"""\[\s*["']world_size["'],\s*["']num_nodes["'],\s*["']link["']\s*\]""", p.read_text())]
    assert not spelled, f"a configuration's key spelled out instead of keys.py's SCALE: {spelled}"


def test_every_numeric_flag_of_every_entry_point_is_bounded():
    """A number from a flag reaches arithmetic: unbounded, --bucket_mb 1e-320 or --tflops 1e308 ended in a traceback
    and tiny values printed `nan %`. Every numeric flag's type is entry.bounded (or one of entry's named bounds built
    with it), never a bare int or float, nor a converter that checks one side only."""
    bare = re.compile(r"(?<!\w)type\s*=\s*(int|float)\b|\b(positive|nonneg)_(int|float)\b")
    for path in (ROOT / "src").rglob("*.py"):
        text = path.read_text()
        assert not bare.search(text), f"{path.relative_to(ROOT)}: an unbounded numeric flag: {bare.search(text)[0]}"
        if path.name != "entry.py":
            for call in re.findall(r"number_type\((.*)", text):
                assert "<" in call, f"{path.relative_to(ROOT)}: number_type({call} has no upper bound"


# The only opens outside scalelab/files.py: the kernel's own files (/proc, /sys, cgroup), the package's own data, and
# files the process itself writes and reads back (each with why). Everything a user or a run left behind is read
# through files.read_bytes / read_text / walk: a regular file, in its folder, of its kind's size.
OWN_FILES = {
    "config.py": "the package's own configs/default-workload.txt",
    "entry.py": "/dev/null, for a closed stdout at exit",
    "selfcheck.py": "the write-rate probe's own new file",
    "demo.py": "/proc/cpuinfo, and the demo's own log of its runs",
    "train/guard/peers.py": "/proc/<pid>/stat",
    "train/memcheck.py": "/proc/meminfo and the cgroup's memory files",
    "testing/faults.py": "a test hook's own marker file",
    "measure/cpushare.py": "/proc/self/task/*/schedstat",
    "launch/cluster.py": "/proc/cpuinfo, /proc/self/stat",
    "launch/cores.py": "sysfs (cpulists, NUMA nodes) and /proc's boot id",
    "launch/netns.py": "/proc/<pid> of an emulated node",
    "report/index.py": "the package's own source (the index's code version); results through files.read_bytes",
    "report/sealing.py": "the user's own key, that it made (O_NOFOLLOW | O_NONBLOCK, fstat: this user's regular file)",
}


def test_every_file_a_user_or_a_run_left_is_read_through_the_one_reader():
    """A reader that opens a path itself trusts what it is: a FIFO named result.json hung the report for good, a
    result linked to /dev/zero was read until memory ran out. Outside files.py only OWN_FILES open paths."""
    opening = re.compile(r"(?<![\w.])open\(|os\.open\(|pd\.read_csv\(|pd\.read_json\(|os\.walk\(|os\.scandir\(|"
                         r"os\.listdir\(|\.read_text\(|\.read_bytes\(")
    for path in PACKAGE.rglob("*.py"):
        name = str(path.relative_to(PACKAGE))
        if name == "files.py" or name in OWN_FILES:
            continue
        found = [line.strip() for line in path.read_text().splitlines()
                 if opening.search(line) and "files." not in line and not line.lstrip().startswith("#")]
        assert not found, f"{name} opens a path itself (files.read_bytes / read_text / walk): {found[0]}"
