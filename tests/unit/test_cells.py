"""The report's cells: how a number, a percentage, a predicted range, money and a node count are printed."""

from types import SimpleNamespace

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from scalelab.report import cells

NAN = float("nan")


def test_a_number_is_printed_by_its_spec_and_a_missing_one_as_a_dash():
    assert cells.fmt_num(12345.678) == "12,345.7"
    assert cells.fmt_num(0.5, ".3f") == "0.500"
    assert cells.fmt_num(None) == "—" and cells.fmt_num(NAN) == "—" and cells.fmt_num(pd.NA) == "—"
    assert cells.fmt_num(None, missing="n/a") == "n/a" and cells.fmt_num(0.0) == "0.0"


def test_a_fraction_is_printed_as_a_percentage():
    assert cells.fmt_pct(0.254) == "25 %" and cells.fmt_pct(0.2546, ".1f") == "25.5 %" and cells.fmt_pct(1) == "100 %"
    assert cells.fmt_pct(None) == "—" and cells.fmt_pct(NAN) == "—" and cells.fmt_pct(0) == "0 %"


def test_an_infinite_figure_is_printed_as_inf_lowercase():
    """A zero baseline throughput makes a speedup infinite; json reads a result file's Infinity as inf."""
    assert cells.fmt_num(float("inf")) == "inf" and cells.fmt_num(-float("inf"), ".3g") == "-inf"
    assert cells.fmt_pct(float("inf")) == "inf %"


def _predicted(lo, hi):
    return SimpleNamespace(predicted_efficiency_no_overlap=lo, predicted_efficiency_overlap=hi)


def test_the_predicted_range_runs_from_no_overlap_to_full_overlap():
    assert cells.predicted_range(_predicted(0.934, 1.0)) == "93–100 %"
    assert cells.predicted_range(_predicted(0.996, 1.0)) == "100 %"  # both round to 100: one figure
    assert cells.predicted_range(_predicted(0.5, 0.504)) == "50 %"
    assert cells.predicted_range(_predicted(0.494, 0.506)) == "49–51 %"
    assert cells.predicted_range(_predicted(NAN, 1.0)) == "—" and cells.predicted_range(_predicted(0.9, NAN)) == "—"


def _money(cost, hours, budget_cost):
    return pd.DataFrame({"cost_per_1k_samples": [NAN, cost], "hours_for_token_budget": [NAN, hours],
                         "cost_for_token_budget": [NAN, budget_cost]})


def test_money_columns_appear_only_where_a_group_has_figures_and_cells_match_them():
    full = _money(0.01234567, 1234.56, 98765.4)
    assert cells.money_headers(full) == ["cost / 1K samples", "hours for token budget", "cost for token budget"]
    assert cells.money_cells(next(full.iloc[1:].itertuples())) == ["0.01235", "1,234.6", "98,765"]
    no_price = _money(NAN, 12.0, NAN)  # a token budget without --gpu_hour_price: hours, no cost
    assert cells.money_headers(no_price) == ["hours for token budget"]
    assert cells.money_cells(next(no_price.iloc[1:].itertuples())) == ["12.0"]
    price_only = _money(2.5, NAN, NAN)
    assert cells.money_headers(price_only) == ["cost / 1K samples"]
    assert cells.money_cells(next(price_only.iloc[1:].itertuples())) == ["2.5"]
    assert cells.money_headers(_money(NAN, NAN, 5.0)) == [] and cells.money_cells(next(_money(NAN, NAN, 5.0)
                                                                                     .itertuples())) == []


def test_the_nodes_cell_names_an_emulated_link():
    assert cells.nodes_cell(SimpleNamespace(num_nodes=2, link="emulated 1 Gbit/s")) == "2 (emulated 1 Gbit/s)"
    assert cells.nodes_cell(SimpleNamespace(num_nodes=2, link="")) == "2"
    assert cells.nodes_cell(SimpleNamespace(num_nodes=1, link=NAN)) == "1"  # a frame cell without a link
    assert cells.nodes_cell(SimpleNamespace(num_nodes=4)) == "4"


@given(st.lists(st.sampled_from(["| a | b |", "|---|---|", "  a note", "text", "", "|x|"]), max_size=30))
def test_markdown_blocks_end_each_table_before_the_line_under_it(lines):
    """GitHub reads a line right under a table's last row as one more row (a report's notes under its tables became
    rows): `blocks` puts a blank line there and changes nothing else."""
    lines = "\n".join(lines).split("\n")  # the text's lines (none: one empty)
    out = cells.blocks("\n".join(lines)).split("\n")
    assert [x for x in out if x] == [x for x in lines if x]  # only blank lines added
    assert len(out) - len(lines) == sum(a.startswith("|") and b.strip() != "" and not b.startswith("|")
                                        for a, b in zip(lines, lines[1:]))
    assert not any(a.startswith("|") and b.strip() and not b.startswith("|") for a, b in zip(out, out[1:]))
