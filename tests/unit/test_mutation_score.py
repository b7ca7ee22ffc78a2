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
