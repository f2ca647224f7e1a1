"""empriv.analysis.metrics: the compact, numbers-only DVC metrics of the analyze stage, on constructed run tables."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from analysis_tables import make_run_table

from empriv.analysis.metrics import analysis_metrics, config_metrics, epsilon_key, summary_metrics
from empriv.analysis.stage import compute_analysis

SCORES = ["acr_mean", "exposure_gap_mean", "vmr_mean"]


def leaves(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix, obj


def numbers_only(obj) -> list[str]:
    """Keys whose value is neither a number nor null (a string, a list, a bool)."""
    return [k for k, v in leaves(obj) if not (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)))]


def test_epsilon_keys():
    assert [epsilon_key(e) for e in (8, 8.0, 0.5, math.inf, 64)] == ["eps8", "eps8", "eps0.5", "epsinf", "eps64"]


def test_summary_is_numbers_only_with_numeric_epsilon_and_an_inf_key(runs):
    s = summary_metrics(runs, SCORES, "test_nll", base_utility=1.7)
    assert numbers_only(s) == []
    json.dumps(s, allow_nan=False)  # finite numbers and nulls only
    assert set(s) == {"n_runs", "n_configs", "base_test_nll", "eps2", "eps8", "epsinf"}
    assert s["eps8"]["epsilon"] == 8.0 and "epsilon" not in s["epsinf"]
    assert s["eps8"]["n_configs"] == 8 and s["eps8"]["n_runs"] == 16 and s["n_runs"] == 48
    # mean / std / worst over configuration means (seeds averaged first), checked against polars
    g = (runs.filter(pl.col("epsilon") == 8.0).group_by("group").agg(pl.col("exposure_gap_mean").mean())
         ["exposure_gap_mean"])
    e = s["eps8"]["exposure_gap_mean"]
    assert e["mean"] == pytest.approx(g.mean()) and e["std"] == pytest.approx(g.std()) and e["worst"] == pytest.approx(g.max())
    assert e["n"] == 8
    assert s["eps8"]["test_nll"]["worst"] == pytest.approx(
        runs.filter(pl.col("epsilon") == 8.0).group_by("group").agg(pl.col("test_nll").mean())["test_nll"].max())


def test_summary_reports_a_score_without_values_as_null_not_zero(runs):
    t = runs.with_columns(pl.lit(None, dtype=pl.Float64).alias("acr_mean"))
    s = summary_metrics(t, SCORES, "test_nll", base_utility=None)
    assert s["eps8"]["acr_mean"] == {"mean": None, "std": None, "worst": None, "n": 0, "se": None, "se_seed": None,
                                     "n_runs": 0}
    assert "base_test_nll" not in s
    # one configuration with a value: a mean, no std
    t = runs.with_columns(pl.when(pl.col("group") == "eps8-b64-T16-lr0.005").then(pl.col("acr_mean")).alias("acr_mean"))
    a = summary_metrics(t, SCORES, "test_nll", None)["eps8"]["acr_mean"]
    assert a["n"] == 1 and a["std"] is None and a["mean"] == a["worst"] and a["se"] is None
    assert a["se_seed"] is None and a["n_runs"] == 1  # its one seed with a value: no uncertainty at all


def test_summary_pools_acr_counts_and_takes_the_highest_audit_bound(runs):
    t = runs.with_columns(pl.when(pl.col("seed") == 0).then(4).alias("acr_n_searched"),
                          pl.when(pl.col("seed") == 0).then(1).alias("acr_n_success"),
                          pl.when(pl.col("batch_size") == 64).then(pl.col("learning_rate") * 100).alias("audit_eps_lb_95"))
    s = summary_metrics(t, SCORES, "test_nll", None)
    assert s["eps8"]["acr_searched"] == 32 and s["eps8"]["acr_success"] == 8  # 8 seed-0 runs × 4 searched
    assert s["eps8"]["audit_eps_lb_95"] == pytest.approx(1.0)
    no_audit = summary_metrics(runs, SCORES, "test_nll", None)
    assert "audit_eps_lb_95" not in no_audit["eps8"] and "acr_searched" not in no_audit["eps8"]
    assert not any(k.startswith("acr_rare") for k in s["eps8"])  # no rare secret searched: no rare key


def test_summary_pools_the_rare_secrets_acr_counts_apart(runs):
    """acr_searched / acr_success count the frequent secrets' searches (acr_n_*), acr_rare_searched /
    acr_rare_success the rare ones' (acr_rare_n_*), per ε and only where such a search ran."""
    t = runs.with_columns(pl.when(pl.col("seed") == 0).then(4).alias("acr_n_searched"),
                          pl.when(pl.col("seed") == 0).then(3).alias("acr_n_success"),
                          pl.when((pl.col("seed") == 0) & (pl.col("epsilon") == 8.0)).then(5).alias("acr_rare_n_searched"),
                          pl.when((pl.col("seed") == 0) & (pl.col("epsilon") == 8.0))
                          .then(pl.when(pl.col("batch_size") == 64).then(1).otherwise(0)).alias("acr_rare_n_success"))
    s = summary_metrics(t, SCORES, "test_nll", None)
    assert (s["eps8"]["acr_searched"], s["eps8"]["acr_success"]) == (32, 24)  # 8 seed-0 runs × 4, × 3
    n64 = t.filter((pl.col("seed") == 0) & (pl.col("epsilon") == 8.0) & (pl.col("batch_size") == 64)).height
    assert (s["eps8"]["acr_rare_searched"], s["eps8"]["acr_rare_success"]) == (40, n64) and n64 > 0
    assert "acr_rare_searched" not in s["eps2"] and s["eps2"]["acr_searched"] == 32
    assert numbers_only(s) == []


def test_config_table_has_one_flat_entry_per_configuration(runs):
    c = config_metrics(runs, "exposure_gap_mean", "test_nll")
    assert len(c) == 24 and numbers_only(c) == []
    e = c["eps8-b64-T16-lr0.005"]
    assert set(e) == {"exposure_gap_mean", "exposure_gap_mean_se", "test_nll", "test_nll_se"}
    seeds = runs.filter(pl.col("group") == "eps8-b64-T16-lr0.005")["exposure_gap_mean"]
    assert e["exposure_gap_mean"] == pytest.approx(seeds.mean())
    eps8 = runs.filter(pl.col("epsilon") == 8.0).group_by("group").agg(pl.col("exposure_gap_mean").var().alias("v"))
    pooled = math.sqrt(float(eps8["v"].mean()))  # every ε = 8 configuration has 2 seeds: Σ(k−1)s²/Σ(k−1) = mean s²
    assert e["exposure_gap_mean_se"] == pytest.approx(pooled / math.sqrt(2))  # s_p/√k: fewer than 5 seeds
    assert e["exposure_gap_mean_se"] != pytest.approx(seeds.std() / math.sqrt(2))  # not its own 1-df std
    assert "epsinf-b128-T32-lr0.01" in c


def test_analysis_metrics_keep_the_primary_score_only(runs):
    a, _ = compute_analysis(runs, privacy_scores=["exposure_gap_mean", "vmr_mean"], monte_carlo_trials=200,
                            base_utility=None)
    m = analysis_metrics(a)
    assert numbers_only(m) == [] and set(m) == {"n_configs", "n_configs_kept", "exposure_gap_mean"}
    per = m["exposure_gap_mean"]
    assert set(per) == {"eps2", "eps8", "epsinf"}
    e8 = per["eps8"]
    assert e8["std_configs"] == pytest.approx(a["seed_vs_configuration"]["exposure_gap_mean"]["8"]["hyperparameter"])
    assert e8["std_seeds"] == pytest.approx(a["seed_vs_configuration"]["exposure_gap_mean"]["8"]["randomness"])
    assert e8["config_seed_ratio"] == pytest.approx(e8["std_configs"] / e8["std_seeds"])
    assert e8["config_seed_ratio_all"] == pytest.approx(a["table8"]["per_epsilon"]["8"]["all"]["ratio"])
    assert e8["coef_log_eta"] > e8["coef_log_T"] > e8["coef_log_b"] > 0  # the constructed score's order
    assert e8["heuristic_individual"] == 1.0 and e8["risk_algorithm1"] == pytest.approx(0.0)
    assert "risk_algorithm1" not in per["epsinf"]  # no selection without a finite (ε, δ)


def test_the_metrics_of_a_default_sized_cube_make_a_small_diff(runs):
    """The three files of a 24-configuration, 3-ε cube: few enough leaves for a readable `dvc metrics diff` (which
    lists only what moved); each configuration's two values carry their standard errors (48 of the leaves)."""
    a, _ = compute_analysis(runs, privacy_scores=SCORES, monte_carlo_trials=200, base_utility=1.7)
    n = sum(len(list(leaves(f))) for f in (summary_metrics(runs, SCORES + ["test_nll"], "test_nll", 1.7),
                                           config_metrics(runs, a["primary_score"], "test_nll"), analysis_metrics(a)))
    assert n < 250, n


@pytest.fixture
def runs():
    return make_run_table()


def test_the_metrics_are_bit_identical_across_calls(runs):
    """`dvc metrics diff` lists any changed value: a sum taken in another order (a hash group-by's row order) would
    show up as a 1e-16 'change' between two identical runs."""
    from empriv.analysis.variance import summarize

    big = pl.concat([runs] * 50)  # enough rows for polars to split the group-by across threads
    first = json.dumps([summarize(big, SCORES), summary_metrics(big, SCORES, "test_nll", 1.7)])
    for _ in range(10):
        assert json.dumps([summarize(big, SCORES), summary_metrics(big, SCORES, "test_nll", 1.7)]) == first


def test_table8_metrics_stay_compact_and_numeric():
    """Two keys per ε for Table 8's ratio, null (not a string or NaN) where undefined: one seed per configuration."""
    a, _ = compute_analysis(make_run_table(seeds=(0,)), privacy_scores=["exposure_gap_mean"], monte_carlo_trials=20,
                            base_utility=None)
    m = analysis_metrics(a)
    assert numbers_only(m) == []
    for e in ("eps2", "eps8", "epsinf"):
        entry = m["exposure_gap_mean"][e]
        assert entry["config_seed_ratio"] is None and entry["config_seed_ratio_all"] is None
        assert entry["std_configs"] is not None and entry["std_seeds"] is None
        assert len(entry) <= 21  # 14, + n_configs, three coefficients' and three heuristics' standard errors


def test_summary_separates_the_standard_error_over_configurations_from_the_seed_noise(runs):
    """Table 8's two sources, for the mean: se = std of configuration means / √n, se_seed = √(mean s_i²/k_i / n)."""
    s = summary_metrics(runs, SCORES, "test_nll", None)["eps8"]["exposure_gap_mean"]
    per = (runs.filter(pl.col("epsilon") == 8.0).group_by("group")
           .agg(pl.col("exposure_gap_mean").mean().alias("m"), pl.col("exposure_gap_mean").std().alias("s"),
                pl.len().alias("k")))
    assert s["se"] == pytest.approx(per["m"].std() / math.sqrt(8))
    assert s["se_seed"] == pytest.approx(math.sqrt(float((per["s"] ** 2 / per["k"]).mean()) / 8))
    assert s["n"] == 8 and s["n_runs"] == 16
    one_seed = summary_metrics(runs.filter(pl.col("seed") == 0), SCORES, "test_nll", None)["eps8"]["exposure_gap_mean"]
    assert one_seed["se_seed"] is None and one_seed["se"] is not None and one_seed["n_runs"] == 8


def test_analysis_metrics_carry_the_coefficients_standard_errors(runs):
    a, _ = compute_analysis(runs, privacy_scores=["exposure_gap_mean"], monte_carlo_trials=20, base_utility=None)
    e8 = analysis_metrics(a)["exposure_gap_mean"]["eps8"]
    terms = a["regression"]["8"]["exposure_gap_mean"]["individual"]["terms"]
    assert e8["coef_log_b_se"] == pytest.approx(terms["log_b"]["se"]) and e8["coef_log_b_se"] > 0
    assert e8["n_configs"] == a["seed_vs_configuration"]["exposure_gap_mean"]["8"]["n_configs"]


def test_a_configuration_with_one_seed_gets_the_pooled_seed_standard_deviation_of_its_epsilon(runs):
    """configs.json `<score>_se`: s_p/√k with fewer than 5 seeds, s_p the pooled within-configuration seed std of that
    score at that ε, √(Σ (k_j − 1) s_j² / Σ (k_j − 1)); a cube with one seed everywhere: null (no seed noise known)."""
    lone = "eps8-b64-T16-lr0.005"
    t = runs.filter(~((pl.col("group") == lone) & (pl.col("seed") == 1)))
    c = config_metrics(t, "exposure_gap_mean", "test_nll")
    others = (t.filter((pl.col("epsilon") == 8.0) & (pl.col("group") != lone)).group_by("group")
              .agg(pl.col("exposure_gap_mean").var().alias("v"), pl.len().alias("k")))
    pooled = math.sqrt(float((others["v"] * (others["k"] - 1)).sum() / (others["k"] - 1).sum()))
    assert c[lone]["exposure_gap_mean_se"] == pytest.approx(pooled) and pooled > 0
    # two seeds: the same pooled std over √2 (its own std has one degree of freedom)
    assert c["eps8-b128-T16-lr0.005"]["exposure_gap_mean_se"] == pytest.approx(pooled / math.sqrt(2))
    # acr_mean has a value on seed 0 only (the constructed table): one seed everywhere, so no seed noise is known
    assert config_metrics(runs, "acr_mean", "test_nll")[lone]["acr_mean_se"] is None
    single = config_metrics(runs.filter(pl.col("seed") == 0), "exposure_gap_mean", "test_nll")
    assert all(e["exposure_gap_mean_se"] is None and e["test_nll_se"] is None for e in single.values())


def test_five_seeds_or_more_use_the_configurations_own_seed_std_and_fewer_the_pooled_one():
    """seed_standard_errors on a hand-made configuration table: at ε = 8, configurations with 2, 3 and 6 seeds; the
    one with 6 keeps s/√6 of its own seeds, the others get s_p/√k with s_p pooled over all three (weights k − 1)."""
    from empriv.analysis.metrics import OWN_SEED_STD_FROM, seed_standard_errors

    t = pl.DataFrame({"epsilon": [8.0, 8.0, 8.0, 2.0],
                      "x__seed_std": [0.1, 0.4, 1.0, None], "x__n_seeds": [2, 3, 6, 1]})
    pooled = math.sqrt((1 * 0.1**2 + 2 * 0.4**2 + 5 * 1.0**2) / (1 + 2 + 5))
    se = seed_standard_errors(t, "x")
    assert OWN_SEED_STD_FROM == 5
    assert se[0] == pytest.approx(pooled / math.sqrt(2)) and se[1] == pytest.approx(pooled / math.sqrt(3))
    assert se[2] == pytest.approx(1.0 / math.sqrt(6))
    assert se[3] is None  # ε = 2 has no configuration with two seeds: no seed noise known
