"""empriv.analysis.stage and cli: every statistic from constructed run tables (including degenerate ones),
the stage's files, and `empriv analyze select`."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from analysis_tables import make_run_table

from empriv.analysis.stage import analysis_metrics, compute_analysis, format_analysis

SCORES = ["acr_mean", "air_mean", "exposure_gap_mean", "exposure_gap_worst", "vmr_mean"]


def run(table, **kw):
    kw.setdefault("privacy_scores", SCORES)
    kw.setdefault("monte_carlo_trials", 200)
    return compute_analysis(table, **kw)


def test_full_analysis_of_a_constructed_table(runs):
    a, configs = run(runs, base_utility=None)
    assert a["primary_score"] == "acr_mean"  # the first available score
    assert a["skipped_scores"] == ["air_mean"]  # all null
    assert any("air_mean" in n for n in a["notes"]) and any("audit" in n for n in a["notes"])
    assert a["epsilons"] == ["2", "8", "inf"] and a["n_runs"] == 48 and a["n_configs"] == 24
    # per-ε std of configuration means equals an independent polars computation
    g = runs.filter(pl.col("epsilon") == 8.0).group_by("group").agg(pl.col("exposure_gap_mean").mean())
    assert a["seed_vs_configuration"]["exposure_gap_mean"]["8"]["hyperparameter"] == pytest.approx(g["exposure_gap_mean"].std())
    # ACR exists for seed 0 only: no seed std
    assert a["seed_vs_configuration"]["acr_mean"]["8"]["randomness"] is None
    # the constructed score grows with b, T, η: positive coefficients, log η largest
    fit = a["regression"]["8"]["exposure_gap_mean"]["individual"]
    assert fit["fitted"] and fit["n"] == 16
    coefs = {k: v["coef"] for k, v in fit["terms"].items()}
    assert 0 < coefs["log_b"] < coefs["log_T"] < coefs["log_eta"]
    # heuristics on a monotone score: individual and compute always right
    h = a["heuristics"]["8"]["exposure_gap_mean"]
    assert h["individual"]["accuracy"] == 1.0 and h["individual"]["n_pairs"] == 19
    assert h["compute"]["accuracy"] == 1.0
    # VMR all zero: every pair tied → accuracy 0
    assert all(v["accuracy"] == 0.0 for v in a["heuristics"]["8"]["vmr_mean"].values())
    assert a["regression"]["8"]["vmr_mean"]["individual"]["fitted"] is False
    # selection per finite ε only
    assert set(a["selection"]) == {"2", "8"}
    sel = a["selection"]["8"]["exposure_gap_mean"]
    assert sel["picks"]["algorithm1"] == "b64-T16-lr0.005"  # the oracle of a monotone score
    assert sel["risks"]["mean"]["algorithm1"]["absolute_risk"] == pytest.approx(0.0)
    assert sel["risks"]["mean"]["best_utility"]["absolute_risk"] > 0
    assert sel["risks"]["monte_carlo"]["algorithm1"]["absolute_risk"] >= 0
    vmr = a["selection"]["8"]["vmr_mean"]["risks"]["mean"]
    assert vmr["algorithm1"]["relative_risk"] is None and vmr["algorithm1"]["absolute_risk"] == 0.0
    m = analysis_metrics(a)
    json.dumps(m)
    assert m["heuristics"]["exposure_gap_mean"]["8"]["individual"] == 1.0
    assert m["regression"]["exposure_gap_mean"]["8"]["individual"]["log_eta"] == pytest.approx(coefs["log_eta"])
    assert m["std"]["exposure_gap_mean"]["inf"]["configurations"] is not None
    assert "algorithm1_absolute_mean" in m["risks"]["exposure_gap_mean"]["8"]
    assert "acr_mean" in format_analysis(a)


def test_retention_rule_is_applied_per_epsilon(runs):
    # base utility 2.0: gains 2.0 − NLL; keep NLL ≤ 2.0 − 0.9·(2.0 − best)
    a, configs = run(runs, base_utility=2.0, retention_fraction=0.9)
    for e, r in a["retention"].items():
        assert r["applied"]
        assert r["threshold"] == pytest.approx(2.0 - 0.9 * (2.0 - r["best_utility"]))
    kept = configs.filter(pl.col("epsilon") == 8.0)
    assert kept.height == a["retention"]["8"]["n_kept"] < 8
    assert (kept["test_nll"] <= a["retention"]["8"]["threshold"] + 1e-12).all()
    # a base model better than every run: the rule cannot apply, everything is kept and noted
    a, configs = run(runs, base_utility=0.1)
    assert configs.height == 24 and not a["retention"]["2"]["applied"]
    assert any("retention rule not applied" in n for n in a["notes"])


def test_single_epsilon_missing_seeds_and_inf_only():
    one = make_run_table(epsilons=(4.0,), seeds=(0,))
    a, _ = run(one)
    assert a["epsilons"] == ["4"]
    assert a["seed_vs_configuration"]["exposure_gap_mean"]["4"]["randomness"] is None  # one seed: no seed std
    assert a["selection"]["4"]["exposure_gap_mean"]["risks"]["monte_carlo"] is not None
    inf_only = make_run_table(epsilons=(math.inf,))
    a, _ = run(inf_only)
    assert a["selection"] == {} and a["focus_epsilon"] == "inf"
    assert a["heuristics"]["inf"]["exposure_gap_mean"]["individual"]["n_pairs"] == 19


def test_one_configuration_and_no_scores():
    t = make_run_table(epsilons=(8.0,)).filter(pl.col("group") == "eps8-b64-T16-lr0.005")
    a, _ = run(t)
    assert a["seed_vs_configuration"]["exposure_gap_mean"]["8"]["hyperparameter"] is None
    assert a["regression"]["8"]["exposure_gap_mean"]["individual"]["fitted"] is False
    a, _ = run(t, privacy_scores=["acr_max"])
    assert a["primary_score"] is None and a["regression"] == {}
    assert "no empirical privacy score" in format_analysis(a)


def test_unknown_utility_column(runs):
    with pytest.raises(ValueError, match=r"unknown utility column\(s\) \['accuracy'\]"):
        run(runs, utility="accuracy")


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_select(runs, tmp_path, capsys):
    from empriv.cli import main

    path = tmp_path / "runs.csv"
    runs.write_csv(path)
    assert main(["analyze", "select", "--runs", str(path), "--score", "exposure_gap_mean", "--epsilon", "8"]) == 0
    out = capsys.readouterr().out
    assert "pool: 8 of 8 configurations at ε = 8" in out
    lines = {ln.split(":")[0].strip(): ln for ln in out.splitlines()}
    assert "b64-T16-lr0.005" in lines["Algorithm 1"]
    assert "b128-T32-lr0.01" in lines["best utility"]  # largest b·T·η: lowest constructed NLL
    assert "[updates]" in out and "[compute]" in out and "[individual]" in out
    assert main(["analyze", "select", "--runs", str(path), "--score", "exposure_gap_mean", "--epsilon", "8",
                 "--max-utility", "1.37", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert 0 < res["n_pool"] < 8 and res["max_utility"] == 1.37
    assert all(p["test_nll"] <= 1.37 for p in res["picks"].values())


@pytest.mark.parametrize("args, message", [
    (["--score", "acr_max", "--epsilon", "8"], r"unknown score column\(s\) \['acr_max'\]; numeric columns in the table: \[.*'exposure_gap_mean'"),
    (["--score", "exposure_gap_mean"], r"several ε \['2', '8', 'inf'\]: choose one with --epsilon"),
    (["--score", "exposure_gap_mean", "--epsilon", "3"], r"--epsilon 3 is not in the table"),
    (["--score", "exposure_gap_mean", "--epsilon", "8", "--max-utility", "0"], r"no configuration at ε=8 has test_nll ≤ 0"),
])
def test_cli_errors(runs, tmp_path, capsys, args, message):
    import re

    from empriv.cli import main

    path = tmp_path / "runs.csv"
    runs.write_csv(path)
    assert main(["analyze", "select", "--runs", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "Traceback" not in err


def test_cli_missing_file(tmp_path, capsys):
    from empriv.cli import main

    assert main(["analyze", "select", "--runs", str(tmp_path / "nope.csv"), "--score", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_primary_score_skips_scores_constant_within_every_finite_epsilon(runs):
    # ACR that found no prompt anywhere at finite ε: one value per ε (it varies only at ∞, which has no selection)
    t = runs.with_columns(pl.when(pl.col("epsilon").is_finite()).then(0.889).otherwise(pl.col("acr_mean")).alias("acr_mean"))
    a, _ = run(t)
    assert a["primary_score"] == "exposure_gap_mean"
    assert any("primary score exposure_gap_mean: acr_mean take one value" in n for n in a["notes"])
    # every score flat: the first one stays primary (nothing better to show)
    flat = t.with_columns(pl.lit(1.0).alias("exposure_gap_mean"))
    a, _ = run(flat, privacy_scores=["acr_mean", "exposure_gap_mean"])
    assert a["primary_score"] == "acr_mean"


def test_correlations_use_audit_outcomes_not_audit_settings(runs):
    rng = [0.1, 0.5, 0.2, 0.9, 0.4, 0.3, 0.8, 0.6]
    groups = sorted(runs.filter(pl.col("epsilon") == 8.0)["group"].unique().to_list())
    audit = pl.DataFrame({"group": groups, "audit_eps_lb_95": rng, "audit_delta": [1e-5] * 8,
                          "audit_n_canaries": [1000.0] * 8})
    t = runs.join(audit, on="group", how="left")
    a, _ = run(t)
    assert a["audit_columns"] == ["audit_eps_lb_95"]
    pairs = a["correlations"]["8"]
    assert "audit_eps_lb_95~exposure_gap_mean" in pairs and pairs["audit_eps_lb_95~exposure_gap_mean"]["n"] == 8
    assert not any("audit_delta" in k or "audit_n_canaries" in k for k in pairs)
