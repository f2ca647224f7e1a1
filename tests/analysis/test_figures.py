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
    assert [p.name for p in paths] == ["variance.csv", "heuristics.csv", "risks.csv", "selection.csv", "jitter.csv",
                                       "seed_vs_configuration.csv", "one_at_a_time.csv"]
    tables = {}
    for p in paths:
        with open(p, newline="", encoding="utf-8") as fh:
            tables[p.stem] = list(csv.DictReader(fh))
    return analysis, tables, configs


def test_labels():
    assert epsilon_display("inf") == "∞" and epsilon_display("8") == "8" and epsilon_display("0.5") == "0.5"
    assert group_display({"epsilon": "inf"}) == "ε=∞"
    assert group_display({"epsilon": "8", "method": "lora"}) == "ε=8 · lora"
    assert group_display({"method": "full"}) == "full"


def test_variance_rows_are_every_configuration_mean_with_infinity_labelled(plot_data):
    analysis, t, _ = plot_data
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
    analysis, t, _ = plot_data
    rows = t["heuristics"]
    assert list(rows[0]) == ["epsilon", "epsilon_label", "score", "rule", "accuracy", "random_baseline", "n_pairs", "n_ties"]
    assert {r["epsilon_label"] for r in rows} == {"2", "8", "∞"}
    assert len(rows) == sum(len(rules) for per in analysis["heuristics"].values() for rules in per.values())
    r = next(r for r in rows if r["epsilon"] == "inf" and r["score"] == "exposure_gap_mean" and r["rule"] == "individual")
    h = analysis["heuristics"]["inf"]["exposure_gap_mean"]["individual"]
    assert float(r["accuracy"]) == pytest.approx(h["accuracy"]) and int(r["n_pairs"]) == h["n_pairs"]


def test_selection_has_the_oracle_as_a_method(plot_data):
    analysis, t, _ = plot_data
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
    analysis, t, _ = plot_data
    rows = t["risks"]
    assert list(rows[0]) == ["epsilon", "epsilon_label", "score", "layout", "method", "relative_risk", "absolute_risk"]
    assert {r["layout"] for r in rows} == {"mean", "monte_carlo"}
    r = next(r for r in rows if (r["epsilon"], r["score"], r["layout"], r["method"]) ==
             ("8", "exposure_gap_mean", "mean", "best_utility"))
    assert float(r["absolute_risk"]) == pytest.approx(
        analysis["selection"]["8"]["exposure_gap_mean"]["risks"]["mean"]["best_utility"]["absolute_risk"])


# ------------------------------------------------------------------ the primary score's Fig. 2, Table 8, Fig. 5
def test_jitter_rows_are_the_kept_configuration_means_of_the_primary_score(plot_data):
    analysis, t, configs = plot_data
    rows = t["jitter"]
    s = analysis["primary_score"]
    assert s == "exposure_gap_mean"
    # the variance template's columns come first (dvc.yaml draws jitter.csv with it)
    assert list(rows[0])[:5] == ["score", "epsilon", "epsilon_label", "group", "config"]
    assert {"value", "std", "x", "jitter", "seed_std", "n_seeds"} <= set(rows[0])
    assert len(rows) == configs.height == analysis["n_configs_kept"]
    assert {r["score"] for r in rows} == {s}
    variance = {(r["epsilon"], r["config"]): float(r["value"]) for r in t["variance"] if r["score"] == s}
    for r in rows:
        assert float(r["value"]) == pytest.approx(variance[(r["epsilon"], r["config"])])
        i = ["2", "8", "inf"].index(r["epsilon"])
        assert abs(float(r["x"]) - i) <= 0.15 and float(r["x"]) == pytest.approx(i + float(r["jitter"]))
        assert float(r["std"]) == pytest.approx(analysis["table8"]["per_epsilon"][r["epsilon"]]["hyperparameter"])
        assert int(r["n_seeds"]) == 2
    assert {r["group"] for r in rows} == {"ε=2", "ε=8", "ε=∞"}


def test_jitter_is_deterministic_and_seeded(tmp_path):
    from empriv.analysis.variance import jitter_points

    analysis, configs = compute_analysis(make_run_table(), privacy_scores=SCORES, monte_carlo_trials=20, base_utility=2.0)
    a = jitter_points(configs, "exposure_gap_mean", seed=0)
    assert a == jitter_points(configs, "exposure_gap_mean", seed=0)
    b = jitter_points(configs, "exposure_gap_mean", seed=1)
    assert [p["config"] for p in a] == [p["config"] for p in b] and [p["x"] for p in a] != [p["x"] for p in b]


def test_table8_rows_kept_and_all_per_epsilon(plot_data):
    analysis, t, _ = plot_data
    rows = t["seed_vs_configuration"]
    assert list(rows[0]) == ["score", "epsilon", "epsilon_label", "configurations", "std_configs", "std_seeds", "ratio",
                             "n_configs", "n_seeds_min", "n_seeds_max", "n_runs", "reason"]
    assert [(r["epsilon_label"], r["configurations"]) for r in rows] == [
        ("2", "kept"), ("2", "all"), ("8", "kept"), ("8", "all"), ("∞", "kept"), ("∞", "all")]
    for r in rows:
        d = analysis["table8"]["per_epsilon"][r["epsilon"]]
        d = d if r["configurations"] == "kept" else d["all"]
        assert float(r["ratio"]) == pytest.approx(float(r["std_configs"]) / float(r["std_seeds"]))
        assert float(r["ratio"]) == pytest.approx(d["ratio"]) and int(r["n_configs"]) == d["n_configs"]
        assert r["reason"] == ""
    assert all(int(r["n_configs"]) == 8 and int(r["n_runs"]) == 16 for r in rows if r["configurations"] == "all")


def test_one_at_a_time_rows_are_the_panels(plot_data):
    analysis, t, _ = plot_data
    rows = t["one_at_a_time"]
    fig5 = analysis["one_at_a_time"]
    assert fig5["reference"] == {"batch_size": 128, "steps": 32, "learning_rate": 0.01}
    # 3 panels × 3 ε × 2 values
    assert len(rows) == 18
    assert {r["panel"] for r in rows} == {"vary b (T=32, η=0.01)", "vary T (b=128, η=0.01)", "vary η (b=128, T=32)"}
    b_rows = [r for r in rows if r["hyperparameter"] == "batch_size" and r["epsilon"] == "8"]
    assert [(r["value"], r["config"]) for r in b_rows] == [("64", "eps8-b64-T32-lr0.01"), ("128", "eps8-b128-T32-lr0.01")]
    assert all(r["kept"] in ("0", "1") for r in rows)
    assert {r["epsilon_label"] for r in rows} == {"2", "8", "∞"}


def test_new_figures_are_written(tmp_path):
    from empriv.analysis.figures import make_figures

    analysis, configs = compute_analysis(make_run_table(), privacy_scores=SCORES, monte_carlo_trials=20, base_utility=2.0)
    figs = make_figures(analysis, configs, tmp_path)
    for name in ("jitter", "one_at_a_time"):
        assert figs[name] == tmp_path / f"{name}.png"
        assert figs[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figs[name].stat().st_size > 5000


def test_research_plot_data_without_a_primary_score_is_headers_only(tmp_path):
    import polars as pl

    from empriv.analysis.figures import make_figures, write_research_plot_data

    t = make_run_table().with_columns(pl.lit(None, dtype=pl.Float64).alias("exposure_gap_mean"))
    analysis, configs = compute_analysis(t, privacy_scores=["exposure_gap_mean"], monte_carlo_trials=20)
    assert analysis["primary_score"] is None and analysis["table8"] == {} and analysis["one_at_a_time"] == {}
    paths = write_research_plot_data(analysis, configs, tmp_path)
    for p in paths:
        assert len(p.read_text(encoding="utf-8").splitlines()) == 1
    assert not {"jitter", "one_at_a_time"} & set(make_figures(analysis, configs, tmp_path))
