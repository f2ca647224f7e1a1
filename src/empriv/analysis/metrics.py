"""The analyze stage's DVC metrics: three compact, numbers-only files made to be compared.

``dvc metrics diff`` between two commits goes into a pull-request comment and ``dvc exp show`` is read as a results
table, so these files hold headline numbers only; everything else the analysis computes stays in plain stage
outputs (``records/``). Conventions shared by the three files:

- an ε group is keyed ``eps<ε>`` (``eps8``, ``eps0.5``) and the non-private reference ``epsinf``; inside a finite
  group ``epsilon`` is the number, the ∞ group has no ``epsilon`` key (never the string "inf" in a number column);
- a statistic with nothing to summarise (a score without a value at that ε, e.g. ACR over successes when no search
  succeeded) is ``null``, never 0; ``n`` says how many configuration means it is over;
- "worst" is the highest configuration mean: the most memorising for a privacy score, the least useful for the
  utility (test NLL, lower is better).
"""

from __future__ import annotations

import math

from empriv.analysis.stats import sample_std as _std

RISK_METHODS = ("algorithm1", "best_utility")


def epsilon_key(eps: float) -> str:
    """``eps8``, ``eps0.5``, ``epsinf``: the key of an ε group in every metrics file."""
    return "epsinf" if math.isinf(float(eps)) else f"eps{float(eps):g}"


def _values(frame, column: str) -> list[float]:
    import polars as pl

    if column not in frame.columns:
        return []
    return [float(v) for v in frame[column].cast(pl.Float64).fill_nan(None).drop_nulls().to_list()]



def _stats(vals: list[float], seed_stds: list[float] | None = None, seed_counts: list[int] | None = None) -> dict:
    """mean / std / worst over the configuration means ``vals``, ``n`` of them, and the mean's uncertainty
    (Table 8's two sources kept apart): ``se`` = std / √n over configurations, ``se_seed`` = √(mean of s_i²/k_i
    over the configurations with two or more seeds / n), the seed noise of the mean (s_i the seed std of
    configuration i, k_i its seeds; null when no configuration has two seeds), and ``n_runs`` = Σ k_i."""
    n, std = len(vals), _std(vals)
    out = {"mean": sum(vals) / n if vals else None, "std": std, "worst": max(vals) if vals else None, "n": n}
    out["se"] = None if std is None else (0.0 if std == 0 else std / math.sqrt(n))
    terms = [s * s / k for s, k in zip(seed_stds or [], seed_counts or []) if s is not None and k and k >= 2]
    out["se_seed"] = None if not terms or not n else (
        0.0 if max(terms) == 0 else math.sqrt(sum(terms) / len(terms) / n))
    out["n_runs"] = int(sum(k for k in (seed_counts or []) if k)) if seed_counts is not None else None
    return out


def _score_stats(configs, column: str) -> dict:
    """:func:`_stats` of one column of a :func:`empriv.analysis.table.config_table` (configurations with a value)."""
    import polars as pl

    if column not in configs.columns:
        return _stats([])
    has = configs.filter(pl.col(column).cast(pl.Float64).fill_nan(None).is_not_null())
    std_col, n_col = f"{column}__seed_std", f"{column}__n_seeds"
    stds = ([None if v is None or math.isnan(v) else float(v) for v in has[std_col].cast(pl.Float64).to_list()]
            if std_col in has.columns else [None] * has.height)
    counts = [int(v) for v in has[n_col].to_list()] if n_col in has.columns else [1] * has.height
    return _stats([float(v) for v in has[column].cast(pl.Float64).to_list()], stds, counts)


def summary_metrics_by_unit(table, scores: list[str], utility: str, base_utility: float | None,
                            main_unit: str = "record") -> dict:
    """:func:`summary_metrics` of the runs of the main privacy unit and the main adaptation method (keys ``eps8``…,
    as before units and methods existed), plus every other (unit, method) pair of the table under
    ``eps8-<unit>`` (another privacy unit, main method), ``eps8-<method>`` (main unit, another method) or
    ``eps8-<unit>-<method>``. The main method is full fine-tuning when present
    (:func:`empriv.analysis.table.main_method`). A table with one unit and one method gives exactly
    :func:`summary_metrics` (no new keys)."""
    import polars as pl

    from empriv.analysis.table import main_method, table_methods

    units = list(dict.fromkeys(table["unit"].to_list())) if "unit" in table.columns else []
    methods = table_methods(table)
    if len(units) <= 1 and len(methods) <= 1:
        return summary_metrics(table, scores, utility, base_utility)
    main_u = main_unit if main_unit in units else (units[0] if units else None)
    main_m = main_method(methods) if methods else None

    def part(u, m):
        t = table
        if u is not None:
            t = t.filter(pl.col("unit") == u)
        if m is not None:
            t = t.filter(pl.col("method") == m)
        return t

    out = summary_metrics(part(main_u, main_m), scores, utility, base_utility)
    out["n_runs"], out["n_configs"] = table.height, table.select(["group", "epsilon"]).unique().height
    for u in units or [None]:
        for m in methods or [None]:
            if u == main_u and m == main_m:
                continue
            sub = part(u, m)
            if sub.height == 0:
                continue
            suffix = "-".join(x for x in (u if u != main_u else None, m if m != main_m else None) if x)
            for key, entry in summary_metrics(sub, scores, utility, None).items():
                if key.startswith("eps"):
                    out[f"{key}-{suffix}"] = entry
    return out


def summary_metrics(table, scores: list[str], utility: str, base_utility: float | None) -> dict:
    """``metrics/summary.json``: per ε group, the configuration count and, for every score of ``scores`` present in the
    run table and for ``utility``, mean / std / worst over configuration means (seeds averaged first) with the mean's
    standard errors over configurations (``se``, ``n``) and over seeds (``se_seed``, ``n_runs``: :func:`_stats`);
    exact values (:func:`empriv.analysis.precision.round_metrics` writes them rounded); the pooled ACR
    search counts where searches ran, frequent and rare secrets apart (``acr_searched`` / ``acr_success``: the
    frequent secrets, every secret of runs without frequency information; ``acr_rare_searched`` /
    ``acr_rare_success``: the secrets in ≤ ``score.acr.rare_frequency`` of the training records, only where one was
    searched); the audit's ε̂ lower bound (highest over the audited configurations)."""
    import polars as pl

    from empriv.analysis.table import config_table

    present = [s for s in dict.fromkeys([*scores, utility]) if s in table.columns]
    audit = [c for c in ("audit_eps_lb_95",) if c in table.columns]
    configs = config_table(table, present + audit)
    out: dict = {"n_runs": table.height, "n_configs": configs.height}
    if base_utility is not None and math.isfinite(float(base_utility)):
        out[f"base_{utility}"] = float(base_utility)
    for eps in sorted(configs["epsilon"].unique().to_list()):
        g = configs.filter(pl.col("epsilon") == eps)
        runs = table.filter(pl.col("epsilon") == eps)
        entry: dict = {} if math.isinf(eps) else {"epsilon": float(eps)}
        entry.update({"n_configs": g.height, "n_runs": runs.height})
        for s in present:
            entry[s] = _score_stats(g, s)
        # pooled ACR search counts: the frequent secrets' (acr_searched, acr_success) and the rare ones'
        for prefix in ("acr", "acr_rare"):
            searched = _values(runs, f"{prefix}_n_searched")
            if searched:
                entry[f"{prefix}_searched"] = int(sum(searched))
                entry[f"{prefix}_success"] = int(sum(_values(runs, f"{prefix}_n_success")))
        for c in audit:
            vals = _values(g, c)
            if vals:
                entry[c] = max(vals)
        out[epsilon_key(eps)] = entry
    return out


def config_metrics(table, primary: str | None, utility: str) -> dict:
    """``metrics/configs.json``: one entry per configuration (seeds averaged), keyed by its name without the seed
    (``eps8-b64-T16-lr0.005``): the primary privacy score and the utility, each with its standard error over the
    seeds (``<score>_se``: :func:`seed_standard_errors`), and, for audited configurations, the audit's ε̂ lower
    bound — a flat results table, one row per configuration (seed counts are in records/runs.csv: a diff row per
    configuration that never changes would only lengthen `dvc metrics diff`)."""
    from empriv.analysis.table import config_table

    columns = [c for c in dict.fromkeys([primary, utility, "audit_eps_lb_95"]) if c and c in table.columns]
    configs = config_table(table, columns)
    errors = {c: seed_standard_errors(configs, c) for c in columns if not c.startswith("audit_")}
    out: dict = {}
    for i, row in enumerate(configs.iter_rows(named=True)):
        entry = {}
        for c in columns:
            v = row[c]
            if c.startswith("audit_") and v is None:
                continue  # not audited: no key (the audit cube is small), rather than a column of nulls
            entry[c] = None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
            if c in errors:
                entry[f"{c}_se"] = None if entry[c] is None else errors[c][i]
        out[row["group"]] = entry
    return out


OWN_SEED_STD_FROM = 5  # a configuration with this many seeds or more gets s/√k from its own seeds (issue 42)


def seed_standard_errors(configs, column: str) -> list[float | None]:
    """Per row of a :func:`empriv.analysis.table.config_table`: the standard error of its seed mean of ``column``.
    The seed standard deviation behind it is the configuration's own, s, when it has k ≥ :data:`OWN_SEED_STD_FROM`
    seeds with a value; with fewer it is the pooled within-configuration seed standard deviation of ``column`` at its
    ε, s_p = √(Σ (k_j − 1) s_j² / Σ (k_j − 1)) over the configurations of that ε with two or more seeds. Either way
    the standard error is s/√k. Why pooled below five: s from two seeds has one degree of freedom — a re-seeding
    that draws two close values makes it tiny and calls the configuration's next value many σ away (15.8σ for a
    0.043 move of a test NLL in the default's re-seeding); s_p has the ε group's Σ (k_j − 1) degrees of freedom.
    Null when no configuration at that ε has two seeds (nothing in the cube says how much a seed moves it) or the
    row has no value."""
    import polars as pl

    std_col, n_col = f"{column}__seed_std", f"{column}__n_seeds"
    rows = configs.select(pl.col("epsilon"), pl.col(std_col).cast(pl.Float64).fill_nan(None).alias("s"),
                          pl.col(n_col).alias("k")).iter_rows()
    rows = list(rows)
    pooled: dict[float, list[float]] = {}
    for eps, s, k in rows:
        if s is not None and k is not None and k >= 2:
            acc = pooled.setdefault(eps, [0.0, 0.0])
            acc[0] += (k - 1) * s * s
            acc[1] += k - 1
    out: list[float | None] = []
    for eps, s, k in rows:
        if not k:
            out.append(None)
        elif k >= OWN_SEED_STD_FROM and s is not None:
            out.append(s / math.sqrt(k))
        elif eps in pooled and pooled[eps][1] > 0:
            out.append(math.sqrt(pooled[eps][0] / pooled[eps][1]) / math.sqrt(k))
        else:
            out.append(None)
    return out


def analysis_metrics(analysis: dict) -> dict:
    """``metrics/analysis.json``: the research's findings for the primary score, per ε group — standard deviation of
    the configuration means against the mean seed standard deviation and their ratio (Table 8: ``std_configs``,
    ``std_seeds``, ``config_seed_ratio`` over the configurations kept by the retention rule, ``config_seed_ratio_all``
    over every configuration, ``n_configs`` behind them; a ratio is null where undefined — one seed, one
    configuration, a seed std of 0 — and records/analysis.json → ``table8`` says why), the regression's R² and
    coefficients (individual hyperparameters, log scale) with their standard errors (``coef_<term>_se``; the 95 %
    confidence interval is coef ± 1.96 se), the heuristics' accuracies and the absolute selection risk
    of Algorithm 1 and of the best-utility baseline — keyed by the score's name — each derived statistic with its
    standard error ``<key>_se`` when the analysis ran its bootstrap (:func:`_add_standard_errors`). The whole
    analysis (every score, p-values, sweeps, correlations) is ``records/analysis.json``."""
    s = analysis.get("primary_score")
    out: dict = {"n_configs": analysis["n_configs"], "n_configs_kept": analysis["n_configs_kept"]}
    if not s:
        return out
    per: dict = {}
    for label, d in analysis["seed_vs_configuration"].get(s, {}).items():
        per.setdefault(label, {}).update({"std_configs": d["hyperparameter"], "std_seeds": d["randomness"],
                                          "config_seed_ratio": d.get("ratio"), "n_configs": d.get("n_configs")})
    for label, d in ((analysis.get("table8") or {}).get("per_epsilon") or {}).items():
        if d.get("all"):
            per.setdefault(label, {})["config_seed_ratio_all"] = d["all"].get("ratio")
    for label, by_score in analysis["regression"].items():
        fit = by_score.get(s, {}).get("individual")
        if fit:
            e = per.setdefault(label, {})
            e["r2"] = fit.get("r2")
            e["r2_se"] = fit.get("r2_se")  # empriv diff's uncertainty for r2 (analysis.regression.r2_standard_error)
            for term, t in fit.get("terms", {}).items():
                if term != "intercept":
                    e[f"coef_{term}"] = t["coef"]
                    e[f"coef_{term}_se"] = t.get("se")  # the 95 % CI is coef ± 1.96 se (p: records/analysis.json)
    for label, by_score in analysis["heuristics"].items():
        rules = by_score.get(s)
        if rules:
            per.setdefault(label, {}).update({f"heuristic_{r}": d["accuracy"] for r, d in rules.items()})
    for label, by_score in analysis["selection"].items():
        risks = ((by_score.get(s) or {}).get("risks") or {}).get("mean") or {}
        for m in RISK_METHODS:
            if m in risks:
                per.setdefault(label, {})[f"risk_{m}"] = risks[m]["absolute_risk"]
    _add_standard_errors(per, analysis, s)
    out[s] = {_key(label): v for label, v in per.items()}
    # other adaptation methods (the table held several): Table 8's two standard deviations per ε, keyed eps8-<method>
    methods = analysis.get("methods") or {}
    for m in methods.get("methods", [])[1:]:
        for label, d in methods.get("seed_vs_configuration", {}).get(m, {}).get(s, {}).items():
            out[s][f"{_key(label)}-{m}"] = {"std_configs": d["hyperparameter"], "std_seeds": d["randomness"]}
    spread = audit_spread_metrics(analysis.get("audit_spread"), s, analysis.get("utility"))
    if spread:
        out["audit_spread"] = spread
    return out


def _add_standard_errors(per: dict, analysis: dict, score: str) -> None:
    """``<key>_se`` beside each derived statistic of ``per`` (ε label → metrics): the nested bootstrap's
    (``analysis["standard_errors"]``, :mod:`empriv.analysis.bootstrap`); a heuristic's accuracy at least the binomial
    standard error of its n_correct of n_pairs (a bootstrap in which every resample agrees says 0); the kept
    configurations ``n_configs`` the binomial standard error of that count of the ε group's configurations."""
    from empriv.analysis.precision import binomial_standard_error

    boot = analysis.get("standard_errors") or {}
    for label, e in per.items():
        errors = boot.get(label) or {}
        for key in [k for k in e if not k.endswith("_se")]:
            if key in errors and e.get(key) is not None:
                e[f"{key}_se"] = errors[key]
            if key.startswith("heuristic_") and e.get(key) is not None:
                h = ((analysis["heuristics"].get(label) or {}).get(score) or {}).get(key[len("heuristic_"):]) or {}
                floor = binomial_standard_error(h.get("n_correct"), h.get("n_pairs"))
                if floor is not None:
                    e[f"{key}_se"] = max(e.get(f"{key}_se") or 0.0, floor / h["n_pairs"])
        total = (analysis.get("retention") or {}).get(label, {}).get("n_configs")
        if boot and e.get("n_configs") is not None and total:
            e["n_configs_se"] = binomial_standard_error(e["n_configs"], total)


def audit_spread_metrics(spread: dict | None, primary: str, utility: str | None) -> dict:
    """The audit spread's headline (only groups with ≥ 3 audited configurations): per finite ε (and method) the number
    of audited configurations ``n`` and Spearman's ρ with its p-value of the first ε̂ column (95 %) against the primary
    score (``rho_score``, ``p_score``) and the utility (``rho_utility``, ``p_utility``); null where undefined (n < 3
    with both values, or a constant column — records/analysis.json says which)."""
    if not spread or not spread.get("eligible"):
        return {}
    lead = spread["epsilon_columns"][0]
    out = {}
    for key, g in spread["groups"].items():
        if not g.get("eligible"):
            continue
        corr = g["correlations"]
        entry: dict = {"n": g["n_audited"]}
        for name, col in (("score", primary), ("utility", utility)):
            c = corr.get(f"{lead}~{col}") or {}
            entry[f"rho_{name}"], entry[f"p_{name}"] = c.get("rho"), c.get("p")
        out[_key(key)] = entry
    return out


def _key(label: str) -> str:
    return "epsinf" if label == "inf" else f"eps{label}"
