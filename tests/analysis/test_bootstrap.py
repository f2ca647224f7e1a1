"""empriv.analysis.bootstrap: the nested bootstrap behind the derived statistics' standard errors in
metrics/analysis.json — its resamples, its determinism and its accuracy against a Monte Carlo truth."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from analysis_tables import make_run_table

from empriv.analysis.bootstrap import analysis_standard_errors, bootstrap_standard_errors, resample_runs
from empriv.analysis.metrics import analysis_metrics
from empriv.analysis.stage import compute_analysis
from empriv.analysis.table import config_table
from empriv.analysis.variance import seed_vs_configuration


def test_a_resample_draws_configurations_then_their_seeds_within_each_epsilon(runs):
    t = resample_runs(runs, np.random.default_rng(3))
    assert t.height == runs.height
    assert t.group_by("epsilon").len().sort("epsilon")["len"].to_list() == [16, 16, 16]  # 8 configurations × 2 seeds
    for group, g in t.group_by("group"):
        original = group[0].rsplit("~", 1)[0]
        assert g.height == 2 and set(g["seed"].to_list()) == {0, 1}  # renumbered
        # every run of a drawn configuration is a run of that configuration
        source = runs.filter(pl.col("group") == original)["exposure_gap_mean"].to_list()
        assert set(g["exposure_gap_mean"].to_list()) <= set(source)
        assert set(g["config"].to_list()) == {f"{group[0]}-s0", f"{group[0]}-s1"}
    assert t["group"].n_unique() == 24  # a configuration drawn twice is two configurations


def test_the_standard_errors_are_deterministic_and_follow_the_seed(runs):
    kw = dict(base_utility=1.7, replicates=20)
    a = analysis_standard_errors(runs, "exposure_gap_mean", "test_nll", **kw)
    assert a == analysis_standard_errors(runs, "exposure_gap_mean", "test_nll", **kw)
    assert a != analysis_standard_errors(runs, "exposure_gap_mean", "test_nll", seed=1, **kw)
    assert set(a) == {"2", "8", "inf"} and a["8"]["std_configs"] > 0 and a["8"]["std_seeds"] > 0
    assert "risk_algorithm1" in a["8"] and "risk_algorithm1" not in a["inf"]  # no selection at ε = ∞
    assert analysis_standard_errors(runs, None, "test_nll") == {}
    with pytest.raises(ValueError, match="replicates must be >= 2, got 1"):
        bootstrap_standard_errors(runs, lambda t: {}, replicates=1)


def planted(rng, n_configs=40, seeds=3, tau=1.0, sigma=0.5) -> pl.DataFrame:
    """One ε, ``n_configs`` configurations whose true scores are drawn N(0, τ²), each run adding N(0, σ²) seed noise."""
    mu = rng.normal(0.0, tau, n_configs)
    rows = []
    for c in range(n_configs):
        for s in range(seeds):
            rows.append({"group": f"c{c}", "config": f"c{c}-s{s}", "epsilon": 8.0, "batch_size": 64 + c, "steps": 16,
                         "learning_rate": 0.01, "seed": s, "y": mu[c] + rng.normal(0.0, sigma)})
    return pl.DataFrame(rows)


def std_configs(table) -> dict:
    return {"std_configs": seed_vs_configuration(config_table(table, ["y"]), "y")["8"]["hyperparameter"]}


def test_the_bootstrap_standard_error_is_close_to_the_monte_carlo_truth():
    """Planted: 40 configurations (true scores N(0, 1)) × 3 seeds (noise N(0, 0.5²)). The truth is the spread of the
    std of the configuration means over 4,000 fresh cubes (configurations and seeds drawn again); the bootstrap,
    from one cube at a time, averages within 12 % of it over 5 cubes, and no single cube is off by more than 35 %."""
    rng = np.random.default_rng(0)
    fresh = rng.normal(0.0, 1.0, (4000, 40, 1)) + rng.normal(0.0, 0.5, (4000, 40, 3))
    truth = float(np.std(fresh.mean(axis=2).std(axis=1, ddof=1), ddof=1))
    assert truth == pytest.approx(1.04 / math.sqrt(78), rel=0.1)  # ≈ sd/√(2(n − 1)) of a normal sample
    estimates = [bootstrap_standard_errors(planted(np.random.default_rng(10 + i)), std_configs, replicates=200)
                 ["std_configs"] for i in range(5)]
    assert np.mean(estimates) == pytest.approx(truth, rel=0.12), (estimates, truth)
    assert all(abs(e / truth - 1) < 0.35 for e in estimates), (estimates, truth)


def test_a_statistic_undefined_in_most_resamples_has_no_standard_error():
    t = planted(np.random.default_rng(1), n_configs=4, seeds=1)
    def statistic(x):  # "rare": only when the first drawn configuration is c0 (a quarter of the resamples)
        return {"never": None, "rare": float(x["y"][0]) if x["group"][0].startswith("c0~") else None,
                "sum": float(x["y"].sum())}

    se = bootstrap_standard_errors(t, statistic, replicates=40)
    assert se["never"] is None and se["rare"] is None and se["sum"] > 0


def test_analysis_metrics_write_the_standard_errors_beside_the_derived_statistics(runs):
    a, _ = compute_analysis(runs, privacy_scores=["exposure_gap_mean"], monte_carlo_trials=20, base_utility=1.7,
                            bootstrap_replicates=20)
    per = analysis_metrics(a)["exposure_gap_mean"]
    written, floors = 0, 0
    for key, e in per.items():
        label = "inf" if key == "epsinf" else key[3:]
        boot = a["standard_errors"][label]
        for stat in ("std_configs", "std_seeds", "config_seed_ratio", "config_seed_ratio_all", "risk_algorithm1",
                     "risk_best_utility"):
            if e.get(stat) is not None and boot.get(stat) is not None:
                assert e[f"{stat}_se"] == boot[stat], (key, stat)
                written += 1
        # an accuracy gets at least the binomial standard error of its pairs (every resample may agree: 0)
        for rule, h in a["heuristics"][label]["exposure_gap_mean"].items():
            if h["accuracy"] is not None:
                k, n = h["n_correct"], h["n_pairs"]
                p = (k + 0.5) / (n + 1) if k in (0, n) else k / n
                assert e[f"heuristic_{rule}_se"] >= math.sqrt(n * p * (1 - p)) / n > 0
                floors += 1
        # the kept configurations: binomial of the ε group's configurations
        total, kept = a["retention"][label]["n_configs"], e["n_configs"]
        q = kept / total if 0 < kept < total else (kept + 0.5) / (total + 1)
        assert e["n_configs_se"] == pytest.approx(math.sqrt(total * q * (1 - q)))
    assert written >= 8 and floors >= 2, (written, floors)
    # without the bootstrap (the default of compute_analysis): no bootstrap keys
    a0, _ = compute_analysis(runs, privacy_scores=["exposure_gap_mean"], monte_carlo_trials=20, base_utility=1.7)
    assert a0["standard_errors"] == {}
    assert not any(k in e for e in analysis_metrics(a0)["exposure_gap_mean"].values()
                   for k in ("std_configs_se", "n_configs_se"))


@pytest.fixture
def runs():
    return make_run_table()
