"""The workshop chapters in docs/ work as written.

* A ```bash block preceded by the line `<!-- docs-test: run -->` is something a participant runs on a CPU
  machine: it runs here, with `bash -euo pipefail`, in a temporary folder where src/, slurm_jobs/, benchmarks/,
  tests/ and the build files are symlinks to the repository (so `outputs/...` lands in the temporary folder)
  and `python` is this interpreter. Blocks of one chapter run in order in one folder (a later block may read
  what an earlier one wrote); each chapter gets its own folder. A run block must exit 0 and print no
  traceback (scalelab's errors are one line), and every line of the output fence that follows it must be
  printed, with numbers and run ids masked and spacing aside; a line holding `…` (output the chapter trimmed,
  or a line it marks as varying between runs, e.g. which cause limits a CPU rehearsal) is not compared. A block
  that runs only src/predict.py (arithmetic, the same on any machine) is compared exactly.
* A ```bash block preceded by `<!-- docs-test: slurm -->` is something a participant runs on a SLURM login node:
  it runs the same way, in order with the chapter's other such blocks, against the local 2-node SLURM cluster
  (tests/slurm_cluster/, conftest's `slurm_env`), and is compared the same way.
* Every other ```bash block (module load, GPU runs, the GPU cluster's sbatch) is checked statically: each
  `python src/X.py ...` / `python benchmarks/X.py ...` uses only flags that script's parser has (the option
  column of its --help, not words inside help texts; the flags
  after `submit.py ... --`, after `emulate.py ... -- SCRIPT` and after a slurm_jobs/*.sh script are checked
  against the script they reach).
* An image of docs/img preceded by `<!-- docs-test: image PATH -->` is what a run block of its chapter draws at
  PATH: after the blocks ran, the texts the regenerated figure shows (titles, legend, labels, kept in the PNG by
  report/plots.py) must be the committed image's, numbers masked; and every figure its caption quotes (a number
  with %, × or ms; a name in backticks) must be in the committed image. A caption cannot outlive its picture.
* A ```python block preceded by `<!-- docs-test: excerpt PATH -->` shows real code: its lines, indentation and
  comments included, appear in PATH as one run of consecutive lines.
* Every repository path (src/..., slurm_jobs/..., tests/..., docs/..., reframe/...) a page in docs/ names exists.
* Every relative Markdown link in docs/ points to an existing file.
"""

import functools
import re
import shlex
import subprocess
import sys

import pytest

from helpers import DOCS, ROOT, RUN_MARK, SLURM_MARK, bash_blocks

CHAPTERS = sorted(DOCS.glob("[0-9][0-9]-*.md"))
EXCERPT_MARK = re.compile(r"^<!-- docs-test: excerpt (\S+) -->$")
IMAGE_MARK = re.compile(r"^<!-- docs-test: image (\S+) -->$")
IMAGE = re.compile(r"^!\[([^\]]*)\]\((img/[\w.-]+\.png)\)$")
# Repository paths a chapter may name (in code or prose); each must exist.
REPO_PATH = re.compile(r"(?<![\w./-])((?:src|slurm_jobs|benchmarks|tests|docs|reframe)/[\w./-]*\.(?:py|sh|md))")
SCRIPT = re.compile(r"^(src|benchmarks)/[\w-]+\.py$")
# Arguments after a job script go to the Python script it runs.
JOB_SCRIPTS = {"slurm_jobs/single_gpu.sh": "src/train.py", "slurm_jobs/single_node_multi_gpu.sh": "src/train.py",
               "slurm_jobs/multi_node_multi_gpu.sh": "src/train.py",
               "slurm_jobs/allreduce_bench.sh": "src/allreduce_bench.py",
               "slurm_jobs/sweep.sh": "slurm_jobs/sweep.sh"}  # its own options, then train.py's after `--`
def documented_outputs(path):
    """{bash block index: lines of the plain ``` fence that follows it (before the next ```bash block)}: what
    the chapter says the block prints."""
    lines = path.read_text().splitlines()
    outputs, block, i = {}, 0, 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
            if fence == "```bash":
                block += 1
            elif fence == "```" and block and block not in outputs:
                outputs[block] = lines[i + 1:end]
            i = end
        i += 1
    return outputs


# Blocks that only run src/predict.py: analytic, the same output on any machine.
ANALYTIC = re.compile(r"(python src/predict\.py [^\n]*(\\\n[^\n]*)*\n?)+")
RUN_ID = re.compile(r"\d{8}-\d{6}-[\w.-]*?pid\d+-[0-9a-f]{8}(-[0-9a-f]{4})?")


def commands(text):
    """Shell words of each logical line (continuations joined, comments dropped)."""
    for line in text.replace("\\\n", " ").splitlines():
        if line.strip():
            lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            try:
                yield list(lexer)
            except ValueError as exc:
                raise AssertionError(f"cannot parse shell line {line!r}: {exc}") from None


@functools.lru_cache(maxsize=None)
def accepted_flags(script):
    if script.endswith(".sh"):  # a bash parser: the patterns of its `case` (`--wait) ...`, `--output_dir=*) ...`)
        return frozenset(re.findall(r"^ +(--[\w-]+)(?:=\*)?\)", (ROOT / script).read_text(), re.M))
    proc = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, f"{script} --help failed: {proc.stderr[-1000:]}"
    # The parser's own option strings: argparse lists each option at the start of its line ("  --flag FLAG",
    # "  -h, --help"); a flag merely mentioned inside another option's help text does not count.
    options = re.findall(r"^ {2}(?:-\w(?: \w+)?, )?(--[A-Za-z][\w-]*(?:, --[A-Za-z][\w-]*)*)", proc.stdout, re.M)
    return frozenset(flag for group in options for flag in group.split(", "))


def flag_problems(words):
    """Flags in one command line that its script does not accept."""
    problems = []
    for k, word in enumerate(words):
        script = word if SCRIPT.match(word) else JOB_SCRIPTS.get(word)
        if script is None:
            continue
        rest = words[k + 1:]
        for i, arg in enumerate(rest):
            if arg and set(arg) <= set("|&;<>"):  # a shell operator: the command ends here
                break
            if arg == "--" and script.endswith(("submit.py", "sweep.sh")):
                script = "src/train.py"  # submit.py and sweep.sh pass what follows `--` to train.py unchanged
                continue
            if arg == "--" and script.endswith("emulate.py"):
                script = rest[i + 1] if i + 1 < len(rest) else script  # `emulate.py ... -- SCRIPT ARGS` runs SCRIPT
                continue
            if arg.startswith("--") and len(arg) > 2:
                flag = arg.split("=", 1)[0]
                if flag not in accepted_flags(script):
                    problems.append(f"{script} does not accept {flag}")
    return problems


def test_the_chapters_are_there():
    names = [p.name for p in CHAPTERS]
    assert len(names) == 16 and [n[:2] for n in names] == [f"{i:02d}" for i in range(1, 17)], names
    index = (DOCS / "README.md").read_text()
    for name in names:
        assert f"]({name})" in index, f"docs/README.md does not link {name}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_cluster_commands_use_real_flags(chapter):
    problems = []
    for n, mark, line, text in bash_blocks(chapter):
        if mark == RUN_MARK:
            continue
        for words in commands(text):
            problems += [f"block {n} (line {line}): {p}" for p in flag_problems(words)]
    assert not problems, f"{chapter.name}:\n  " + "\n  ".join(problems)


def excerpts(page):
    """[(path, first line number, [lines])] of the page's ```python blocks marked as excerpts of a file."""
    lines, found = page.read_text().splitlines(), []
    for i, line in enumerate(lines):
        mark = EXCERPT_MARK.match(line.strip())
        if mark:
            start = next(j for j in range(i + 1, len(lines)) if lines[j].strip())
            assert lines[start].strip() == "```python", f"{page.name}:{i + 1}: an excerpt mark must precede ```python"
            end = next(j for j in range(start + 1, len(lines)) if lines[j].strip() == "```")
            found.append((mark.group(1), start + 2, lines[start + 1:end]))
    return found


@pytest.mark.parametrize("page", [p for p in sorted(DOCS.glob("*.md")) if excerpts(p)], ids=lambda p: p.name)
def test_code_excerpts_are_the_code(page):
    for path, line_no, shown in excerpts(page):
        source = (ROOT / path).read_text().splitlines()
        n = len(shown)
        assert n and any(source[k:k + n] == shown for k in range(len(source) - n + 1)), (
            f"{page.name}:{line_no}: the excerpt is not {path} as it is now (lines changed, or not consecutive)")


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_named_repository_paths_exist(page):
    missing = [path for path in sorted(set(REPO_PATH.findall(page.read_text()))) if not (ROOT / path).exists()]
    assert not missing, f"{page.name} names files that do not exist: {missing}"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links inside code blocks are not links
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http:, https:, mailto:, an anchor on this page
        if not (page.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


NUMBER = re.compile(r"\d[\d,]*(\.\d+)?(e[-+]?\d+)?")


# The machine's CPU model, as the all-reduce benchmark's banner ("backend gloo, device AMD EPYC |") and its
# nccl-tests rank lines ("[0x00] Intel(R) Xeon(R) Processor") name it: a chapter written on one CPU passes on another.
CPU_MODEL = (re.compile(r"(backend \w+, device ).+?( \|)"), re.compile(r"(\[0x[0-9a-f]+\] ).+$"))


# An efficiency's "!" (above 100 % + noise: tables.speedup_cells) goes with its number: a CPU whose caches hold a
# device's half of a strong-scaling batch measures 108 % ! where the chapter's measured 87 % (CI, 2026-12-06)
FLAGGED = re.compile(r"(\d %) !(?=\s|$)")


def shape(line):
    """A line with its numbers, run ids and CPU model masked, its spacing collapsed and a table's rule of dashes cut
    to three: what stays the same between two runs of a SLURM block (job ids, timings, node numbers and the column
    widths they make change) and between two machines."""
    for pattern in CPU_MODEL:
        line = pattern.sub(r"\1<cpu>\2" if pattern.groups == 2 else r"\1<cpu>", line)
    line = FLAGGED.sub(r"\1", line)
    return " ".join(re.sub(r"-{3,}", "---", NUMBER.sub("N", RUN_ID.sub("<run_id>", line))).split())


def test_a_chapter_line_matches_on_another_cpu_but_not_with_another_figure_name():
    doc = ("scalelab all-reduce: world size 2 = 1 node(s) x 2 process(es), backend gloo, device Intel(R) Xeon(R) "
           "Processor | float32, 32 KiB to 64 MiB x2")
    assert shape(doc) == shape(doc.replace("Intel(R) Xeon(R) Processor", "AMD EPYC 7B13 64-Core Processor"))
    assert shape(doc) != shape(doc.replace("float32", "bfloat16")) != shape(doc.replace("backend gloo", "backend nccl"))
    row = "2   1   1   9,009                          1.74×      87 %          —                 4,504"
    assert shape(row) == shape(row.replace("87 %", "108 % !")) != shape(row.replace("87 %", "— "))
    assert shape(row) != shape(row.replace("1.74×", "≠ job"))
    rank = "#  Rank  0 Group  0 Pid  25259 on         vm device  0 [0x00] Intel(R) Xeon(R) Processor"
    assert shape(rank) == shape(rank.replace("Intel(R) Xeon(R) Processor", "AMD EPYC"))
    assert shape(rank) != shape(rank.replace(" vm ", " node2 "))  # the host is still compared


def compare_blocks(chapter, ran):
    """Each block that ran exits 0 without a traceback and prints every line the chapter shows for it."""
    outputs = documented_outputs(chapter)
    stale = []  # every block's mismatch, not only the first: a chapter is refreshed in one go
    for n, line, text, proc in ran:
        where = f"{chapter.name}, bash block {n} (line {line}: {text.splitlines()[0]!r})"
        tail = proc.stdout[-3000:]
        assert proc.returncode == 0, f"{where} exited {proc.returncode}; last output:\n{tail}"
        assert "Traceback (most recent call last)" not in proc.stdout, f"{where} printed a traceback:\n{tail}"
        shown = outputs.get(n, [])
        if ANALYTIC.fullmatch(text.strip()):  # pure arithmetic: every line the chapter shows, exactly
            printed = [line.rstrip() for line in proc.stdout.splitlines()]
            missing = [line.rstrip() for line in shown if line.strip() and line.rstrip() not in printed]
        else:  # every line shown, numbers masked; `…` marks what the chapter trimmed or what varies
            printed = {shape(line) for line in proc.stdout.splitlines()}
            missing = [line for line in shown if line.strip() and "…" not in line and shape(line) not in printed]
        if missing:
            stale.append(f"{where}: the chapter shows lines the command no longer prints: {missing}\n"
                         f"it printed:\n{proc.stdout[-6000:]}")
    assert not stale, "\n\n".join(stale)


def chapters_with(mark):
    return [p for p in CHAPTERS if any(m == mark for _, m, _, _ in bash_blocks(p))]


@pytest.mark.slow
@pytest.mark.parametrize("chapter", chapters_with(RUN_MARK), ids=lambda p: p.stem)
def test_run_blocks_run(chapter, chapter_run):
    folder, ran, _ = chapter_run(chapter, RUN_MARK)
    compare_blocks(chapter, ran)
    for drawn, image, _ in images(chapter):
        shown, now = drawn_texts(DOCS / image), drawn_texts(folder / drawn)
        assert shown == now, (f"{chapter.name}: {image} is no longer what {drawn} draws; regenerate it (and its "
                              f"caption): only in the image {sorted(shown - now)}, "
                              f"only in the new one {sorted(now - shown)}")


# A figure names a rank that lost its core to other work (report/plausible.py): that says how busy the machine was
# while the chapter's block ran (a CI runner's neighbours, a test beside it), not what the figure draws.
CONTENDED = re.compile(r"other work shared its cores")


def drawn_texts(path) -> set:
    """The texts a figure shows, numbers masked, less the lines that say how busy the machine was."""
    return {shape(line) for line in image_text(path).splitlines() if not CONTENDED.search(line)}


def images(chapter):
    """[(the path a run block draws, the committed image, its caption)] of every marked image: the caption is
    the alt text and the paragraph right below the image."""
    lines = chapter.read_text().splitlines()
    found = []
    for k, line in enumerate(lines):
        mark = IMAGE_MARK.match(line.strip())
        if mark:
            image = IMAGE.match(lines[k + 1].strip())
            assert image, f"{chapter.name}:{k + 1}: an image marker not followed by ![...](img/...png)"
            below = []
            for text in lines[k + 3:]:
                if not text.strip():
                    break
                below.append(text)
            found.append((mark.group(1), image.group(2), " ".join([image.group(1), *below])))
    return found


def image_text(path):
    from PIL import Image  # matplotlib's own dependency

    with Image.open(path) as im:
        text = im.text.get("Description")
    assert text, f"{path}: no texts kept in the PNG: not drawn by this scalelab's report (regenerate it)"
    return text


QUOTED = re.compile(r"`([^`]+)`|(\d[\d,.]*\s?(?:%|×|ms))")


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if images(c)], ids=lambda p: p.stem)
def test_captions_quote_their_image(chapter):
    for _, image, caption in images(chapter):
        text = " ".join(image_text(DOCS / image).split())
        missing = [a or b for a, b in QUOTED.findall(caption) if " ".join((a or b).split()) not in text]
        assert not missing, f"{chapter.name}: the caption of {image} quotes what the image does not show: {missing}"


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("chapter", chapters_with(SLURM_MARK), ids=lambda p: p.stem)
def test_slurm_blocks_run(chapter, chapter_run, slurm_env):
    # SLURM_CONF: the profile and every other setting as on a login node; the queue is drained after the blocks
    _, ran, left = chapter_run(chapter, SLURM_MARK, SLURM_CONF=slurm_env["SLURM_CONF"])
    compare_blocks(chapter, ran)
    assert not left, f"{chapter.name}: jobs still queued after its blocks ended:\n{left}"


def test_published_figures_name_their_source_and_hardware():
    """Chapter 12 shows others' measurements: every row of its table links its source and states its hardware,
    so no published figure can pass for scalelab's own."""
    text = (DOCS / "12-published-reference-points.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Source")]
    links = dict(re.findall(r"^\[([\w-]+)\]: (https://\S+)$", text, re.M))
    assert len(rows) >= 5, rows
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        refs = re.findall(r"\]\[([\w-]+)\]", cells[0])
        assert refs and all(r in links for r in refs), f"no source link: {row}"
        assert re.search(r"GPU|A100|P100|Pascal", cells[1]), f"no hardware: {row}"


def test_the_folder_to_show_when_the_queue_stalls_reports():
    """docs/results/cpu-rehearsal (docs/instructors.md): a whole demo folder that reports as a CPU rehearsal, each
    rung named, all of the track record inside its band; never a GPU figure."""
    out = subprocess.run([sys.executable, str(ROOT / "src" / "benchmark.py"), "--output_dir",
                          str(DOCS / "results" / "cpu-rehearsal")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert "scalelab report: 6 run(s)" in out.stdout and out.stdout.count("CPU rehearsal (gloo)") == 2
    for rung in ("2 (emulated 2 Gbit/s)", "2 (emulated 200 Mbit/s)"):
        assert rung in out.stdout
    assert "had a core" not in out.stdout  # a quiet machine's runs
    # the MLP's band (6-95 %) says nothing: not counted; the GPT's three are inside
    assert "3 of 3 inside the 80 % band (100 %; 1 band(s) wider than 50 points not counted" in out.stdout
