"""The mutation score per module, from the last `mutmut run` (`make mutation` runs both).

mutmut leaves one mutants/src/<module>.py.meta per mutated module: the exit code of the guarding tests for each
mutant (1: a test failed, the mutant is killed; 0: every test passed, it survived). A survivor that is
equivalent (no input makes it behave differently where a user could see it) is listed in equivalent.txt beside
this script, one a line: the mutant's name, then why. Those leave the count; every other survivor is a hole.

    python tests/mutation/score.py [mutants ...]
    python tests/mutation/score.py --killed-equivalents [mutants]

Several folders (make mutation's two passes: mutants, build/mutation-record/mutants) are scored as one run.

The second form prints the listed equivalents this run killed, for `make mutation` to judge once more: a test that
failed once for a reason of its own (2, then 3, in two complete runs of 12,000 edits; none repeated) must not turn a
reviewed entry stale; an entry whose mutant a test kills again is stale all the same.

Prints killed / (mutants - equivalent) per module and in all, and writes the unexplained survivors, one name a
line, to mutants/survivors.txt (`mutmut show NAME` prints the edit). Exit 1 when an entry of equivalent.txt has
no reason or names no surviving mutant (it was killed, or the code moved: review the list).
"""

import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
KILLED = {1, 3, 36, 24, -24, 152, 255}  # a failing test, pytest's internal error, a timeout: mutmut's "killed"
SURVIVED = 0


def read_equivalents(path: Path) -> tuple:
    """({mutant name: reason}, [problems]) from equivalent.txt; '#' starts a comment line."""
    reasons, problems = {}, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, reason = line.strip().partition(" ")
        if not reason.strip():
            problems.append(f"equivalent.txt:{number}: {name} has no reason")
        reasons[name] = reason.strip()
    return reasons, problems


def read_results(mutants: Path) -> dict:
    """{module path: {mutant name: exit code}} from mutmut's .meta files."""
    found = {}
    for meta in sorted((mutants / "src").rglob("*.py.meta")):
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        if codes:
            found[meta.relative_to(mutants / "src").as_posix()[: -len(".meta")]] = codes
    return found


def score(results: dict, equivalent: dict) -> tuple:
    """(rows of [module, mutants, killed, equivalent, holes, score], unexplained survivors, stale entries)."""
    rows, holes, total = [], [], Counter()
    for module, codes in results.items():
        n = Counter()
        for name, code in codes.items():
            n["mutants"] += 1
            if code in KILLED:
                n["killed"] += 1
            elif code == SURVIVED and name in equivalent:
                n["equivalent"] += 1
            else:  # survived, no test reached it, not run: all holes until a test or a reason says otherwise
                n["holes"] += 1
                holes.append(name)
        total.update(n)
        rows.append([module, *_figures(n)])
    rows.append(["all", *_figures(total)])
    surviving = {name for codes in results.values() for name, code in codes.items() if code == SURVIVED}
    stale = sorted(set(equivalent) - surviving)
    return rows, holes, stale


def killed_equivalents(results: dict, equivalent: dict) -> list:
    """The listed equivalents a test killed in this run, in the order of the list."""
    killed = {name for codes in results.values() for name, code in codes.items() if code in KILLED}
    return [name for name in equivalent if name in killed]


def _figures(n: Counter) -> list:
    judged = n["mutants"] - n["equivalent"]
    return [n["mutants"], n["killed"], n["equivalent"], n["holes"],
            f"{1000 * n['killed'] // judged / 10:.1f} %" if judged else "-"]  # rounded down: a hole never reads 100.0


def main(argv: list) -> int:
    again = argv[:1] == ["--killed-equivalents"]
    argv = argv[1:] if again else argv
    folders = [Path(a) for a in argv] or [Path("mutants")]
    mutants = folders[0]
    equivalent, problems = read_equivalents(HERE / "equivalent.txt")
    found = {folder: read_results(folder) for folder in folders}
    results = {module: codes for codes_by_module in found.values() for module, codes in codes_by_module.items()}
    if again:
        names = killed_equivalents(results, equivalent)
        print(f"judged again: {len(names)} listed equivalent(s) a test killed in this run", file=sys.stderr)
        print("".join(f"{name}\n" for name in names), end="")
        return 0
    empty = [folder for folder, codes in found.items() if not codes]
    if empty:  # a pass that did not run (its mutmut failed): said as such, not as stale entries of equivalent.txt
        print(f"no mutmut results under {', '.join(f'{f}/src' for f in empty)}: run `make mutation`")
        return 1
    rows, holes, stale = score(results, equivalent)
    header = ["module", "mutants", "killed", "equivalent", "holes", "score"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths))))
    (mutants / "survivors.txt").write_text("".join(f"{name}\n" for name in holes), encoding="utf-8")
    print(f"score = killed / (mutants - equivalent); {len(holes)} holes listed in {mutants}/survivors.txt")
    problems += [f"equivalent.txt: {name} is not a surviving mutant any more" for name in stale]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
