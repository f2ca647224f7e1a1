"""Audited ε̂ across configurations at one ε (the research's section 5.1 and appendix E.1, issue 18).

At one guarantee (ε, δ), do the configurations the audit finds leakier (a higher lower bound ε̂) memorise more, and
do they have better utility? The research found ε̂ barely rank-correlated with the memorisation score (ρ = −0.13 with
ACR at ε = 8) but strongly with utility (−0.71 with test loss, i.e. the more useful model audits higher).

The audit trains its own models (with canaries) under the audit cube's configurations; an audit configuration named
like a main-cube configuration shares its hyperparameters, so the two are joined by name: each configuration's ε̂
(mean over its audited seeds) meets the seed means of its memorisation scores and utility. Per finite ε (and per
method when the table holds several) with at least three audited configurations, this module ranks the
configurations by ε̂ and gives the Spearman rank correlation (scipy.stats.spearmanr, two-sided p) of ε̂ with every
score and the utility, and of every score with the utility over the same configurations. A pair with fewer than
three configurations having both values, or with a constant column, has no ρ: its ``reason`` says which.
The configurations are taken before the retention rule (ε̂ is ranked over every audited configuration).
"""

from __future__ import annotations

import math

from empriv.analysis.table import epsilon_label, main_method, table_methods

EPS_HAT_COLUMNS = ("audit_eps_lb_95", "audit_eps_lb_99")
MIN_CONFIGS = 3


def spearman(x: list[float | None], y: list[float | None], names: tuple[str, str] = ("x", "y")) -> dict:
    """Spearman's ρ of the pairs where both values exist, with its two-sided p-value and n; ``rho`` and ``p`` None,
    and ``reason`` set, when n < 3 or either column is constant over those pairs."""
    import numpy as np
    from scipy.stats import spearmanr

    pairs = [(float(a), float(b)) for a, b in zip(x, y) if _ok(a) and _ok(b)]
    n = len(pairs)
    out = {"rho": None, "p": None, "n": n, "reason": None}
    if n < MIN_CONFIGS:
        out["reason"] = f"n = {n} < {MIN_CONFIGS} configurations with both values"
        return out
    a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    for name, v in zip(names, (a, b)):
        if np.ptp(v) == 0:
            out["reason"] = f"{name} is constant ({v[0]:.6g}) over the n = {n} configurations"
            return out
    res = spearmanr(a, b)
    out["rho"], out["p"] = float(res.statistic), float(res.pvalue)
    return out


def _ok(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _group_key(eps: float, method: str | None, main: str | None) -> str:
    key = "inf" if math.isinf(eps) else f"{eps:g}"
    return key if method is None or method == main else f"{key}-{method}"


def audit_spread(configs, *, scores: list[str], utility: str, primary: str | None = None,
                 outside_cube: list[str] | None = None) -> dict:
    """ε̂ ranked and rank-correlated across the audited configurations of each finite ε (and method).

    ``configs``: one row per configuration (seed means, :func:`empriv.analysis.table.config_table`) with the audit's
    ``audit_eps_lb_*`` columns joined (null where not audited). ``outside_cube``: audit runs with no main-cube run
    (reported; they have no scores). Returns ``eligible`` (some group has ≥ 3 audited configurations), the ε̂
    columns, the largest number of audited configurations at one finite ε, and ``groups`` (every finite ε, and
    method, with at least one audited configuration): key (``8``, or
    ``8-<method>`` for a method other than the main one) → ε, method, ``n_audited``, the ranking (rank 1 = highest
    ε̂, ties share the average rank) and ``correlations`` (``<a>~<b>`` → rho, p, n, reason)."""
    import polars as pl
    from scipy.stats import rankdata

    eps_cols = [c for c in EPS_HAT_COLUMNS if c in configs.columns
                and configs[c].cast(pl.Float64).fill_nan(None).drop_nulls().len()]
    out: dict = {"eligible": False, "epsilon_columns": eps_cols, "min_configurations": MIN_CONFIGS,
                 "max_audited_at_one_epsilon": 0, "groups": {}, "outside_cube": list(outside_cube or []),
                 "reason": None}
    if not eps_cols:
        out["reason"] = "no audited configuration of the main cube has an ε̂ (records/audit joined by name)"
        return out
    lead = eps_cols[0]
    methods = table_methods(configs)
    by_method = len(methods) > 1
    main = main_method(methods) if by_method else None
    targets = [c for c in dict.fromkeys([*scores, utility]) if c in configs.columns]
    finite = configs.filter(pl.col("epsilon").is_finite())
    keys = ["epsilon", "method"] if by_method else ["epsilon"]
    for key_vals, g in finite.sort(keys).group_by(keys, maintain_order=True):
        eps, method = key_vals[0], (key_vals[1] if by_method else None)
        audited = g.filter(pl.col(lead).cast(pl.Float64).fill_nan(None).is_not_null())
        n = audited.height
        if n == 0:
            continue  # nothing audited at this ε (for this method): no group
        out["max_audited_at_one_epsilon"] = max(out["max_audited_at_one_epsilon"], n)
        entry: dict = {"epsilon": epsilon_label(eps), "method": method, "n_audited": n, "n_configs": g.height}
        if n < MIN_CONFIGS:
            entry.update(eligible=False, reason=f"{n} audited configuration(s) at this ε (≥ {MIN_CONFIGS} needed)")
            out["groups"][_group_key(eps, method, main)] = entry
            continue
        rows = list(audited.iter_rows(named=True))
        ranks = rankdata([-float(r[lead]) for r in rows], method="average")
        ranking = []
        for r, rank in sorted(zip(rows, ranks), key=lambda t: (t[1], t[0]["group"])):
            item = {"config": r["group"], "rank": float(rank)}
            for c in [*eps_cols, *([primary] if primary else []), utility]:
                if c in r:
                    item[c] = None if not _ok(r[c]) else float(r[c])
            ranking.append(item)
        corr = {}
        for e in eps_cols:
            for t in targets:
                corr[f"{e}~{t}"] = spearman([r[e] for r in rows], [r[t] for r in rows], (e, t))
        for s in scores:
            if s in configs.columns and s != utility and utility in configs.columns:
                corr[f"{s}~{utility}"] = spearman([r[s] for r in rows], [r[utility] for r in rows], (s, utility))
        entry.update(eligible=True, reason=None, ranking=ranking, correlations=corr)
        out["groups"][_group_key(eps, method, main)] = entry
        out["eligible"] = True
    if not out["eligible"]:
        out["reason"] = (f"the audit cube has at most {out['max_audited_at_one_epsilon']} configuration(s) of the main "
                         f"cube at one finite ε: ranking ε̂ across configurations needs ≥ {MIN_CONFIGS}")
    return out
