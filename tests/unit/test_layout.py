"""The house rules a reader relies on: small modules, short functions, no import circle, nothing outside the repo.

A long function may stay long when it says why: a comment `# long: <reason>` on its def line or the line above.
"""

import ast
import re
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
    files = [p for top in ("src", "tests", "docs", "benchmarks", "slurm_jobs", ".ci") for p in (ROOT / top).rglob("*")
             if p.is_file() and p.suffix in (".py", ".sh", ".md", ".cfg", ".toml", "")]
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
    for name in ("loop.py", "clock.py", "comm.py", "probe.py", "record.py"):
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
