"""empriv.analysis.figures: the DVC plot data (CSV) the templates in .dvc/plots/ draw from, checked against the
analysis it comes from (the browser rendering of these files is tests/analysis/test_dvc_plots_render.py)."""

from __future__ import annotations

import csv
import math

import pytest
from analysis_tables import make_run_table

from empriv.analysis.figures import epsilon_display, group_display, write_plot_data
from empriv.analysis.stage import compute_analysis

SCORES = ["exposure_gap_mean", "acr_mean"]


@pytest.fixture(scope="module")
def plot_data(tmp_path_factory):
    analysis, configs = compute_analysis(make_run_table(), privacy_scores=SCORES, monte_carlo_trials=50, base_utility=2.0)
    out = tmp_path_factory.mktemp("plots")
    paths = write_plot_data(analysis, configs, out)
    assert [p.name for p in paths] == ["variance.csv", "heuristics.csv", "risks.csv", "selection.csv"]
    tables = {}
    for p in paths:
        with open(p, newline="", encoding="utf-8") as fh:
            tables[p.stem] = list(csv.DictReader(fh))
    return analysis, tables


def test_labels():
    assert epsilon_display("inf") == "∞" and epsilon_display("8") == "8" and epsilon_display("0.5") == "0.5"
    assert group_display({"epsilon": "inf"}) == "ε=∞"
    assert group_display({"epsilon": "8", "method": "lora"}) == "ε=8 · lora"
    assert group_display({"method": "full"}) == "full"


def test_variance_rows_are_every_configuration_mean_with_infinity_labelled(plot_data):
    analysis, t = plot_data
    rows = t["variance"]
    assert list(rows[0]) == ["score", "epsilon", "epsilon_label", "group", "config", "value", "std"]
    want = sum(len(g["values"]) for groups in analysis["variance"].values() for g in groups)
    assert len(rows) == want > 0
    inf = [r for r in rows if r["epsilon"] == "inf"]
    assert inf and {(r["epsilon_label"], r["group"]) for r in inf} == {("∞", "ε=∞")}
    assert {r["group"] for r in rows} == {"ε=2", "ε=8", "ε=∞"}
    for r in rows:  # every value is a number, and it is the analysis' value for that configuration
        g = next(g for g in analysis["variance"][r["score"]] if g["group"]["epsilon"] == r["epsilon"])
        assert float(r["value"]) == pytest.approx(g["values"][g["configs"].index(r["config"])])
        assert math.isfinite(float(r["value"]))


def test_heuristics_keep_infinity_and_every_rule(plot_data):
    analysis, t = plot_data
    rows = t["heuristics"]
    assert list(rows[0]) == ["epsilon", "epsilon_label", "score", "rule", "accuracy", "random_baseline", "n_pairs", "n_ties"]
    assert {r["epsilon_label"] for r in rows} == {"2", "8", "∞"}
    assert len(rows) == sum(len(rules) for per in analysis["heuristics"].values() for rules in per.values())
    r = next(r for r in rows if r["epsilon"] == "inf" and r["score"] == "exposure_gap_mean" and r["rule"] == "individual")
    h = analysis["heuristics"]["inf"]["exposure_gap_mean"]["individual"]
    assert float(r["accuracy"]) == pytest.approx(h["accuracy"]) and int(r["n_pairs"]) == h["n_pairs"]


def test_selection_has_the_oracle_as_a_method(plot_data):
    analysis, t = plot_data
    rows = t["selection"]
    assert list(rows[0]) == ["epsilon", "epsilon_label", "score", "threshold", "method", "config", "score_value",
                             "oracle_score"]
    assert {r["epsilon"] for r in rows} == {"2", "8"}  # no selection without a guarantee
    by_point: dict = {}
    for r in rows:
        by_point.setdefault((r["epsilon"], r["score"], r["threshold"]), {})[r["method"]] = r
    n_sweep = sum(len(d.get("sweep") or []) for per in analysis["selection"].values() for d in per.values())
    assert len(by_point) == n_sweep > 0
    for (e, s, thr), methods in by_point.items():
        assert set(methods) == {"algorithm1", "best_utility", "worst_utility", "oracle"}
        oracle = methods["oracle"]
        assert oracle["score_value"] == oracle["oracle_score"]
        assert all(float(m["score_value"]) >= float(oracle["score_value"]) for m in methods.values())
        point = next(p for p in analysis["selection"][e][s]["sweep"] if float(thr) == pytest.approx(p["threshold"]))
        assert oracle["config"] == point["oracle"]


def test_risks_rows_per_layout_and_method(plot_data):
    analysis, t = plot_data
    rows = t["risks"]
    assert list(rows[0]) == ["epsilon", "epsilon_label", "score", "layout", "method", "relative_risk", "absolute_risk"]
    assert {r["layout"] for r in rows} == {"mean", "monte_carlo"}
    r = next(r for r in rows if (r["epsilon"], r["score"], r["layout"], r["method"]) ==
             ("8", "exposure_gap_mean", "mean", "best_utility"))
    assert float(r["absolute_risk"]) == pytest.approx(
        analysis["selection"]["8"]["exposure_gap_mean"]["risks"]["mean"]["best_utility"]["absolute_risk"])
