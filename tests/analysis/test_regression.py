"""empriv.analysis.regression: OLS in log space vs an independent numpy least squares + scipy t computation."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from empriv.analysis.regression import log_regression, regressions, significance_stars


def synthetic(seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    rows = []
    for b in (64, 128, 256):
        for t in (16, 32, 64):
            for e in (0.001, 0.003, 0.01):
                for s in (0, 1):
                    y = 0.5 + 0.13 * np.log(b) + 0.37 * np.log(t) + 0.51 * np.log(e) + noise * rng.normal()
                    rows.append({"batch_size": b, "steps": t, "learning_rate": e, "compute": b * t, "seed": s,
                                 "epsilon": 4.0, "y": y})
    return pl.DataFrame(rows)


def reference(y, X):
    """lm(): β = lstsq, σ² = RSS/(n−p), SE = sqrt(diag(σ² (XᵀX)⁻¹)), t = β/SE, p = 2·(1 − F_t(|t|; n−p))."""
    X1 = np.column_stack([np.ones(len(y)), X])
    beta, *_ = np.linalg.lstsq(X1, y, rcond=None)
    resid = y - X1 @ beta
    n, k = X1.shape
    sigma2 = resid @ resid / (n - k)
    se = np.sqrt(np.diag(sigma2 * np.linalg.inv(X1.T @ X1)))
    t = beta / se
    p = 2 * stats.t.sf(np.abs(t), n - k)
    r2 = 1 - resid @ resid / ((y - y.mean()) @ (y - y.mean()))
    return beta, se, t, p, r2


def test_individual_model_matches_numpy_and_scipy():
    d = synthetic()
    fit = log_regression(d, "y", ["batch_size", "steps", "learning_rate"])
    X = np.column_stack([np.log(d["batch_size"].to_numpy()), np.log(d["steps"].to_numpy()), np.log(d["learning_rate"].to_numpy())])
    beta, se, t, p, r2 = reference(d["y"].to_numpy(), X)
    assert fit["fitted"] and fit["n"] == 54 and fit["df_resid"] == 50
    names = ["intercept", "log_b", "log_T", "log_eta"]
    assert list(fit["terms"]) == names
    for i, name in enumerate(names):
        term = fit["terms"][name]
        assert term["coef"] == pytest.approx(beta[i], rel=1e-9, abs=1e-12)
        assert term["se"] == pytest.approx(se[i], rel=1e-9)
        assert term["t"] == pytest.approx(t[i], rel=1e-9)
        assert term["p"] == pytest.approx(p[i], rel=1e-6, abs=1e-300)
    assert fit["r2"] == pytest.approx(r2, rel=1e-9)
    # the known coefficients are recovered within their standard errors' reach
    assert fit["terms"]["log_T"]["coef"] == pytest.approx(0.37, abs=4 * se[2])
    assert fit["terms"]["log_eta"]["p"] < 1e-10


def test_composite_model_matches_numpy_and_scipy():
    d = synthetic(seed=1)
    fit = log_regression(d, "y", ["compute", "learning_rate"])
    X = np.column_stack([np.log(d["compute"].to_numpy()), np.log(d["learning_rate"].to_numpy())])
    beta, se, t, p, r2 = reference(d["y"].to_numpy(), X)
    assert list(fit["terms"]) == ["intercept", "log_C", "log_eta"]
    for i, name in enumerate(fit["terms"]):
        assert fit["terms"][name]["coef"] == pytest.approx(beta[i], rel=1e-9, abs=1e-12)
        assert fit["terms"][name]["p"] == pytest.approx(p[i], rel=1e-6, abs=1e-300)
    assert fit["r2"] == pytest.approx(r2)


def test_noiseless_data_recovers_the_coefficients_exactly():
    fit = log_regression(synthetic(noise=0.0).with_columns((pl.col("y") + 1e-9 * pl.col("seed")).alias("y")), "y",
                         ["batch_size", "steps", "learning_rate"])
    assert fit["terms"]["log_b"]["coef"] == pytest.approx(0.13, abs=1e-6)
    assert fit["terms"]["log_T"]["coef"] == pytest.approx(0.37, abs=1e-6)
    assert fit["terms"]["log_eta"]["coef"] == pytest.approx(0.51, abs=1e-6)
    assert fit["r2"] == pytest.approx(1.0)


def test_degenerate_designs_do_not_crash():
    d = synthetic().filter(pl.col("batch_size") == 64)  # one batch size: log b is constant
    fit = log_regression(d, "y", ["batch_size", "steps", "learning_rate"])
    assert fit["fitted"] and fit["dropped"] == ["log_b"] and list(fit["terms"]) == ["intercept", "log_T", "log_eta"]
    one = d.filter((pl.col("steps") == 16) & (pl.col("learning_rate") == 0.01))
    assert log_regression(one, "y", ["batch_size", "steps", "learning_rate"])["fitted"] is False
    const = synthetic().with_columns(pl.lit(0.0).alias("y"))
    res = log_regression(const, "y", ["batch_size", "steps"])
    assert res["fitted"] is False and "constant" in res["reason"]
    tiny = synthetic().head(2)  # two rows, one varying covariate (η): 2 parameters need 3 rows
    assert log_regression(tiny, "y", ["batch_size", "steps", "learning_rate"])["fitted"] is False


def test_regressions_per_epsilon_and_unknown_columns():
    d = pl.concat([synthetic(), synthetic(seed=2).with_columns(pl.lit(float("inf")).alias("epsilon"))])
    out = regressions(d, ["y"])
    assert list(out) == ["4", "inf"]
    assert set(out["4"]["y"]) == {"individual", "composite"}
    with pytest.raises(ValueError, match=r"unknown score column\(s\) \['acr_mean'\]"):
        regressions(d, ["acr_mean"])


def test_stars():
    assert [significance_stars(p) for p in (1e-5, 0.005, 0.02, 0.2, None)] == ["***", "**", "*", "", ""]


def test_runs_without_a_score_are_left_out_not_zero():
    """ACR over successes is null where no search succeeded: the fit uses the other runs only, as if those rows
    were absent, and counts them."""
    d = synthetic()
    holes = d.with_row_index("i").with_columns(
        pl.when(pl.col("i") % 5 == 0).then(None).otherwise(pl.col("y")).alias("y")).drop("i")
    kept = d.with_row_index("i").filter(pl.col("i") % 5 != 0).drop("i")
    fit, ref = log_regression(holes, "y", ("batch_size", "steps", "learning_rate")), \
        log_regression(kept, "y", ("batch_size", "steps", "learning_rate"))
    assert fit["n"] == ref["n"] == 54 - 11 and fit["n_without_value"] == 11 and ref["n_without_value"] == 0
    for term in ("intercept", "log_b", "log_T", "log_eta"):
        assert fit["terms"][term]["coef"] == pytest.approx(ref["terms"][term]["coef"])
        assert fit["terms"][term]["p"] == pytest.approx(ref["terms"][term]["p"])
    # filled with 0 instead, the fit would differ: the test above is not vacuous
    zero = log_regression(holes.with_columns(pl.col("y").fill_null(0.0)), "y", ("batch_size", "steps", "learning_rate"))
    assert zero["terms"]["log_b"]["coef"] != pytest.approx(ref["terms"]["log_b"]["coef"])
    empty = log_regression(d.with_columns(pl.lit(None, dtype=pl.Float64).alias("y")), "y", ("batch_size", "steps"))
    assert empty["fitted"] is False and empty["reason"] == "no run has a y value" and empty["n_without_value"] == 54


def test_table2_recovers_the_coefficients_of_a_known_model():
    """y = 1 + 2 log T + 0.5 log η + noise over a full 3 × 3 × 3 cube, 3 seeds: log b ≈ 0, T and η recovered."""
    rng = np.random.default_rng(7)
    rows = []
    for b in (32, 64, 128):
        for t in (10, 20, 40):
            for e in (0.001, 0.01, 0.1):
                for s in range(3):
                    rows.append({"batch_size": b, "steps": t, "learning_rate": e, "compute": b * t, "seed": s,
                                 "epsilon": 8.0, "y": 1 + 2 * np.log(t) + 0.5 * np.log(e) + 0.05 * rng.normal()})
    out = regressions(pl.DataFrame(rows), ["y"])["8"]["y"]
    fit = out["individual"]
    assert fit["fitted"] and fit["n"] == 81 and fit["df_resid"] == 77 and fit["r2"] > 0.99
    terms = fit["terms"]
    assert terms["intercept"]["coef"] == pytest.approx(1.0, abs=0.1)
    assert terms["log_T"]["coef"] == pytest.approx(2.0, abs=0.02) and terms["log_T"]["p"] < 1e-10
    assert terms["log_eta"]["coef"] == pytest.approx(0.5, abs=0.01) and terms["log_eta"]["p"] < 1e-10
    assert abs(terms["log_b"]["coef"]) < 0.02 and terms["log_b"]["p"] > 0.01
    assert significance_stars(terms["log_T"]["p"]) == "***" and significance_stars(terms["log_b"]["p"]) == ""
    # composite: y ~ log C + log η, with C = b·T: log C carries T's effect only partly (b adds nothing)
    comp = out["composite"]
    assert comp["fitted"] and comp["n"] == 81 and set(comp["terms"]) == {"intercept", "log_C", "log_eta"}
    assert comp["terms"]["log_eta"]["coef"] == pytest.approx(0.5, abs=0.02)


def test_r2_standard_error_is_the_spread_of_r2_over_fresh_noise_on_a_fixed_design():
    """r2_se (a residual bootstrap with the design held fixed) against the Monte Carlo truth: R² of the same 16
    configurations with the noise drawn 3,000 times. The median estimate over 40 data sets is within 10 %."""
    from empriv.analysis.regression import ols, r2_standard_error

    rng = np.random.default_rng(7)
    X = rng.standard_normal((16, 3))
    mean = X @ np.array([0.5, 0.3, 0.2])

    def r2(y):
        A = np.column_stack([np.ones(16), X])
        r = y - A @ np.linalg.lstsq(A, y, rcond=None)[0]
        return 1 - r @ r / ((y - y.mean()) @ (y - y.mean()))

    truth = np.std([r2(mean + 0.6 * rng.standard_normal(16)) for _ in range(3000)])
    estimates = [r2_standard_error(mean + 0.6 * rng.standard_normal(16), X) for _ in range(40)]
    assert np.median(estimates) == pytest.approx(truth, rel=0.10)
    y = mean + 0.6 * rng.standard_normal(16)
    fit = ols(y, X, ["a", "b", "c"])
    assert fit["r2_se"] == r2_standard_error(y, X) == ols(y, X, ["a", "b", "c"])["r2_se"]  # deterministic
    assert ols(mean, X, ["a", "b", "c"])["r2_se"] == 0.0  # an exact fit does not move
    assert r2_standard_error(mean[:4], X[:4]) is None  # 4 rows, 4 parameters: no residual left
