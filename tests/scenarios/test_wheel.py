"""scalelab as a user installs it: the built wheel (not an editable checkout) in a fresh venv, run from a folder
that is not the checkout. Every console script answers --help and --version under its own name; the demo's
one-node rungs and the report run from the installed package alone."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow
SCRIPTS = ("train", "report", "demo", "submit", "predict", "allreduce", "selfcheck", "emulate")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bin folder, a working folder outside the checkout): the wheel installed in a fresh venv whose only other
    packages are this interpreter's (torch, Lightning, ...: reached through a path file, not installed twice)."""
    base = tmp_path_factory.mktemp("wheel")
    tree = base / "checkout"  # setuptools builds in the source tree (build/): a copy keeps the checkout clean
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".venv", ".git", "outputs", "build", "dist",
                                                              "*.egg-info", "__pycache__", ".*_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(base / "dist"), str(tree)], check=True, capture_output=True, timeout=300)
    (wheel,) = (base / "dist").glob("scalelab-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True, timeout=300)
    py = base / "venv" / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    Path(purelib, "scalelab-test-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    work = base / "work"
    work.mkdir()
    return base / "venv" / "bin", work


def _run(bin_dir, work, name, *args, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(bin_dir / f"scalelab-{name}"), *map(str, args)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_wheel_holds_the_package_not_the_checkout(installed):
    bin_dir, work = installed
    where = subprocess.run([str(bin_dir / "python"), "-c", "import scalelab; print(scalelab.__file__)"], cwd=work,
                           capture_output=True, text=True, check=True).stdout
    assert "site-packages" in where and str(ROOT) not in where


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_console_script_answers_help_and_version_by_its_own_name(installed, name):
    bin_dir, work = installed
    version = _run(bin_dir, work, name, "--version")
    assert version.returncode == 0 and version.stdout.startswith(f"scalelab-{name} (scalelab) "), version
    helped = _run(bin_dir, work, name, "--help")
    assert helped.returncode == 0 and helped.stdout.startswith(f"usage: scalelab-{name} "), helped.stdout[:300]
    assert "(default: None)" not in helped.stdout and "(default: )" not in helped.stdout
    bad = _run(bin_dir, work, name, "--no_such_flag")
    assert bad.returncode == 2 and bad.stderr.startswith(f"scalelab-{name}: error: "), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_help_shows_the_real_defaults(installed):
    bin_dir, work = installed
    text = " ".join(_run(bin_dir, work, "train", "--help").stdout.split())
    assert "before the run fails (default: 180.0)" in text and "(default: outputs)" in text


def test_the_sweep_finds_no_site_file_above_site_packages(installed):
    bin_dir, work = installed
    proc = _run(bin_dir, work, "submit", "--cluster", "slurm")
    assert proc.returncode == 2 and "no slurm_jobs/site.sh here" in proc.stderr and "--site FILE" in proc.stderr
    proc = _run(bin_dir, work, "submit", "--cluster", "slurm", "--site", "nowhere.sh")
    assert proc.returncode == 2 and "--site nowhere.sh: no such file" in proc.stderr


def test_demo_rungs_and_report_run_from_the_installed_package(installed):
    bin_dir, work = installed
    proc = _run(bin_dir, work, "demo", "--models", "mlp", "--link_gbit", "--output_dir", "out", timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = [json.loads(p.read_text()) for p in (work / "out").glob("*/result.json")]
    trained = sorted(r["launch"]["world_size"] for r in results if r["kind"] == "training"
                     and r.get("workload", {}).get("model") == "mlp")
    assert trained == [1, 1, 2, 2]  # each training rung twice (the demo's --repeats default)
    report = _run(bin_dir, work, "report", "--output_dir", "out")
    assert report.returncode == 0 and "scalelab report: 4 run(s) in out/" in report.stdout, report.stdout[-2000:]
    assert "(all-reduce benchmark: " in report.stdout  # the installed benchmark's rows feed the explanation


def test_the_python_floor_claimed_is_the_one_linted_for_and_tested():
    """setup.cfg's python_requires, ruff's target-version and the interpreter CI runs the suite under name the same
    version: a claim of an older Python no test runs under is how `X | None` shipped to a 3.9 that cannot import it."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    floor = cfg["options"]["python_requires"].removeprefix(">=").strip()
    ruff = re.search(r'^target-version = "py(\d)(\d+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert f"{ruff[1]}.{ruff[2]}" == floor
    assert f"Programming Language :: Python :: {floor}" in cfg["metadata"]["classifiers"]
    if os.environ.get("CI"):
        assert "%d.%d" % sys.version_info[:2] == floor, "CI must run the oldest Python setup.cfg claims"
