"""benchmarks/report_speed.py's synthetic results are results a reader takes: a generator that drifts from the
declaration (a rank record per rank, the workload's options) would time the skip path, not the report."""

import importlib.util
import random

from helpers import ROOT
from scalelab import results

_spec = importlib.util.spec_from_file_location("report_speed", ROOT / "benchmarks" / "report_speed.py")
report_speed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_speed)


def test_every_synthetic_result_is_read_and_the_twenty_groups_are_twenty(tmp_path):
    rng = random.Random(0)
    for i in range(60):
        results.write(str(tmp_path), report_speed.synthetic(i, rng))
    found, skipped = results.scan(str(tmp_path))
    assert skipped == [] and len(found) == 60
    assert {r["launch"]["world_size"] for r in found} == {1, 2, 4, 8}
    assert len({results.group_key(r) for r in found}) == 20
