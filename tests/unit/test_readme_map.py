"""README's folder map ("## Folders (the data flows one way)") stays true: every folder and module it names exists,
and every package folder of src/scalelab/ is in it.

The map's rows: a folder of the repository at the left margin (`src/`, `tests/`, ...), a member of the package
indented by two spaces (`  launch/`, `  results.py`: under src/scalelab/), continuation lines indented further. A
path named in a row's words (`train/loop.py`, `unit/`, `allreduce_bench.py`, `site.sh`) is read inside the row's
own folder: the repository folder it names, or src/scalelab/ for a member of the package.
"""

import re

from helpers import ROOT

PACKAGE = ROOT / "src" / "scalelab"
PATH = re.compile(r"(?<![\w/.-])((?:[A-Za-z_][\w-]*/)+|(?:[A-Za-z_][\w-]*/)*[A-Za-z_]\w*\.(?:py|sh))(?![\w/-])")


def map_rows() -> list:
    """[(a member of the package?, where the row's words are read, its key, its words)], from README's map."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Folders (the data flows one way)", 1)[1].split("```", 2)[1]
    rows = []
    for line in block.splitlines()[2:]:  # the language line (empty) and the arrow line
        if line.startswith("    ") or not line.strip():
            rows[-1][3].append(line.strip())
            continue
        key, _, words = line.strip().partition(" ")
        member = line.startswith("  ")
        base = PACKAGE if member else ROOT / key if key.endswith("/") else ROOT
        rows.append((member, base, key, [words.strip()]))
    return [(member, base, key, " ".join(words)) for member, base, key, words in rows]


def test_the_map_has_its_rows():
    keys = [key for _, _, key, _ in map_rows()]
    assert keys[:2] == ["src/", "src/scalelab/"] and "tests/" in keys and "results.py" in keys, keys


def test_every_folder_and_module_the_map_names_exists():
    missing = []
    for member, base, key, words in map_rows():
        if not ((PACKAGE if member else ROOT) / key).exists():
            missing.append(key)
        for path in PATH.findall(words):
            if not (base / path).exists():
                missing.append(f"{path} (in the row of {key})")
    assert not missing, f"README's map names what does not exist: {missing}"


def test_every_package_folder_is_a_row_of_the_map_and_every_nested_one_is_named():
    rows = map_rows()
    members = {key for member, _, key, _ in rows if member}
    named = {path for member, _, _, words in rows if member for path in PATH.findall(words)}
    packages = sorted(p.parent.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("__init__.py")
                      if p.parent != PACKAGE)
    assert len(packages) >= 8
    top = [p for p in packages if p.count("/") == 1]
    nested = [p for p in packages if p.count("/") > 1]
    absent = [p for p in top if p not in members] + [p for p in nested if p not in members | named]
    assert not absent, f"package folders README's map leaves out: {absent}"
