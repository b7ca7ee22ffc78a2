"""benchmarks/predictor_validation.py and its data: every published point says where it came from and what was
assumed, its efficiency is what its throughputs give, and the scoring arithmetic (band, coverage, errors) is right
on hand-made rows whose answers are worked out here."""

import importlib.util
import re

import pytest

from helpers import ROOT
from scalelab.perfmodel.network import GRAD_DTYPE_BYTES

_spec = importlib.util.spec_from_file_location("predictor_validation", ROOT / "benchmarks" / "predictor_validation.py")
pv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pv)

DATA = pv.load()
POINTS, SYSTEMS = DATA["points"], DATA["systems"]
PINNED_GITHUB = re.compile(r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/\S+")


def test_the_set_is_big_enough_and_its_ids_unique():
    ids = [p["id"] for p in POINTS]
    assert len(ids) >= 12
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)
    assert len({p["system"] for p in POINTS}) >= 4
    assert any(p["nodes"] > 1 for p in POINTS)


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p["id"])
def test_every_point_names_its_source_and_what_it_assumed(point):
    for field in ("section", "hardware_as_stated", "workload", "params_source", "grad_dtype_source", "assumptions"):
        assert point[field].strip(), field
    assert point["source"].startswith("https://"), point["source"]
    if point["source"].startswith("https://github.com/"):
        assert PINNED_GITHUB.fullmatch(point["source"]), "a GitHub source is pinned to a commit"
    assert point["system"] in SYSTEMS
    assert point["grad_dtype"] in GRAD_DTYPE_BYTES
    assert point["baseline"] in pv.BASELINES
    assert point["gpus"] % point["nodes"] == 0 and point["gpus"] > pv.baseline_gpus(point)
    assert point["nodes"] == 1 or point["gpus"] // point["nodes"] == SYSTEMS[point["system"]]["gpus_per_node"]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p["id"])
def test_the_efficiency_in_the_row_is_what_its_throughputs_give(point):
    assert pv.published_efficiency(point) == pytest.approx(point["efficiency"], abs=5e-5)


def test_every_link_figure_has_its_source_and_an_unknown_one_is_never_needed():
    for name, system in SYSTEMS.items():
        assert system["inter_source"].startswith("http") and system["nics_per_node"] * system["nic_gbit"] > 0, name
        assert system["intra_source"].startswith("http") and system["assumptions"].strip(), name
        if system["intra_GBps"] is None:
            theirs = [p for p in POINTS if p["system"] == name]
            assert all(p["nodes"] > 1 and p["baseline"] == "1 GPU" for p in theirs), name


# --- the scoring arithmetic on hand-made rows ---------------------------------------------------------------------

SYSTEM = {"gpus_per_node": 4, "intra_GBps": 100, "nics_per_node": 2, "nic_gbit": 40}  # 80 Gbit/s = 10 GB/s per node


def _point(**kw):
    # 1.25e9 fp16 gradients = 2.5 GB; one batch of 1 sample at 2 samples/s per GPU = 0.5 s
    base = dict(id="hand", system="hand", params=1.25e9, grad_dtype="fp16", per_gpu_batch=1, items_per_sample=1,
                gpus=8, nodes=2, accumulation=1, baseline="1 GPU", baseline_accumulation=1, baseline_throughput=2,
                throughput=12)
    return {**base, **kw}


def test_a_one_gpu_baseline_band_is_the_predictors_efficiency_at_that_scale():
    lo, hi, row = pv.band(_point(), SYSTEM)
    comm = 2 * 7 / 8 * 2.5 / 10  # ring over 8 GPUs at the 10 GB/s inter-node link: 0.4375 s
    assert row.comm_s == pytest.approx(comm)
    assert lo == pytest.approx(0.5 / (0.5 + comm)) and hi == pytest.approx(1.0)
    assert pv.published_efficiency(_point()) == pytest.approx(12 / (2 * 8))


def test_a_one_node_baseline_divides_by_the_predicted_node_at_each_runs_own_accumulation():
    # node throughput 8 over 4 GPUs: still 0.5 s a batch; K = 4 at 2 nodes, K = 8 on the 1-node baseline
    point = _point(baseline="1 node", baseline_throughput=8, accumulation=4, baseline_accumulation=8, throughput=15)
    lo, hi, _ = pv.band(point, SYSTEM)
    comm_n, comm_1 = 2 * 7 / 8 * 2.5 / 10, 2 * 3 / 4 * 2.5 / 100  # 2 nodes at 10 GB/s; 1 node on the 100 GB/s link
    assert lo == pytest.approx((2.0 / (2.0 + comm_n)) / (4.0 / (4.0 + comm_1)))
    assert hi == pytest.approx(1.0)  # both hide: the all-reduce is shorter than one batch at either scale
    assert pv.published_efficiency(point) == pytest.approx(15 / (8 * 2))


def test_an_unknown_intra_node_link_is_refused_where_the_band_would_read_it():
    system = {**SYSTEM, "intra_GBps": None}
    assert pv.band(_point(), system)[0] > 0  # a multi-node ring against 1 GPU never reads it
    with pytest.raises(ValueError, match="intra-node link"):
        pv.band(_point(nodes=1, gpus=4), system)


def test_errors_are_signed_published_minus_predicted():
    assert pv.edge_error(0.85, 0.9, 1.0) == pytest.approx(-0.05)  # below: the predictor was optimistic
    assert pv.edge_error(0.95, 0.9, 1.0) == 0.0
    assert pv.edge_error(1.02, 0.9, 1.0) == pytest.approx(0.02)
    assert pv.mid_error(0.85, 0.9, 1.0) == pytest.approx(-0.1)
    assert pv.inside(0.9, 0.9, 1.0) and not pv.inside(0.8999, 0.9, 1.0)


def test_the_summary_counts_coverage_medians_and_the_side_of_each_miss():
    s = pv.score([(0.95, 0.9, 1.0), (0.80, 0.9, 1.0), (1.02, 0.9, 1.0)])
    assert (s.points, s.inside, s.optimistic, s.pessimistic) == (3, 1, 1, 1)
    assert s.coverage == pytest.approx(1 / 3)
    assert s.median_abs_edge_error == pytest.approx(0.02)  # of 0, 0.10, 0.02
    assert s.median_abs_mid_error == pytest.approx(0.07)  # of 0, 0.15, 0.07
    with pytest.raises(ValueError):
        pv.score([])


def test_the_benchmark_scores_every_point_and_prints_the_summary(capsys):
    results = pv.evaluate(DATA)
    assert len(results) == len(POINTS)
    assert all(0 < r["lo"] <= r["hi"] <= 1 + 1e-12 for r in results)
    assert pv.main(["--system", "dgx-2h"]) == 0
    out = capsys.readouterr().out
    assert "coverage:" in out and "optimistic" in out and "bert-large" not in out
