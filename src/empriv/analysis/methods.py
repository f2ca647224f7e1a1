"""Adaptation methods side by side (full, LoRA, prefix, prompt, head, DP-Flat variants …): per ε and method, the
variance across configurations, utility and the primary privacy score.

The research's per-configuration statistics (regression, heuristics, Algorithm 1) compare hyperparameters under one
training procedure, so :func:`empriv.analysis.stage.compute_analysis` runs them on one method (:func:`main_method`)
and adds this comparison when a run table holds several. The retention rule is applied per ε *and method* (each
method against its own best configuration): a method that is worse everywhere keeps its configurations, rather than
losing all of them to the best method's threshold.
"""

from __future__ import annotations

import math

from empriv.analysis.stats import sample_std as _std
from empriv.analysis.table import config_table, epsilon_label, main_method, retention_filter, table_methods


def _values(frame, column: str) -> list[float]:
    import polars as pl

    if column not in frame.columns:
        return []
    return [float(v) for v in frame[column].cast(pl.Float64).fill_nan(None).drop_nulls().to_list()]



def method_order(methods: list[str]) -> list[str]:
    """The main method first, then the others in order of appearance."""
    main = main_method(methods)
    return [main, *[m for m in methods if m != main]] if main is not None else []


def method_comparison(table, *, scores: list[str], utility: str, primary: str | None, base_utility: float | None,
                      retention_fraction: float = 0.9) -> dict:
    """Per ε and method over the retained configurations (seed means; retention per ε and method):

    - ``variance``: score → :func:`empriv.analysis.variance.group_std` grouped by (ε, method) — Fig. 2 with one
      cluster per ε and method;
    - ``seed_vs_configuration``: method → score → ε → Table 8's two standard deviations;
    - ``table``: one row per (ε, method) — configurations (all, kept), trainable parameters, mean and best utility,
      mean and std across configurations of the primary score, its mean seed std, the highest audited ε̂;
    - ``points``: every configuration (kept or not) with its utility and primary score, for the scatter plot;
    - ``retention``: method → ε → the rule's outcome.
    """
    import polars as pl

    from empriv.analysis.variance import group_std, seed_vs_configuration

    methods = method_order(table_methods(table))
    audit = [c for c in ("audit_eps_lb_95",) if c in table.columns]
    columns = [c for c in dict.fromkeys([*scores, utility, *audit]) if c in table.columns]
    configs_all = config_table(table, columns, by=["method"])
    kept_parts, retention = [], {}
    for m in methods:
        kept, info = retention_filter(configs_all.filter(pl.col("method") == m), base_utility, retention_fraction, utility)
        kept_parts.append(kept)
        retention[m] = info
    kept = pl.concat(kept_parts, how="diagonal_relaxed") if kept_parts else configs_all.clear()
    kept_groups = set(kept["group"].to_list())
    variance = {s: group_std(kept, s, ("epsilon", "method")) for s in [*scores, utility] if s in kept.columns}
    seed_vs = {m: {s: seed_vs_configuration(kept.filter(pl.col("method") == m), s) for s in [*scores, utility]
                   if s in kept.columns} for m in methods}
    rows = []
    for eps in sorted(configs_all["epsilon"].unique().to_list()):
        for m in methods:
            g_all = configs_all.filter((pl.col("epsilon") == eps) & (pl.col("method") == m))
            if g_all.height == 0:
                continue
            g = kept.filter((pl.col("epsilon") == eps) & (pl.col("method") == m))
            u = _values(g, utility)
            p = _values(g, primary) if primary else []
            seed_std = _values(g, f"{primary}__seed_std") if primary else []
            tp = _values(g_all, "trainable_parameters")
            eps_hat = _values(g_all, "audit_eps_lb_95")
            rows.append({"epsilon": epsilon_label(eps), "method": m, "n_configs": g_all.height, "n_kept": g.height,
                         "trainable_parameters": int(max(tp)) if tp else None,
                         "utility_mean": sum(u) / len(u) if u else None, "utility_best": min(u) if u else None,
                         "primary_mean": sum(p) / len(p) if p else None, "primary_std": _std(p),
                         "primary_n": len(p),
                         "primary_mean_seed_std": sum(seed_std) / len(seed_std) if seed_std else None,
                         "audit_eps_lb_95_max": max(eps_hat) if eps_hat else None})
    points = []
    for r in configs_all.iter_rows(named=True):
        points.append({"epsilon": epsilon_label(r["epsilon"]), "method": r["method"], "config": r["group"],
                       "utility": _num(r.get(utility)), "primary": _num(r.get(primary)) if primary else None,
                       "kept": r["group"] in kept_groups})
    return {"main": methods[0] if methods else None, "methods": methods, "primary_score": primary, "utility": utility,
            "retention": retention, "variance": variance, "seed_vs_configuration": seed_vs, "table": rows,
            "points": points}


def _num(v) -> float | None:
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v
