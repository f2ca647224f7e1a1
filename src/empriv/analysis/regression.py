"""Ordinary least squares in log space, reported as R's ``lm()`` does (the research's Table 2 and Table 13).

    individual:  y ~ 1 + log b + log T + log η
    composite:   y ~ 1 + log C + log η          (C = b·T)

Each coefficient comes with its standard error, t statistic and two-sided p-value (Student t with
n − p degrees of freedom), plus R², adjusted R², n and the residual degrees of freedom. statsmodels
does the fit. R² also gets a standard error, ``r2_se`` (:func:`r2_standard_error`): how much R² moves when the
runs' noise is drawn again over the same configurations, the uncertainty `empriv diff` reads for it. Covariates that do not vary in the data (one batch size in the cube …) cannot be
estimated: they are dropped and listed in ``dropped``; with fewer rows than parameters + 1 the
model is not fitted (``fitted`` False with the reason).
"""

from __future__ import annotations

import math

MODELS = {
    "individual": ("batch_size", "steps", "learning_rate"),
    "composite": ("compute", "learning_rate"),
}
R2_BOOTSTRAP_REPLICATES = 1000
R2_BOOTSTRAP_SEED = 0  # fixed: the same data give the same r2_se (metrics are compared across commits)
TERM_NAMES = {"batch_size": "log_b", "steps": "log_T", "learning_rate": "log_eta", "compute": "log_C",
              "update": "log_U"}


def _none_if_nan(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def ols(y, X, names: list[str]) -> dict:
    """OLS of y on [1, X] (X: n × k array, columns named ``names``). R's lm() summary as a dict."""
    import numpy as np
    import statsmodels.api as sm

    y = np.asarray(y, dtype=float)
    X = np.asarray(X, dtype=float).reshape(len(y), -1)
    n, k = X.shape
    if n < k + 2:
        return {"fitted": False, "reason": f"{n} observation(s) for {k + 1} parameters (need at least {k + 2})",
                "n": n, "terms": {}, "dropped": []}
    fit = sm.OLS(y, sm.add_constant(X, has_constant="add")).fit()
    terms = {}
    for i, name in enumerate(["intercept", *names]):
        terms[name] = {"coef": float(fit.params[i]), "se": _none_if_nan(fit.bse[i]),
                       "t": _none_if_nan(fit.tvalues[i]), "p": _none_if_nan(fit.pvalues[i])}
    r2 = _none_if_nan(fit.rsquared)
    return {"fitted": True, "reason": None, "n": n, "df_resid": int(fit.df_resid), "r2": r2,
            "r2_se": None if r2 is None else r2_standard_error(y, X),
            "adj_r2": _none_if_nan(fit.rsquared_adj), "terms": terms, "dropped": []}


def r2_standard_error(y, X, replicates: int = R2_BOOTSTRAP_REPLICATES, seed: int = R2_BOOTSTRAP_SEED) -> float | None:
    """The standard error of the R² of the OLS of ``y`` on [1, ``X``] with the design held fixed: the standard
    deviation of R² over ``replicates`` residual-bootstrap samples (y* = fitted + residuals drawn with replacement,
    each residual first divided by √(1 − its leverage) and the set centred; Davison & Hinkley 1997, Algorithm 6.3).

    The configurations of a cube are fixed and only the runs' noise would change on a rerun, so this is the spread
    that matters when two revisions' R² are compared, not the random-design formulas (Olkin & Finn's was about
    3× too small at n = 8, k = 3 in a simulation here). Against the Monte Carlo spread of R² over fresh noise on a
    fixed design (tests/analysis/test_regression.py), its median runs 5–12 % low at n = 16 (three designs) and a
    fifth to a quarter low at n = 8 (4 residual degrees of freedom), where it also varies from data set to data set.
    None when no residual degree of freedom is left; 0.0 for an exact fit. Deterministic: the draws come from
    ``seed``."""
    import numpy as np

    y = np.asarray(y, dtype=float)
    A = np.column_stack([np.ones(len(y)), np.asarray(X, dtype=float).reshape(len(y), -1)])
    n, p = A.shape
    if n - p < 1:
        return None
    hat = A @ np.linalg.pinv(A)
    fitted = hat @ y
    leverage = np.clip(np.diag(hat), 0.0, 1.0 - 1e-12)
    residuals = (y - fitted) / np.sqrt(1.0 - leverage)
    residuals -= residuals.mean()
    if not np.any(np.abs(residuals) > 1e-12 * max(1.0, float(np.abs(y).max()))):
        return 0.0
    draws = np.random.default_rng(seed).integers(0, n, size=(replicates, n))
    ys = fitted + residuals[draws]
    sse = ((ys - ys @ hat.T) ** 2).sum(axis=1)
    sst = ((ys - ys.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    return float(np.std(1.0 - sse / sst, ddof=1))


def log_regression(table, score: str, covariates: tuple[str, ...] | list[str]) -> dict:
    """y = ``score`` regressed on log of each covariate column, over the table's rows with a finite score.

    Rows without a score (null/NaN: e.g. ACR over successes where no search succeeded) are left out, never read
    as 0; ``n_without_value`` counts them. Constant covariates are dropped (reported in ``dropped``); so are
    covariates perfectly collinear with the ones kept before them (e.g. log C when b and T are both given).
    """
    import numpy as np
    import polars as pl

    from empriv.analysis.table import require_columns

    require_columns(table, [score, *covariates])
    t = table.select([pl.col(score).cast(pl.Float64), *[pl.col(c).cast(pl.Float64) for c in covariates]]).drop_nulls()
    y = t[score].to_numpy()
    ok = np.isfinite(y)
    missing = table.height - int(ok.sum())
    cols, names, dropped = [], [], []
    for c in covariates:
        x = t[c].to_numpy()
        if (x[ok] <= 0).any():
            raise ValueError(f"covariate {c!r} must be > 0 to take its log, got {float(x[ok].min())}")
        lx = np.log(x[ok])
        trial = np.column_stack([np.ones(ok.sum()), *cols, lx])
        if ok.sum() == 0 or np.ptp(lx) == 0 or np.linalg.matrix_rank(trial) < trial.shape[1]:
            dropped.append(TERM_NAMES.get(c, f"log_{c}"))
            continue
        cols.append(lx)
        names.append(TERM_NAMES.get(c, f"log_{c}"))
    if ok.sum() and np.ptp(y[ok]) == 0:
        return {"fitted": False, "reason": f"{score} is constant ({float(y[ok][0]):g}) over these runs", "n": int(ok.sum()),
                "terms": {}, "dropped": dropped, "score": score, "n_without_value": missing}
    if not ok.sum():
        return {"fitted": False, "reason": f"no run has a {score} value", "n": 0, "terms": {}, "dropped": dropped,
                "score": score, "n_without_value": missing}
    if not cols:
        return {"fitted": False, "reason": "no covariate varies in the data", "n": int(ok.sum()), "terms": {},
                "dropped": dropped, "score": score, "n_without_value": missing}
    out = ols(y[ok], np.column_stack(cols), names)
    out["dropped"] = dropped
    out["score"] = score
    out["n_without_value"] = missing
    return out


def regressions(table, scores: list[str], by: str = "epsilon") -> dict:
    """Both models (individual, composite) for every score, per ``by`` group (ε label → score → model → fit).

    Rows are runs (every seed is an observation, as in the research's 92 and 114 instances).
    """
    import polars as pl

    from empriv.analysis.table import epsilon_label

    out: dict = {}
    for key in sorted(table[by].unique().to_list()):
        g = table.filter(pl.col(by) == key)
        label = epsilon_label(key) if by == "epsilon" else str(key)
        out[label] = {s: {m: log_regression(g, s, cov) for m, cov in MODELS.items()} for s in scores}
    return out


def significance_stars(p: float | None) -> str:
    if p is None:
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""
