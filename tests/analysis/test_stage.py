"""empriv.analysis.stage and cli: every statistic from constructed run tables (including degenerate ones),
the stage's files, and `empriv analyze select`."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from analysis_tables import make_run_table

from empriv.analysis.stage import compute_analysis, format_analysis, primary_score
from empriv.analysis.table import config_table
from empriv.config import ConfigError, parse_params

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
    assert "acr_mean" in format_analysis(a)


def test_table8_and_fig5_of_the_primary_score(runs):
    a, configs = run(runs, privacy_scores=["exposure_gap_mean"], base_utility=2.0)
    t8 = a["table8"]
    assert t8["score"] == a["primary_score"] == "exposure_gap_mean" and list(t8["per_epsilon"]) == ["2", "8", "inf"]
    for e, d in t8["per_epsilon"].items():
        # over the kept configurations: exactly the analysis' own Table 8 (seed_vs_configuration), plus 'all'
        assert {k: v for k, v in d.items() if k != "all"} == a["seed_vs_configuration"]["exposure_gap_mean"][e]
        assert d["n_configs"] == a["retention"][e]["n_kept"] < d["all"]["n_configs"] == 8
        assert d["ratio"] == pytest.approx(d["hyperparameter"] / d["randomness"])
    assert "(ratio " in format_analysis(a)
    fig5 = a["one_at_a_time"]
    kept = set(configs["group"].to_list())
    points = [pt for p in fig5["panels"] for pts in p["lines"].values() for pt in pts]
    assert len(points) == 18 and any(pt["kept"] for pt in points)
    assert all(pt["kept"] is (pt["config"] in kept) for pt in points)


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
    t8 = a["table8"]["per_epsilon"]["4"]  # Table 8: no ratio, and why; the std across configurations is still there
    assert t8["ratio"] is None and t8["ratio_reason"] == "one seed per configuration: no std across seeds"
    assert t8["hyperparameter"] is not None and t8["all"]["n_configs"] == 8 and t8["all"]["n_seeds_max"] == 1
    assert list(a["one_at_a_time"]["panels"][0]["lines"]) == ["4"]  # one ε: one line per panel
    assert "(ratio" not in format_analysis(a)
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
    t8 = a["table8"]["per_epsilon"]["8"]
    assert t8["ratio"] is None and t8["ratio_reason"] == "1 configuration(s) with a value: no std across configurations"
    assert all(p["lines"] == {} for p in a["one_at_a_time"]["panels"])
    a, _ = run(t, privacy_scores=["acr_max"])
    assert a["primary_score"] is None and a["regression"] == {}
    assert a["table8"] == {} and a["one_at_a_time"] == {}
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
    # a score with one value per finite ε (VMR at 0, say) varies only at ∞, which has no selection
    t = runs.with_columns(pl.when(pl.col("epsilon").is_finite()).then(0.5).otherwise(pl.col("acr_mean")).alias("acr_mean"))
    a, _ = run(t)
    assert a["primary_score"] == "exposure_gap_mean"
    assert any("primary score exposure_gap_mean: acr_mean takes one value" in n for n in a["notes"])
    # every score flat: the first one stays primary (nothing better to show)
    flat = t.with_columns(pl.lit(1.0).alias("exposure_gap_mean"))
    a, _ = run(flat, privacy_scores=["acr_mean", "exposure_gap_mean"])
    assert a["primary_score"] == "acr_mean"


def _acr_failed_at_finite_epsilon(runs):
    """The default cube's ACR: no search succeeds at finite ε (acr_mean null, success rate 0), some do at ∞."""
    finite = pl.col("epsilon").is_finite()
    searched = pl.col("seed") == 0
    return runs.with_columns(
        pl.when(finite).then(None).otherwise(pl.col("acr_mean")).alias("acr_mean"),
        pl.when(~searched).then(None).when(finite).then(0.0).otherwise(pl.col("acr_mean") / 10).alias("acr_success_rate"))


def test_acr_without_a_success_at_finite_epsilon_is_missing_not_zero(runs):
    t = _acr_failed_at_finite_epsilon(runs)
    a, configs = run(t, privacy_scores=["acr_mean", "acr_success_rate", "exposure_gap_mean"])
    # null everywhere at finite ε: cannot be primary; the success rate is 0 everywhere there: constant, not primary
    assert a["primary_score"] == "exposure_gap_mean"
    assert any("primary score exposure_gap_mean: acr_mean has no value at any finite ε; acr_success_rate takes one value"
               in n for n in a["notes"])
    # even when nothing varies, a score with no value at finite ε is not chosen
    flat = t.with_columns(pl.lit(1.0).alias("exposure_gap_mean"))
    assert run(flat, privacy_scores=["acr_mean", "exposure_gap_mean"])[0]["primary_score"] == "exposure_gap_mean"
    # counts of what was left out, per ε
    cov = a["coverage"]["acr_mean"]
    assert cov["8"] == {"n_runs": 16, "n_runs_with_value": 0, "n_configs": 8, "n_configs_with_value": 0}
    assert cov["inf"] == {"n_runs": 16, "n_runs_with_value": 8, "n_configs": 8, "n_configs_with_value": 8}
    assert a["coverage"]["exposure_gap_mean"]["8"]["n_runs_with_value"] == 16
    note = next(n for n in a["notes"] if n.startswith("acr_mean has values for"))
    assert "ε = 2: 0 of 8 configurations (0 of 16 runs); ε = 8: 0 of 8 configurations (0 of 16 runs); " \
           "ε = inf: 8 of 8 configurations (8 of 16 runs)" in note and "not counted as 0" in note
    assert any("acr_mean is over successful ACR searches only" in n for n in a["notes"])
    # every statistic of acr_mean at finite ε: none (not the statistics of zeros)
    assert a["seed_vs_configuration"]["acr_mean"]["8"] == {"randomness": None, "hyperparameter": None, "n_configs": 0,
                                                            "n_configs_with_seed_std": 0, "n_configs_without_value": 8,
                                                            "ratio": None, "ratio_reason": "0 configuration(s) with a "
                                                            "value: no std across configurations", "n_seeds_min": None,
                                                            "n_seeds_max": None, "n_runs": 0}
    assert a["regression"]["8"]["acr_mean"]["individual"]["fitted"] is False
    assert a["regression"]["8"]["acr_mean"]["individual"]["n_without_value"] == 16
    assert all(h["n_pairs"] == 0 and h["accuracy"] is None for h in a["heuristics"]["8"]["acr_mean"].values())
    assert a["selection"]["8"]["acr_mean"] == {"reason": "no configuration has a acr_mean value", "n_configs": 8,
                                               "n_configs_without_value": 8}
    # at ∞ the values are the seed-0 runs' (seed 1 never searched): the configuration mean is that one value
    inf = configs.filter(pl.col("epsilon").is_infinite()).sort("group")
    ref = t.filter(pl.col("epsilon").is_infinite() & (pl.col("seed") == 0)).sort("group")
    assert inf["acr_mean"].to_list() == pytest.approx(ref["acr_mean"].to_list())
    assert a["seed_vs_configuration"]["acr_mean"]["inf"]["hyperparameter"] == pytest.approx(ref["acr_mean"].std())
    # the success rate is a measurement (0 is a value): selected on like any score
    assert a["selection"]["8"]["acr_success_rate"]["n_points"] == 8


def test_selection_pool_leaves_out_configurations_without_a_value(runs):
    """Some configurations at ε = 8 have an ACR success, the others none: Algorithm 1, the baselines and the oracle
    choose among the configurations with a value (the same as if the others were not in the cube)."""
    t = _acr_failed_at_finite_epsilon(runs)
    with_value = ["eps8-b128-T16-lr0.005", "eps8-b64-T32-lr0.01", "eps8-b128-T32-lr0.005"]
    t = t.with_columns(pl.when(pl.col("group").is_in(with_value) & (pl.col("seed") == 0))
                       .then(pl.col("exposure_gap_mean") / 3).otherwise(pl.col("acr_mean")).alias("acr_mean"))
    a, _ = run(t, privacy_scores=["acr_mean", "exposure_gap_mean"])
    sel = a["selection"]["8"]["acr_mean"]
    assert sel["n_points"] == 3 and sel["n_configs_without_value"] == 5 and sel["risks"]["n_points_without_value"] == 0
    ref, _ = run(t.filter((pl.col("epsilon") != 8.0) | pl.col("group").is_in(with_value)),
                 privacy_scores=["acr_mean", "exposure_gap_mean"])
    assert sel["picks"] == ref["selection"]["8"]["acr_mean"]["picks"]
    assert sel["risks"]["mean"] == ref["selection"]["8"]["acr_mean"]["risks"]["mean"]
    # by hand: b64-T32-lr0.01 and b128-T32-lr0.005 share U = 20.48 → the smaller η stays (step 1 drops b64-T32-lr0.01);
    # b128-T16-lr0.005 dominates b128-T32-lr0.005 (step 3) → Algorithm 1 picks b128-T16-lr0.005, the lowest score of the three
    assert sel["picks"]["algorithm1"] == "b128-T16-lr0.005"
    assert sel["risks"]["mean"]["algorithm1"]["absolute_risk"] == pytest.approx(0.0)
    assert a["variance"]["acr_mean"][1]["n_configs"] == 3 and a["variance"]["acr_mean"][1]["n_configs_without_value"] == 5


def test_cli_select_leaves_out_configurations_without_a_score(runs, tmp_path, capsys):
    from empriv.cli import main

    t = _acr_failed_at_finite_epsilon(runs).with_columns(
        pl.when((pl.col("group") == "eps8-b64-T16-lr0.005") & (pl.col("seed") == 0)).then(1.7)
        .when((pl.col("group") == "eps8-b128-T32-lr0.01") & (pl.col("seed") == 0)).then(2.4)
        .otherwise(pl.col("acr_mean")).alias("acr_mean"))
    path = tmp_path / "runs.csv"
    t.write_csv(path)
    assert main(["analyze", "select", "--runs", str(path), "--score", "acr_mean", "--epsilon", "8", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n_pool"] == 2 and res["n_without_score"] == 6
    assert res["oracle"]["acr_mean"] == 1.7 and res["oracle"]["config"] == "b64-T16-lr0.005"
    assert {p["config"] for p in res["picks"].values()} <= {"b64-T16-lr0.005", "b128-T32-lr0.01"}
    assert main(["analyze", "select", "--runs", str(path), "--score", "acr_mean", "--epsilon", "8"]) == 0
    assert "pool: 2 of 8 configurations at ε = 8 (6 without a acr_mean value left out)" in capsys.readouterr().out
    assert main(["analyze", "select", "--runs", str(path), "--score", "acr_mean", "--epsilon", "2"]) == 2
    assert "no configuration at ε=2 has a acr_mean value (8 in the pool have none)" in capsys.readouterr().err


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


# --------------------------------------------------------------------------- analyze.primary_score (issue 42)
def test_a_pinned_primary_score_is_used_even_when_an_earlier_score_varies(runs):
    scores = ["exposure_gap_mean", "vmr_mean"]
    assert primary_score(config_table(runs, scores), scores) == "exposure_gap_mean"
    free, _ = compute_analysis(runs, privacy_scores=scores, monte_carlo_trials=0)
    pinned, _ = compute_analysis(runs, privacy_scores=scores, monte_carlo_trials=0, primary="vmr_mean")
    assert free["primary_score"] == "exposure_gap_mean" and pinned["primary_score"] == "vmr_mean"
    assert pinned["table8"] != free["table8"]


def test_a_pinned_score_without_values_leaves_no_primary_and_says_so(runs):
    a, _ = compute_analysis(runs, privacy_scores=["exposure_gap_mean"], monte_carlo_trials=0, primary="vmr_max")
    assert a["primary_score"] is None
    assert any("primary score vmr_max (analyze.primary_score) has no value" in n for n in a["notes"])


def test_the_pinned_score_must_be_a_privacy_score_of_the_analysis():
    cube = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}
    ok = parse_params({"cube": cube, "analyze": {"primary_score": "acr_mean"}})
    assert ok.analyze.primary_score == "acr_mean"
    with pytest.raises(ConfigError, match=r"analyze\.primary_score: must be one of analyze\.privacy_scores; did you "
                                          r"mean 'acr_mean'\? \(got 'acr_men'"):
        parse_params({"cube": cube, "analyze": {"primary_score": "acr_men"}})
