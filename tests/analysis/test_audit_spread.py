"""empriv.analysis.audit_spread: audited ε̂ ranked and rank-correlated across configurations at one ε (issue 18),
against hand computations; its compact metrics, figure and report section."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from analysis_tables import make_method_table, make_run_table
from scipy.stats import t as student_t

from empriv.analysis.audit_spread import audit_spread, spearman
from empriv.analysis.metrics import analysis_metrics
from empriv.analysis.stage import compute_analysis


def hand_spearman(x, y):
    """ρ = Pearson correlation of the (average) ranks; p from t = ρ √((n−2)/(1−ρ²)) with n − 2 degrees of freedom."""
    def ranks(v):
        v = np.asarray(v, dtype=float)
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(1, len(v) + 1)
        for val in np.unique(v):  # ties: the average rank
            r[v == val] = r[v == val].mean()
        return r

    rx, ry = ranks(x), ranks(y)
    rho = float(np.corrcoef(rx, ry)[0, 1])
    n = len(x)
    t = rho * math.sqrt((n - 2) / (1 - rho ** 2))
    return rho, float(2 * student_t.sf(abs(t), n - 2))


def test_spearman_by_hand_and_its_undefined_cases():
    eps_hat = [0.5, 1.2, 0.9, 2.0, 1.5]
    gap = [1.0, 3.0, 2.0, 4.0, 5.0]
    r = spearman(eps_hat, gap)
    # ranks 1 3 2 5 4 vs 1 3 2 4 5: Σd² = 2, ρ = 1 − 6·2 / (5·24) = 0.9
    assert r["rho"] == pytest.approx(0.9) and r["n"] == 5 and r["reason"] is None
    assert r["p"] == pytest.approx(hand_spearman(eps_hat, gap)[1])
    assert r["p"] == pytest.approx(2 * student_t.sf(0.9 * math.sqrt(3 / 0.19), 3))
    tied = spearman(eps_hat, [3.0, 2.0, 2.0, 1.0, 1.5])
    assert tied["rho"] == pytest.approx(hand_spearman(eps_hat, [3.0, 2.0, 2.0, 1.0, 1.5])[0])
    missing = spearman([0.5, None, 0.9, float("nan")], [1.0, 2.0, 3.0, 4.0], ("audit_eps_lb_95", "gap"))
    assert missing == {"rho": None, "p": None, "n": 2, "reason": "n = 2 < 3 configurations with both values"}
    flat = spearman(eps_hat, [0.0] * 5, ("audit_eps_lb_95", "vmr_mean"))
    assert flat["rho"] is None and flat["p"] is None and flat["n"] == 5
    assert flat["reason"] == "vmr_mean is constant (0) over the n = 5 configurations"


def configs_with_audit(eps8_values, eps2_values=(0.1, 0.2)):
    """Configuration table (seed means) of the constructed cube with ε̂ on some configurations."""
    from empriv.analysis.table import config_table

    runs = make_run_table()
    groups8 = sorted(runs.filter(pl.col("epsilon") == 8.0)["group"].unique().to_list())
    groups2 = sorted(runs.filter(pl.col("epsilon") == 2.0)["group"].unique().to_list())
    audit = pl.DataFrame({"group": groups8[: len(eps8_values)] + groups2[: len(eps2_values)],
                          "audit_eps_lb_95": [*eps8_values, *eps2_values], "seed": [0] * (len(eps8_values) + len(eps2_values))})
    t = runs.join(audit, on=["group", "seed"], how="left")  # the audit trains seed 0 only
    return t, config_table(t, ["exposure_gap_mean", "vmr_mean", "test_nll", "audit_eps_lb_95"]), groups8


def test_audit_spread_ranks_and_correlates_at_equal_epsilon():
    eps8 = [0.4, 1.6, 0.9, 2.2, 1.1]
    t, configs, groups8 = configs_with_audit(eps8)
    s = audit_spread(configs, scores=["exposure_gap_mean", "vmr_mean"], utility="test_nll", primary="exposure_gap_mean",
                     outside_cube=["eps8-b256-T16-lr0.01-s0-full"])
    assert s["eligible"] and s["epsilon_columns"] == ["audit_eps_lb_95"] and s["max_audited_at_one_epsilon"] == 5
    assert s["outside_cube"] == ["eps8-b256-T16-lr0.01-s0-full"]
    g2 = s["groups"]["2"]
    assert not g2["eligible"] and g2["n_audited"] == 2 and g2["reason"] == "2 audited configuration(s) at this ε (≥ 3 needed)"
    assert "inf" not in s["groups"]  # ε = ∞ has no guarantee to compare at
    g = s["groups"]["8"]
    assert g["eligible"] and g["n_audited"] == 5 and g["n_configs"] == 8
    # ranking: rank 1 = the highest ε̂
    assert [r["config"] for r in g["ranking"]] == [groups8[3], groups8[1], groups8[4], groups8[2], groups8[0]]
    assert [r["rank"] for r in g["ranking"]] == [1.0, 2.0, 3.0, 4.0, 5.0]
    # ε̂ against the seed means of the main cube's scores and utility, by hand
    means = (t.filter(pl.col("group").is_in(groups8[:5])).group_by("group")
             .agg(pl.col("exposure_gap_mean").mean(), pl.col("test_nll").mean()).sort("group"))
    assert means["group"].to_list() == groups8[:5]
    for col in ("exposure_gap_mean", "test_nll"):
        rho, p = hand_spearman(eps8, means[col].to_list())
        c = g["correlations"][f"audit_eps_lb_95~{col}"]
        assert c["rho"] == pytest.approx(rho) and c["p"] == pytest.approx(p) and c["n"] == 5, col
    rho, p = hand_spearman(means["exposure_gap_mean"].to_list(), means["test_nll"].to_list())
    assert g["correlations"]["exposure_gap_mean~test_nll"]["rho"] == pytest.approx(rho)
    flat = g["correlations"]["audit_eps_lb_95~vmr_mean"]
    assert flat["rho"] is None and "vmr_mean is constant" in flat["reason"]


def test_too_few_audited_configurations_say_so():
    _, configs, _ = configs_with_audit([0.5, 0.7], eps2_values=(0.1,))
    s = audit_spread(configs, scores=["exposure_gap_mean"], utility="test_nll")
    assert not s["eligible"] and s["max_audited_at_one_epsilon"] == 2
    assert s["reason"].startswith("the audit cube has at most 2 configuration(s) of the main cube at one finite ε")
    no_audit = audit_spread(make_run_table(), scores=["exposure_gap_mean"], utility="test_nll")
    assert not no_audit["eligible"] and no_audit["epsilon_columns"] == [] and "no audited configuration" in no_audit["reason"]


def test_audit_spread_through_the_analysis_metrics_figure_and_report(tmp_path):
    from empriv.analysis.figures import make_figures
    from empriv.analysis.report import render_html

    eps8 = [0.4, 1.6, 0.9, 2.2, 1.1]
    t, _, groups8 = configs_with_audit(eps8)
    a, configs = compute_analysis(t, privacy_scores=["exposure_gap_mean", "vmr_mean"], monte_carlo_trials=20,
                                  base_utility=2.0)
    g = a["audit_spread"]["groups"]["8"]
    assert g["n_audited"] == 5  # before the retention rule (which keeps fewer configurations at ε = 8)
    assert a["retention"]["8"]["n_kept"] < 8
    m = analysis_metrics(a)["audit_spread"]
    c = g["correlations"]
    assert m == {"eps8": {"n": 5, "rho_score": c["audit_eps_lb_95~exposure_gap_mean"]["rho"],
                          "p_score": c["audit_eps_lb_95~exposure_gap_mean"]["p"],
                          "rho_utility": c["audit_eps_lb_95~test_nll"]["rho"],
                          "p_utility": c["audit_eps_lb_95~test_nll"]["p"]}}
    json.dumps(m, allow_nan=False)
    figs = make_figures(a, configs, tmp_path)
    assert figs["audit_spread"].stat().st_size > 1000
    html = render_html(a, figs, cube={}, params={}, assumptions=[], run_rows=(t.columns, []))
    section = html.split("<h2>Audited ε̂ across configurations at equal ε</h2>")[1].split("<h2>")[0]
    assert "ε = 8: 5 audited configurations" in section and "ε = 2: 2 audited configuration(s)" in section
    assert "audit_eps_lb_95 ~ vmr_mean" in section and "vmr_mean is constant" in section
    assert "audited epsilon versus primary score" in section


def test_audit_spread_per_method():
    """Two methods audited at ε = 8: each method ranks its own configurations (keys 8 and 8-lora)."""
    from empriv.analysis.table import config_table

    runs = make_method_table(("full", "lora"), epsilons=(8.0,))
    vals = {}
    for m in ("full", "lora"):
        for i, g in enumerate(sorted(runs.filter(pl.col("method") == m)["group"].unique().to_list())[:4]):
            vals[g] = [0.3, 1.0, 0.7, 1.5][i] * (1 if m == "full" else 0.5)
    t = runs.with_columns(pl.col("group").replace_strict(vals, default=None, return_dtype=pl.Float64)
                          .alias("audit_eps_lb_95"))
    s = audit_spread(config_table(t, ["exposure_gap_mean", "test_nll", "audit_eps_lb_95"], by=["method"]),
                     scores=["exposure_gap_mean"], utility="test_nll")
    assert set(s["groups"]) == {"8", "8-lora"}
    assert s["groups"]["8-lora"]["method"] == "lora" and s["groups"]["8-lora"]["n_audited"] == 4
    a, _ = compute_analysis(t, privacy_scores=["exposure_gap_mean"], monte_carlo_trials=10)
    assert set(analysis_metrics(a)["audit_spread"]) == {"eps8", "eps8-lora"}
