"""Every entry point given generated flag values: each either works or says one line and exits 2. No traceback, no
hang (a deadline per example), no `nan` or `inf` printed as a figure, nothing written outside its folders.

The rule, not the cases: for each entry point the flags are read off its own parser (so a flag added later is
fuzzed too), a random subset is given, each a value drawn from numbers at and beyond every bound (0, -1, 1e-320,
1e308, 1e400, nan, inf, 2B), text (control characters, a secret-looking `api_key=x`, paths out of the folder) and
the flag's own choices. What would start processes (training, the benchmark's ranks, an emulated node, a SLURM
job) is stopped where it would start: up to there, every check ran. Budget: EXAMPLES examples an entry point in
`make test` (about 40 s in all here); `SCALELAB_FUZZ_EXAMPLES=2000` by hand.
"""

import argparse
import contextlib
import io
import json
import os
import re
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import ROOT
from scalelab.entry import OneLineParser, run_main
from scalelab.errors import UsageError

EXAMPLES = int(os.environ.get("SCALELAB_FUZZ_EXAMPLES", "30"))
DEMO = ROOT / "tests" / "data" / "demo-results"
NUMBERS = st.sampled_from(["0", "-1", "-0", "1e-320", "1e-12", "1e308", "1e400", "nan", "inf", "-inf", "0.5", "3",
                           "1024", "99999999999999999999", "2B", "1.3B", "1e6", " 7 ", "0x10"]) | \
    st.integers(-10**12, 10**12).map(str) | st.floats().map(repr)
TEXT = st.sampled_from(["", "api_key=x", "token: abc", "a\x1b[2Jb", "../../etc/passwd", "/dev/zero", "%s%n",
                        "é" * 3, "x" * 300, "--devices", "1x2", "2x4", "0x0", "powersgd:0", "bf16"]) \
    | st.text(max_size=20)
FIGURE_NOT_A_NUMBER = re.compile(r"(?i)(?<![\w.])-?(nan|inf)(?![\w])")
PATHS = {"output_dir", "plot", "export", "trace", "save_csv", "reference", "write_reference", "compare", "log",
         "from_dir", "site", "config", "nccl_tests"}  # flags whose value is a path: a folder, a file, what is not


class Started(Exception):
    """Where an entry point would start processes (a run, ranks, a job): every check before it passed."""


def start(*args, **kwargs):
    """Stands in for what would start processes: raises Started."""
    raise Started()


def parser_of(entry, *prefix) -> OneLineParser:
    """The parser an entry point builds, caught as it parses (its flags read off it, not listed here)."""
    caught = []
    real = OneLineParser.parse_args

    def catch(self, args=None, namespace=None):
        caught.append(self)
        raise Started()

    OneLineParser.parse_args = catch
    try:
        entry([*prefix])
    except Started:
        pass
    finally:
        OneLineParser.parse_args = real
    return caught[0]


def bounded_values(kind):
    """Values for an entry.bounded flag: its bounds, values inside them (log-uniform), and just beyond them."""
    low, high, convert = kind.low, kind.high, kind.convert
    inside = st.floats(min_value=max(low, 1e-300) if low >= 0 else low, max_value=high, allow_nan=False)
    if convert is int:
        inside = st.integers(int(low), int(high))
    edges = st.sampled_from([low, high, low - 1 if convert is int else low / 2 - 1, high * 2 + 1])
    return st.one_of(inside, inside, inside, edges).map(lambda v: str(convert(v)) if convert is int else repr(v)) \
        | NUMBERS


def flag_values(parser, tmp, draw, skip=()) -> list:
    """A random subset of the parser's optional flags, each with drawn values."""
    actions = [a for a in parser._actions if a.option_strings and a.dest not in ("help", "version", *skip)
               and a.help != argparse.SUPPRESS]
    chosen = draw(st.lists(st.sampled_from(actions), max_size=3, unique_by=lambda a: a.dest)) if actions else []
    argv = []
    for action in chosen:
        if action.nargs == 0:
            argv.append(action.option_strings[-1])
            continue
        values = []
        for _ in range(draw(st.integers(1, 3)) if action.nargs in ("+", "*") else 1):
            if action.dest in PATHS:
                values.append(draw(st.sampled_from([str(tmp / "out"), str(tmp / "missing" / "x"), str(tmp / "demo"),
                                                    "/dev/null", str(tmp / "file.txt")])))
            elif action.choices:
                values.append(str(draw(st.sampled_from(list(action.choices)) | st.sampled_from(list(action.choices))
                                       | TEXT)))
            elif hasattr(action.type, "low"):  # a bounded number: at, inside and beyond its bounds, mostly valid
                values.append(draw(bounded_values(action.type)))
            else:
                values.append(str(draw(NUMBERS | TEXT)))
        argv += [action.option_strings[-1], *values]
    return argv


def run(entry, argv) -> tuple:
    """(exit code, stdout, stderr) of an entry point's main in this process, ended as its script ends it
    (entry.run_main: one line for a UsageError, a RunFailed, an OSError)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run_main("prog", entry, argv)
        except Started:
            code = 0
    return code, out.getvalue(), err.getvalue()


def check(tmp, code, out, err, argv):
    assert code in (0, 1, 2), (argv, code)
    lines = [line for line in err.splitlines() if line.strip()]
    if code == 2:  # bad input: one line
        assert lines and lines[-1].startswith("prog: error:"), (argv, err)
    elif code == 1:  # a failure said in one line, or a verdict the tool exists to give (a FAIL, a reference missed)
        assert (lines and lines[-1].startswith("prog: error:")) or "FAIL" in out + err, (argv, out[-500:], err)
    assert "Traceback" not in out + err, (argv, err)
    bad = FIGURE_NOT_A_NUMBER.search(out)
    assert not bad, (argv, out[max(0, bad.start() - 200):bad.end() + 50])
    for folder, _, names in os.walk(tmp):  # nothing outside the folders it was given
        assert folder.startswith(str(tmp)) or not names


@pytest.fixture
def folder(tmp_path):
    """A fresh tmp folder per example: the demo's results copied in, a plain file beside them."""
    def make():
        root = tmp_path / f"ex{len(os.listdir(tmp_path))}"
        shutil.copytree(DEMO, root / "out")
        shutil.copytree(DEMO, root / "demo")
        (root / "file.txt").write_text("not a folder")
        return root
    return make


SETTINGS = dict(max_examples=EXAMPLES, deadline=30000, suppress_health_check=list(HealthCheck))


@settings(**SETTINGS)
@given(data=st.data())
def test_benchmark_py(folder, data):
    from scalelab.report import cli

    tmp = folder()
    argv = ["--output_dir", str(tmp / "out"), *flag_values(parser_of(cli.main), tmp, data.draw, skip=("output_dir",))]
    check(tmp, *run(cli.main, argv), argv)


@settings(**SETTINGS)
@given(data=st.data())
def test_predict_py(folder, data):
    from scalelab import predict

    tmp = folder()
    base = data.draw(st.sampled_from([["--preset", "tiny", "--compute_s", "0.05"], ["--from", str(tmp / "out")],
                                      ["--preset", "xl", "--global_batch", "64", "--tflops", "312", "--mfu", "0.4"],
                                      ["--params", "7B", "--seq_len", "2048", "--batch_per_device", "4", "--tflops",
                                       "989", "--mfu", "0.5"]]))
    argv = [*base, *flag_values(parser_of(predict.main), tmp, data.draw, skip=("preset", "params", "from_dir"))]
    check(tmp, *run(predict.main, argv), argv)


@settings(**SETTINGS)
@given(data=st.data())
def test_train_py_up_to_its_launch(folder, data, monkeypatch):
    """train.py's flags: parsed, finalized and checked (preflight: the output folder, the memory, the logger) up to
    where its ranks would start."""
    from scalelab import config
    from scalelab.launch import cluster
    from scalelab.train import prepare

    tmp = folder()
    argv = ["--output_dir", str(tmp / "runs"), *flag_values(config.build_parser("train.py"), tmp, data.draw,
                                                            skip=("output_dir", "print_config"))]

    def up_to_launch(argv):
        cfg = config.parse_config(argv)
        launch = cluster.Launch("local", cfg.devices or 1, cfg.num_nodes or 1, "cpu")
        prepare.preflight(config.for_accelerator(cfg, "cpu"), launch, cfg.batch_per_device(launch.world_size))
        raise Started()

    monkeypatch.delenv("SCALELAB_FAULT", raising=False)
    check(tmp, *run(up_to_launch, argv), argv)


@settings(**SETTINGS)
@given(data=st.data())
def test_allreduce_bench_py_up_to_its_ranks(folder, data, monkeypatch):
    from scalelab.bench import allreduce

    monkeypatch.setattr(allreduce, "spawn_local", start)
    monkeypatch.setattr(allreduce, "run", start)
    tmp = folder()
    argv = ["--output_dir", str(tmp / "bench"), *flag_values(parser_of(allreduce.main), tmp, data.draw,
                                                             skip=("output_dir",))]
    check(tmp, *run(allreduce.main, argv), argv)


@settings(**SETTINGS)
@given(data=st.data())
def test_selfcheck_py(folder, data, monkeypatch):
    from scalelab import selfcheck

    monkeypatch.setattr(selfcheck, "write_rate", lambda folder: 1e9)  # not 256 MiB an example
    tmp = folder()
    argv = ["--output_dir", str(tmp / "out"), *flag_values(parser_of(selfcheck.main), tmp, data.draw,
                                                            skip=("output_dir",))]
    check(tmp, *run(selfcheck.main, argv), argv)


@settings(**SETTINGS)
@given(data=st.data())
def test_emulate_py_up_to_its_nodes(folder, data, monkeypatch):
    from scalelab.launch import emulate, netns

    monkeypatch.setattr(netns, "emulated_nodes", start)
    tmp = folder()
    argv = [*flag_values(emulate.build_parser(), tmp, data.draw), "--", "python", "src/train.py"]
    check(tmp, *run(emulate.main, argv), argv)


@settings(**SETTINGS)
@given(data=st.data())
def test_submit_py_up_to_its_jobs(folder, data, monkeypatch):
    from scalelab.launch import sweep

    monkeypatch.setattr(sweep.Submitter, "submit", start)
    monkeypatch.chdir(ROOT)  # where site.sh is, as a user stands
    tmp = folder()
    argv = ["--output_dir", str(tmp / "sweep"), *flag_values(sweep.build_parser(), tmp, data.draw,
                                                             skip=("output_dir", "train_args"))]
    check(tmp, *run(sweep.main, argv), argv)


def test_the_fuzz_reads_every_entry_points_flags_and_stops_before_anything_starts():
    """The parsers are caught, not listed: a flag added to an entry point is fuzzed without a change here."""
    from scalelab import predict
    from scalelab.report import cli

    assert "--bucket_mb" in parser_of(predict.main)._option_string_actions
    assert "--forecast" in parser_of(cli.main)._option_string_actions
    assert json.dumps(FIGURE_NOT_A_NUMBER.findall("nan % inf -inf 12 % info infinite Infiniband")) == \
        '["nan", "inf", "inf"]'


@settings(max_examples=EXAMPLES, deadline=30000, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_what_train_py_accepts_at_its_start_its_record_accepts_at_its_end(data):
    """One set of bounds: --learning_rate 1e31 trained and then left no record, a 20,000-character --run_name too
    (the record's own bounds refused them at the end). Every bounded flag of train.py at its bounds and inside
    them, and any run name it takes: the record of the run validates."""
    from helpers import make_result
    from scalelab import config, results

    parser = config.build_parser("train.py")
    bounded = [a for a in parser._actions if hasattr(a.type, "low")]
    argv = ["--model", data.draw(st.sampled_from(["mlp", "gpt"]))]
    for action in data.draw(st.lists(st.sampled_from(bounded), max_size=4, unique_by=lambda a: a.dest)):
        kind = action.type
        value = data.draw(st.sampled_from([kind.low, kind.high]) | (
            st.integers(int(kind.low), int(kind.high)) if kind.convert is int else
            st.floats(kind.low, kind.high, allow_nan=False)))
        argv += [action.option_strings[-1], str(kind.convert(value)) if kind.convert is int else repr(value)]
    argv += ["--run_name", data.draw(st.text(max_size=40) | st.sampled_from(["x" * 200, "x" * 20000, "api_key=x"]))]
    try:
        cfg = config.parse_config(argv)
    except (UsageError, SystemExit):  # refused at the start, in one line: nothing to record
        return
    record = make_result("r", 1, model=cfg.model)
    record.update(run_name=cfg.run_name, config=cfg.to_dict())
    record["workload"].update(cfg.workload())
    results.validate(results.nan_to_none(record))
