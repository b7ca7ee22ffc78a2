"""`make mutation`'s score (tests/mutation/score.py): what counts as caught, equivalent or a hole, and which listed
equivalents it judges again."""

import importlib.util
import json
from pathlib import Path

SCORE = Path(__file__).resolve().parents[1] / "mutation" / "score.py"
_spec = importlib.util.spec_from_file_location("mutation_score", SCORE)
score = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(score)

CODES = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 0, "m.x_f__mutmut_3": 0, "m.x_f__mutmut_4": 1}


def _mutants(tmp_path):
    meta = tmp_path / "mutants" / "src" / "m.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": CODES}))
    return tmp_path / "mutants"


def test_a_listed_equivalent_a_test_killed_is_judged_again_and_only_it():
    """Before: one failure of a test in 12,000 mutants turned a reviewed entry stale and failed the whole run."""
    listed = {"m.x_f__mutmut_4": "why", "m.x_f__mutmut_2": "why", "m.x_f__mutmut_9": "gone with its code"}
    assert score.killed_equivalents({"m.py": CODES}, listed) == ["m.x_f__mutmut_4"]


def test_the_second_form_prints_the_names_and_the_first_still_fails_on_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(score, "read_equivalents", lambda path: ({"m.x_f__mutmut_4": "why"}, []))
    mutants = _mutants(tmp_path)
    assert score.main(["--killed-equivalents", str(mutants)]) == 0
    out, err = capsys.readouterr()
    assert out == "m.x_f__mutmut_4\n" and "1 listed equivalent(s) a test killed" in err
    assert score.main([str(mutants)]) == 1  # killed again on the rerun: stale, the list needs a look
    out = capsys.readouterr().out
    assert "m.x_f__mutmut_4 is not a surviving mutant any more" in out
    assert (mutants / "survivors.txt").read_text() == "m.x_f__mutmut_2\nm.x_f__mutmut_3\n"


def test_a_score_with_a_hole_never_reads_100_percent():
    rows, holes, stale = score.score({"m.py": {f"n{i}": 1 for i in range(1999)} | {"hole": 0}}, {})
    assert rows[0][1:] == [2000, 1999, 0, 1, "99.9 %"] and holes == ["hole"] and stale == []


def test_two_passes_are_scored_as_one_run(tmp_path, capsys, monkeypatch):
    """make mutation's record pass writes its own folder: its listed equivalent is not stale for the first pass's
    folder, and both modules are rows of one table."""
    first = _mutants(tmp_path)
    second = tmp_path / "record" / "mutants" / "src" / "r.py.meta"
    second.parent.mkdir(parents=True)
    second.write_text(json.dumps({"exit_code_by_key": {"r.x_g__mutmut_1": 0, "r.x_g__mutmut_2": 1}}))
    monkeypatch.setattr(score, "read_equivalents", lambda path: ({"r.x_g__mutmut_1": "why"}, []))
    assert score.main([str(first), str(second.parents[1])]) == 0
    out = capsys.readouterr().out
    assert [line.split()[:5] for line in out.splitlines()[1:4]] == [
        ["m.py", "4", "2", "0", "2"], ["r.py", "2", "1", "1", "0"], ["all", "6", "3", "1", "2"]]
    assert score.main([str(first)]) == 1  # the record pass's entry, seen without its folder: stale
    capsys.readouterr()
    assert score.main([str(first), str(tmp_path / "never-ran")]) == 1  # a pass whose mutmut failed: said so
    assert capsys.readouterr().out == f"no mutmut results under {tmp_path / 'never-ran'}/src: run `make mutation`\n"
    assert score.main(["--killed-equivalents", str(second.parents[1])]) == 0
