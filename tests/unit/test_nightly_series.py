"""benchmarks/nightly_series.py's flags: what it takes writes a site's nights; anything else is one line, nothing
written.

A night count of -3 printed "-6 results of -3 nights", and a scatter of nan wrote completed results with null timings
that the history then judged ("every level held").
"""

import contextlib
import io
import math
import runpy
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "nightly_series.py"


def _run(folder, *args) -> tuple:
    """(exit code, stdout, stderr) of the script with these flags, in this process (argparse's exit: 2)."""
    out, err, code = io.StringIO(), io.StringIO(), 0
    argv = [str(SCRIPT), "--output_dir", str(folder), *map(str, args)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", argv)
        try:
            runpy.run_path(str(SCRIPT), run_name="__main__")
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=30, deadline=None)
@given(flag=st.sampled_from(["--nights", "--scatter", "--seed", "--planted"]),
       value=st.one_of(st.integers(-40, 40).map(str), st.floats(allow_nan=True).map(str),
                       st.sampled_from(["nan", "inf", "-0.1", "0", "1e9", "5:-0.2", "-5:-0.2", "5:-1", "5:0.1:3",
                                        "9:0.1", "2:0.5:5", "1:0.1:2:3", ":", "x"]),
                       st.text(max_size=12).filter(lambda t: not t.startswith("-"))))
def test_a_flag_is_taken_within_its_bounds_or_refused_in_one_line_with_nothing_written(tmp_path_factory, flag, value):
    folder = tmp_path_factory.mktemp("nights")
    code, out, err = _run(folder, "--nights", 6, flag, value) if flag != "--nights" else _run(folder, flag, value)
    if code == 0:
        nights = int(value) if flag == "--nights" else 6
        assert 1 <= nights <= 36500 and out.startswith(f"{2 * nights} results of {nights} nights"), out
        if flag == "--scatter":
            assert 0 <= float(value) <= 1 and math.isfinite(float(value))
        return
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("nightly_series.py: error: "), err
    assert "expected one argument" not in err, err  # a negative value is refused by its flag's bound, in its words
    assert not any(folder.iterdir()), "a refused flag wrote results"


@pytest.mark.parametrize("args", [("--nights", -3), ("--nights", 0), ("--scatter", "nan"), ("--scatter", -0.1),
                                  ("--nights", 12, "--planted", "12:-0.2"), ("--planted", "5:-1")])
def test_the_values_a_review_found_taken_are_refused(tmp_path, args):
    code, out, err = _run(tmp_path, *args)
    assert code == 2 and out == "" and not any(tmp_path.iterdir()), (out, err)
