"""The research's analysis of a run table: primary score, variance, regression, heuristics, selection and risks
(:func:`compute_analysis`) and its terminal summary (its DVC-metrics form: :mod:`empriv.analysis.metrics`). The analyze
stage (:mod:`empriv.pipeline.analyze`) builds the table and writes metrics, plots and the report."""

from __future__ import annotations

import logging
import math


log = logging.getLogger("empriv.analyze")

ASSUMPTION_KEYS = ("config", "epsilon", "sampler", "accountant", "requested_accountant", "accountant_fallback_reason",
                   "delta", "noise_multiplier", "sample_rate", "epsilon_prv", "epsilon_rdp", "optimizer", "clip_norm",
                   "method", "unnoised_outputs", "empty_batches", "mean_batch_size", "n")
AUDIT_COLUMNS = ("audit_eps_lb_95", "audit_eps_lb_99", "audit_auc")


AUDIT_OUTCOMES = ("audit_eps_lb_95", "audit_eps_lb_99", "audit_auc", "audit_tpr_at_fpr_0.001", "audit_tpr_at_fpr_0.01",
                  "audit_dp_flat_precision")


def primary_score(configs, scores: list[str]) -> str | None:
    """The score the report's figures use: the first of ``scores`` whose configuration means differ at some finite ε
    (a score that is constant within every finite ε — VMR at 0 — cannot rank configurations). A score with no value
    at any finite ε (ACR over successes when no search succeeded at finite ε: null there, not 0) can never be
    primary. When none varies: the first score with a value at some finite ε; failing that (an ε = ∞-only table),
    the first score with any value; None without scores."""
    import polars as pl

    if not scores:
        return None
    finite = configs.filter(pl.col("epsilon").is_finite())

    def values(frame, s):
        return frame[s].cast(pl.Float64).fill_nan(None).drop_nulls()

    for s in scores:
        for _, g in finite.group_by("epsilon", maintain_order=True):
            col = values(g, s)
            if col.len() > 1 and float(col.max()) - float(col.min()) > 1e-12 * max(1.0, abs(float(col.max()))):
                return s
    for frame in (finite, configs):
        for s in scores:
            if values(frame, s).len():
                return s
    return scores[0]


def value_coverage(table, configs, scores: list[str], by: str = "epsilon") -> dict:
    """Per score and ε: how many runs and configurations have a value (null or NaN = none). A score without a value
    (ACR over successes where no search succeeded; ACR on the seeds it does not run for) is left out of that score's
    statistics — never counted as 0."""
    import polars as pl

    from empriv.analysis.table import epsilon_label

    out: dict = {}
    for s in scores:
        per = {}
        for key in sorted(configs[by].unique().to_list()):
            r, c = table.filter(pl.col(by) == key), configs.filter(pl.col(by) == key)
            per[epsilon_label(key) if by == "epsilon" else str(key)] = {
                "n_runs": r.height, "n_runs_with_value": int(r[s].cast(pl.Float64).fill_nan(None).drop_nulls().len()),
                "n_configs": c.height, "n_configs_with_value": int(c[s].cast(pl.Float64).fill_nan(None).drop_nulls().len())}
        out[s] = per
    return out


def compute_analysis(table, *, privacy_scores: list[str], utility: str = "test_nll", base_utility: float | None = None,
                     retention_fraction: float = 0.9, monte_carlo_trials: int = 5000, seed: int = 0,
                     group_by: tuple[str, ...] = ("epsilon",),
                     audit_outside_cube: list[str] | None = None,
                     bootstrap_replicates: int = 0, primary: str | None = None) -> tuple[dict, object]:
    """Every statistic of the report from the run table (pure computation). Returns (analysis, retained configurations).

    Scores in ``privacy_scores`` that are absent or have no value are skipped and named in ``notes``.

    For the primary score (:func:`primary_score`): ``table8`` (:func:`empriv.analysis.variance.table8`: per ε, std of
    the configuration means vs mean seed std and their ratio, over the kept configurations and under ``all`` over
    every one) and ``one_at_a_time`` (:func:`empriv.analysis.one_at_a_time.one_at_a_time`, Fig. 5 a–c); both ``{}``
    without a primary score. Table 2 is ``regression`` (every score; the report shows the primary's).

    A table with several adaptation methods (``method`` column): the per-configuration statistics (retention,
    regression, heuristics, selection, correlations) cover the main method's runs (full fine-tuning when present,
    :func:`empriv.analysis.table.main_method`); ``variance`` is per ε *and* method over every method, and
    ``methods`` holds the per-method comparison (:func:`empriv.analysis.methods.method_comparison`). With one method
    the analysis has no ``methods`` key. ``audit_spread``: ε̂ ranked and correlated across the audited
    configurations at each finite ε (:func:`empriv.analysis.audit_spread.audit_spread`); ``audit_outside_cube``
    names audit runs without a main-cube run (reported there).

    ``standard_errors`` (ε label → key → standard error): with ``bootstrap_replicates`` > 0 (the analyze stage:
    :data:`empriv.analysis.bootstrap.REPLICATES`), the nested bootstrap's standard errors of the primary score's
    derived statistics (:func:`empriv.analysis.bootstrap.analysis_standard_errors`), ``{}`` otherwise.
    """
    import polars as pl

    from empriv.analysis.audit_spread import EPS_HAT_COLUMNS, audit_spread
    from empriv.analysis.methods import method_comparison
    from empriv.analysis.table import main_method, table_methods

    from empriv.analysis.heuristics import heuristics_by_group
    from empriv.analysis.regression import regressions
    from empriv.analysis.selection import (pick_indices, point_label, select_configuration, selection_risks,
                                          threshold_sweep)
    from empriv.analysis.table import available, config_table, epsilon_label, require_columns, retention_filter
    from empriv.analysis.variance import group_std, seed_vs_configuration, spearman_correlations

    require_columns(table, [utility], "utility")
    notes = []
    methods = table_methods(table)
    every_method = table
    main = main_method(methods) if len(methods) > 1 else None
    if main is not None:
        table = table.filter(pl.col("method") == main)
        notes.append(f"adaptation methods {', '.join([main, *[m for m in methods if m != main]])}: regression, "
                     f"heuristics, selection and correlations cover the {main} runs; the variance (per ε and method) "
                     "and the 'Adaptation methods' section cover every method, each with its own retention rule")
    scores = [s for s in dict.fromkeys(privacy_scores) if available(table, s)]
    skipped = [s for s in dict.fromkeys(privacy_scores) if s not in scores]
    if skipped:
        notes.append(f"scores without values in this run table (skipped): {', '.join(skipped)}")
    if not scores:
        notes.append("no empirical privacy score has values: only utility is analysed")
    # audit outcomes only (ε̂, AUC, TPRs, DP-Flat precision): the audit's settings (δ, m, r …) are not measurements
    audit = [c for c in AUDIT_OUTCOMES if c in table.columns and available(table, c)]
    if not audit:
        notes.append("no audit metrics (records/audit/<unit>/<config>.json): correlations with audited ε̂ not computed")
    notes.append("model-distance summaries (research appendix C.2) are not computed: the runs record no model distances")

    columns = list(dict.fromkeys(scores + [utility] + audit))
    configs_all = config_table(table, columns, by=list(group_by))
    configs, retention = retention_filter(configs_all, base_utility, retention_fraction, utility)
    for e, r in retention.items():
        if not r["applied"]:
            notes.append(f"ε = {e}: retention rule not applied — {r['reason']}")
    kept_groups = set(configs["group"].to_list())
    runs = table.filter(pl.col("group").is_in(kept_groups))

    coverage = value_coverage(runs, configs, scores)
    for s, per in coverage.items():
        gaps = [f"ε = {e}: {c['n_configs_with_value']} of {c['n_configs']} configurations ({c['n_runs_with_value']} of "
                f"{c['n_runs']} runs)" for e, c in per.items() if c["n_configs_with_value"] < c["n_configs"]
                or c["n_runs_with_value"] < c["n_runs"]]
        if gaps:
            notes.append(f"{s} has values for {'; '.join(gaps)}: runs and configurations without one are left out of its "
                         "statistics (variance, regression, heuristics, selection), not counted as 0")
    acr_over_successes = [s for s in scores if s in ("acr_mean", "acr_max")]
    if acr_over_successes:
        notes.append(f"{' and '.join(acr_over_successes)} {'is' if len(acr_over_successes) == 1 else 'are'} over successful "
                     "ACR searches only, of the frequent secrets (those in ≤ score.acr.rare_frequency of the training "
                     "records are reported apart: acr_rare_*, 'ACR by secret frequency'): a run where no search found "
                     "a prompt has no value (a failed search is censored: only an upper bound is known), and "
                     "acr_success_rate is the fraction of searched secrets with a success")

    variance = {s: group_std(configs, s, group_by) for s in scores + [utility]}
    svc = {s: seed_vs_configuration(configs, s) for s in scores + [utility]}
    regression = regressions(runs, scores) if scores else {}
    heuristics = heuristics_by_group(configs, scores) if scores else {}

    selection: dict = {}
    for eps in sorted(configs["epsilon"].unique().to_list()):
        if math.isinf(eps):
            continue  # the non-private reference has no (ε, δ) pool to select from
        pool = configs.filter(pl.col("epsilon") == eps)
        label = epsilon_label(eps)
        selection[label] = {}
        for s in scores:
            p = pool.filter(pl.col(s).is_not_null() & ~pl.col(s).cast(pl.Float64).is_nan())
            if p.height == 0:
                selection[label][s] = {"reason": f"no configuration has a {s} value", "n_configs": pool.height,
                                       "n_configs_without_value": pool.height}
                continue
            # the pool is the configurations that have the score: Algorithm 1, the baselines and the oracle choose
            # among the same points (a configuration without a value cannot be judged)
            sel = select_configuration(p, utility)
            idx = pick_indices(p, utility)
            selection[label][s] = {
                "n_points": p.height, "n_configs_without_value": pool.height - p.height,
                "picks": {m: point_label(p.row(i, named=True)) for m, i in idx.items()},
                "steps": sel.steps,
                "sweep": threshold_sweep(p, s, utility),
                "risks": selection_risks(p, s, utility, trials=monte_carlo_trials, seed=seed),
            }
    correlations = spearman_correlations(configs, audit + scores + [utility])
    if primary is not None:  # analyze.primary_score pins it
        if primary not in scores:
            notes.append(f"primary score {primary} (analyze.primary_score) has no value in this run table: "
                         "no figure has a primary score")
            primary = None
    else:
        primary = primary_score(configs, scores)
        if primary is not None and primary != scores[0]:
            before = scores[: scores.index(primary)]
            finite_cfg = configs.filter(pl.col("epsilon").is_finite())
            empty = [s for s in before if finite_cfg[s].cast(pl.Float64).fill_nan(None).drop_nulls().len() == 0]
            flat = [s for s in before if s not in empty]
            why = []
            if empty:
                why.append(f"{', '.join(empty)} {'has' if len(empty) == 1 else 'have'} no value at any finite ε")
            if flat:
                why.append(f"{', '.join(flat)} {'takes' if len(flat) == 1 else 'take'} one value across the configurations "
                           "of every finite ε")
            notes.append(f"primary score {primary}: {'; '.join(why)} (nothing to rank or select on), so the figures use "
                         f"{primary}")

    spread_columns = [c for c in dict.fromkeys(scores + [utility] + [c for c in EPS_HAT_COLUMNS
                                                                      if c in every_method.columns])]
    spread = audit_spread(config_table(every_method, spread_columns, by=["method"]), scores=scores, utility=utility,
                          primary=primary, outside_cube=audit_outside_cube)
    if spread["outside_cube"]:
        notes.append(f"{len(spread['outside_cube'])} audit run(s) have no main-cube run of the same name (no scores to "
                     f"correlate ε̂ with): {', '.join(spread['outside_cube'][:5])}")
    method_section = None
    if main is not None:
        method_section = method_comparison(every_method, scores=scores, utility=utility, primary=primary,
                                           base_utility=base_utility, retention_fraction=retention_fraction)
        variance = method_section.pop("variance")

    # the research's Table 8 and Fig. 5 (a–c) for the primary score: Table 8 over the kept configurations (as every
    # statistic above) and over all of them; Fig. 5 over all of them, each point marked kept or not
    from empriv.analysis.one_at_a_time import one_at_a_time
    from empriv.analysis.variance import table8

    table8_primary = table8(configs, primary, configs_all=configs_all)
    fig5 = one_at_a_time(configs_all, primary, kept_groups=kept_groups)

    standard_errors = {}
    if bootstrap_replicates > 0:
        from empriv.analysis.bootstrap import analysis_standard_errors

        standard_errors = analysis_standard_errors(table, primary, utility, base_utility=base_utility,
                                                   retention_fraction=retention_fraction,
                                                   replicates=bootstrap_replicates)

    finite = [e for e in sorted(configs["epsilon"].unique().to_list()) if math.isfinite(e)]
    focus = epsilon_label(finite[-1]) if finite else (epsilon_label(configs["epsilon"].max()) if configs.height else "inf")
    analysis = {
        "n_runs": table.height, "n_configs": configs_all.height, "n_configs_kept": configs.height,
        "epsilons": [epsilon_label(e) for e in sorted(table["epsilon"].unique().to_list())],
        "privacy_scores": scores, "skipped_scores": skipped, "audit_columns": audit, "utility": utility,
        "primary_score": primary, "focus_epsilon": focus,
        "retention_fraction": retention_fraction, "retention": retention,
        "coverage": coverage, "variance": variance, "seed_vs_configuration": svc, "regression": regression, "heuristics": heuristics,
        "selection": selection, "correlations": correlations, "monte_carlo_trials": monte_carlo_trials, "seed": seed,
        "audit_spread": spread, "table8": table8_primary, "one_at_a_time": fig5, "notes": notes,
        "standard_errors": standard_errors, "bootstrap_replicates": bootstrap_replicates,
    }
    if method_section is not None:
        analysis["methods"] = method_section
        analysis["n_runs_all_methods"] = every_method.height
    return analysis, configs


def format_analysis(analysis: dict) -> str:
    """A few lines for the terminal: primary score's std, heuristic accuracies and risks per ε."""
    s = analysis["primary_score"]
    if not s:
        return "analysis: no empirical privacy score with values"
    lines = [f"analysis of {s} ({analysis['n_configs_kept']}/{analysis['n_configs']} configurations kept):"]
    for e, d in analysis["seed_vs_configuration"][s].items():
        h = analysis["heuristics"].get(e, {}).get(s, {})
        acc = ", ".join(f"{r} {_f(v['accuracy'])}" for r, v in h.items())
        ratio = f" (ratio {d['ratio']:.2f})" if d.get("ratio") is not None else ""
        line = (f"  ε={e}: std across configs {_f(d['hyperparameter'])}, across seeds {_f(d['randomness'])}{ratio}; "
                f"heuristics {acc}")
        sel = analysis["selection"].get(e, {}).get(s)
        if sel and sel.get("risks", {}).get("mean"):
            r = sel["risks"]["mean"]
            line += "; abs. risk " + ", ".join(f"{m} {_f(v['absolute_risk'])}" for m, v in r.items())
        lines.append(line)
    return "\n".join(lines)


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"
