"""The report's lever view on constructed results: families of groups equal but for one lever, the loss at an
equal number of samples, and the bytes on the wire a hook recorded."""

import pandas as pd
import pytest

from helpers import make_result
from scalelab import results
from scalelab.report import lever_view
from scalelab.report.cli import build
from scalelab.report.tables import render


def _run(tmp_path, run_id, world, samples_per_s, losses, **levers_set):
    r = make_result(run_id, world=world, nodes=world, samples_per_s=samples_per_s, **levers_set)
    r["ranks"] = [{"rank": k, "losses": losses} for k in range(world)]
    results.write(str(tmp_path), r)


def test_groups_equal_but_for_one_lever_are_compared_at_equal_samples(tmp_path):
    # K=1: 2 devices reach 55 % of twice the 1-device rate; K=4: 90 %. K=4 trains on 4x the batches' samples
    # per step but its loss per sample is worse: read at the samples both trained on (the fewest: 10 batches)
    _run(tmp_path, "k1-1", 1, 100.0, [3.0] * 10)
    _run(tmp_path, "k1-2", 2, 110.0, [3.0 - i / 10 for i in range(10)])
    _run(tmp_path, "k4-1", 1, 100.0, [3.0] * 40, accumulate_grad_batches=4)
    _run(tmp_path, "k4-2", 2, 180.0, [3.0 - i / 100 for i in range(40)], accumulate_grad_batches=4)
    _run(tmp_path, "other", 2, 150.0, [1.0] * 10, batch_size=32)  # a different workload: no family
    scaling = build(str(tmp_path)).scaling
    ((lever, rows),) = lever_view.families(scaling)
    assert lever == "accumulate_grad_batches" and list(rows["accumulate_grad_batches"]) == [1, 4]
    assert lever_view.equal_samples(rows) == 10 * 128  # 10 batches of 64 per device x 2 devices
    assert lever_view.loss_at(rows["loss_curve"].iloc[0], 128, 1280) == pytest.approx(2.1)  # its last batch
    assert lever_view.loss_at(rows["loss_curve"].iloc[1], 128, 1280) == pytest.approx(2.91)  # its 10th batch
    text = _render(build(str(tmp_path)))
    assert "What accumulate_grad_batches bought" in text and "after 1,280 samples" in text
    table = text.split("What accumulate_grad_batches bought")[1].splitlines()
    (k1,) = [line for line in table if line.startswith("1 ")]
    (k4,) = [line for line in table if line.startswith("4 ")]
    assert "55 %" in k1 and "2.100" in k1 and "90 %" in k4 and "2.910" in k4
    assert "· accumulate 4 ·" in text  # the group title names a lever set away from its default


def test_the_bytes_on_the_wire_come_from_the_hook(tmp_path):
    for hook, wire in (("none", 8e6), ("bf16", 4e6)):
        _run(tmp_path, f"{hook}-1", 1, 100.0, [2.0] * 10, comm_hook=hook)
        r = make_result(f"{hook}-2", world=2, nodes=2, samples_per_s=150.0, comm_hook=hook)
        r["timing"]["comm"] = {"grad_bytes": 8e6, "bucket_bytes": [8e6], "wire_bytes": [wire], "buckets": 1}
        results.write(str(tmp_path), r)
    text = _render(build(str(tmp_path))).split("What comm_hook bought")[1]
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()[:1] in (["none"], ["bf16"])}
    assert "8.00" in rows["none"] and "4.00" in rows["bf16"]


def test_no_family_no_lever_table(tmp_path):
    _run(tmp_path, "a", 1, 100.0, [1.0])
    _run(tmp_path, "b", 2, 150.0, [1.0])
    assert "bought" not in _render(build(str(tmp_path)))


def test_a_family_gets_its_plot(tmp_path):
    from scalelab.report import plots

    _run(tmp_path, "k1-1", 1, 100.0, [3.0] * 10)
    _run(tmp_path, "k1-2", 2, 110.0, [3.0] * 10)
    _run(tmp_path, "k4-1", 1, 100.0, [3.0] * 40, accumulate_grad_batches=4)
    _run(tmp_path, "k4-2", 2, 180.0, [3.0] * 40, accumulate_grad_batches=4)
    report = build(str(tmp_path))
    scaling, bench = report.scaling, report.bench
    written = plots.write_all(str(tmp_path / "plots"), scaling, bench)
    path = tmp_path / "plots" / "efficiency_vs_accumulate_grad_batches.png"
    assert str(path) in written and path.read_bytes()[:4] == b"\x89PNG"


def test_a_gpt_mfu_says_how_attention_is_counted(tmp_path):
    for run_id, world in (("g1", 1), ("g2", 2)):
        r = make_result(run_id, world=world, nodes=1, samples_per_s=100.0 * world, model="gpt")
        r["timing"].update(tflops_per_device=100.0, peak_tflops=312.0, mfu=0.32)
        r["timing"]["comm"] = {"compute_s": 0.1, "allreduce_s": 0.01, "grad_bytes": 8e6, "buckets": 1}
        results.write(str(tmp_path), r)
    text = _render(build(str(tmp_path)))
    assert "MFU counts attention's full T x T scores (the causal half is not discounted)" in text


def _render(report):
    return render(report.runs, report.scaling)


def test_ddp_and_its_fsdp_twin_are_one_family_though_fsdp_takes_no_probe_step():
    import json

    from scalelab.config import LEVER_DEFAULTS

    def group(strategy, probes):
        return json.dumps({"workload": {"model": "gpt", "strategy": strategy, "comm_probe_every": probes}},
                          sort_keys=True)

    rows = pd.DataFrame([{**LEVER_DEFAULTS, "group": group(s, p), "world_size": 2, "baseline_world_size": 1,
                          "link": "", "strategy": s} for s, p in (("fsdp", 0), ("ddp", 5))])
    (family,) = lever_view.families(rows)
    assert family[0] == "strategy" and list(family[1]["strategy"]) == ["ddp", "fsdp"]  # the default first
    # the probe cadence alone, with no lever apart, makes no family
    assert lever_view.families(rows.assign(strategy="ddp", group=[group("ddp", 0), group("ddp", 5)])) == []


def test_the_strategy_table_shows_each_ranks_memory_beside_its_estimate(tmp_path):
    """What sharding saves, per configuration: one rank's measured tensor peak (a GPU's allocator) and the estimate
    for its strategy and world size; a CPU rank measures none ('—'). Only the strategy table carries it."""
    for strategy, peak, estimate in (("ddp", 31.2e9, 33e9), ("fsdp", None, 12e9)):
        for world in (1, 2):
            r = make_result(f"{strategy}{world}", world=world, nodes=world, samples_per_s=100 * world,
                            model="gpt", strategy=strategy)
            r["ranks"] = [{"rank": k, "losses": [2.0, 1.0]} for k in range(world)]
            r["memory"] = {"estimate_bytes": estimate, "peak_allocated_bytes": peak}
            results.write(str(tmp_path), r)
    built = build(str(tmp_path))
    table = "\n".join(lever_view.render(built.scaling, "simple")).splitlines()
    header = next(line for line in table if line.startswith("strategy"))
    assert header.rstrip().endswith("GB/rank (est.)")
    cells = {line.split()[0]: line.split()[-2:] for line in table if line.startswith(("ddp ", "fsdp "))}
    assert cells == {"ddp": ["31.20", "(33.00)"], "fsdp": ["—", "(12.00)"]}
    for world in (1, 2):
        for hook in ("none", "bf16"):
            _run(tmp_path / "hooks", f"h{world}{hook}", world, 100 * world, [1.0], comm_hook=hook)
    hooks = lever_view.render(build(str(tmp_path / "hooks")).scaling, "simple")
    assert hooks and not any("GB/rank" in line for line in hooks)
