"""Per-ε statistics across configurations: the research's empirical privacy variance.

Runs are first averaged over seeds within each configuration (ε, b, T, η); then, per ε, the mean
and standard deviation across configurations of every score, and — to tell configuration effects
from training noise — the mean within-configuration standard deviation across seeds.

A missing value (null or NaN) is left out, never read as 0: a configuration's seed mean is over the seeds
that have the score, a group's statistics over the configurations that have one, and every result says how
many had a value. ACR over successes (``acr_mean``, ``acr_max``) is null for a run where no search found a
prompt; ``acr_success_rate`` is defined for every run that searched.
"""

from __future__ import annotations

import math

from empriv.analysis.stats import sample_std as _std
from empriv.analysis.table import epsilon_label


def summarize(table, scores: list[str]) -> dict:
    """Per ε label: ``n_configs``, ``n_runs`` and, for every score, the mean, std across configurations, min, max and
    mean seed std of the configuration means (with how many configurations and runs have a value).

    Where ACR was searched, ``acr_searches`` pools the search counts of the **frequent** secrets (the run table's
    ``acr_n_searched`` / ``acr_n_success``, which since the frequency split cover the frequent secrets only; a table of
    runs without frequency information counts every secret as frequent, as before) and ``acr_rare_searches`` those of
    the rare ones (``acr_rare_n_*``): ``n_runs`` that searched, ``n_searched``, ``n_success``, ``success_rate``."""
    import polars as pl

    missing = [s for s in scores if s not in table.columns]
    if len(missing) == len(scores):
        raise ValueError(f"analyze.scores names no column of the run table ({missing}); available: {table.columns}")
    if missing:  # e.g. ACR switched off, or AIR on an e-mail corpus: say so, summarise the rest
        import logging

        logging.getLogger("empriv.analyze").warning("analyze.scores: no column %s in this cube's runs; skipped", missing)
        scores = [s for s in scores if s not in missing]
    def x(s):
        return pl.col(s).cast(pl.Float64).fill_nan(None)

    # ACR search counts, pooled per ε: the frequent secrets' (acr_n_*) and the rare ones' (acr_rare_n_*)
    pools = {name: prefix for name, prefix in (("acr_searches", "acr"), ("acr_rare_searches", "acr_rare"))
             if {f"{prefix}_n_searched", f"{prefix}_n_success"} <= set(table.columns)}
    per_config = table.group_by(["epsilon", "group"], maintain_order=True).agg(  # a fixed order: bit-identical sums
        *[x(s).mean().alias(s) for s in scores],
        *[x(s).std(ddof=1).alias(f"{s}__seed_std") for s in scores],
        *[x(s).is_not_null().sum().alias(f"{s}__n_runs") for s in scores],
        *[x(f"{prefix}_n_{c}").sum().alias(f"{prefix}_n_{c}__sum") for prefix in pools.values() for c in ("searched", "success")],
        *[x(f"{prefix}_n_searched").is_not_null().sum().alias(f"{prefix}__runs_searched") for prefix in pools.values()],
        pl.len().alias("n_seeds"),
    )
    out: dict = {}
    for eps in sorted(per_config["epsilon"].unique().to_list()):
        g = per_config.filter(pl.col("epsilon") == eps)
        entry: dict = {"n_configs": g.height, "n_runs": int(g["n_seeds"].sum())}
        for s in scores:
            col = g[s].drop_nulls()
            entry[s] = {
                "mean": float(col.mean()) if col.len() else None,
                "std_across_configs": (0.0 if col.min() == col.max() else float(col.std(ddof=1))) if col.len() > 1 else None,
                "min": float(col.min()) if col.len() else None,
                "max": float(col.max()) if col.len() else None,
                "mean_seed_std": _nan_none(g[f"{s}__seed_std"].drop_nulls().mean()),
                "n_configs_with_value": int(col.len()),
                "n_runs_with_value": int(g[f"{s}__n_runs"].sum()),
            }
        for name, prefix in pools.items():
            if int(g[f"{prefix}__runs_searched"].sum()):
                searched, success = int(g[f"{prefix}_n_searched__sum"].sum()), int(g[f"{prefix}_n_success__sum"].sum())
                # pooled over every searched secret of the group in every run at this ε (runs that did not search
                # one are not counted)
                entry[name] = {"n_runs": int(g[f"{prefix}__runs_searched"].sum()), "n_searched": searched,
                               "n_success": success, "success_rate": success / searched if searched else None}
        out[epsilon_label(eps)] = entry
    return out


def _nan_none(x):
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


SCORE_LABELS = {"acr_mean": "acr_mean over successes", "acr_max": "acr_max over successes"}


def format_summary(summary: dict, scores: list[str], acr_by_frequency: dict | None = None) -> str:
    """A readable table: one row per ε, mean ± std across configurations for each score.

    A cell that summarises fewer configurations than the ε has says so (``n=k/m``): the others have no value (ACR
    over successes where no search succeeded, or a score not computed for them) and are left out, not read as 0;
    a cell with no value at all reads "none". Where ACR ran, a line per ε gives its searches, the frequent and the rare
    secrets apart: from ``acr_by_frequency`` (:func:`empriv.analysis.acr_frequency.acr_by_frequency`: frequencies and
    ACR over successes too) when given, else the pooled counts of ``summary`` (``acr_searches``,
    ``acr_rare_searches``)."""
    head = ["eps", "configs"] + [SCORE_LABELS.get(s, s) for s in scores]
    lines = []
    rows = [head]
    for eps, entry in summary.items():
        row = [eps, str(entry["n_configs"])]
        for s in scores:
            v = entry[s]
            if v["mean"] is None:
                row.append("none (n=0)" if "n_configs_with_value" in v else "n/a")
                continue
            cell = f"{v['mean']:.3f}"
            if v["std_across_configs"] is not None:
                cell += f" ± {v['std_across_configs']:.3f}"
            if v.get("mean_seed_std") is not None:
                cell += f" [{v['mean_seed_std']:.3f}]"
            n = v.get("n_configs_with_value")
            if n is not None and n < entry["n_configs"]:
                cell += f" (n={n}/{entry['n_configs']})"
            row.append(cell)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("mean ± std across configurations at each ε (seeds averaged first) "
                 "[mean std across seeds within a configuration] (n=k/m: only k of the m configurations have a value)")
    if acr_by_frequency is not None and acr_by_frequency.get("secrets"):
        from empriv.analysis.acr_frequency import epsilon_lines

        lines += epsilon_lines(acr_by_frequency, list(summary))
    elif any(e.get("acr_searches") or e.get("acr_rare_searches") for e in summary.values()):
        split = any(e.get("acr_rare_searches") for e in summary.values())  # else: no rare secret searched (or an old table)
        lines += [_acr_counts_line(eps, e, split) for eps, e in summary.items()]
        lines.append("  k/m: searches that found a prompt" + (" (rare: ≤ score.acr.rare_frequency of the training records)"
                                                              if split else "")
                     + "; acr_mean/acr_max are over the successes only; a failed search has no value (only an upper bound);")
        lines.append("  'not searched': no run of that ε is in score.acr.epsilons / training_seeds")
    return "\n".join(lines)


def _acr_counts_line(eps: str, entry: dict, split: bool) -> str:
    """One ε's pooled ACR search counts (:func:`summarize`); ``split``: the frequent and the rare secrets apart."""
    def part(g: dict) -> str:
        return f"{g['n_success']}/{g['n_searched']} found ({g['n_runs']} runs)"

    frequent, rare = entry.get("acr_searches"), entry.get("acr_rare_searches")
    if not frequent and not rare:
        return f"ACR at ε = {eps}: not searched"
    if not split:
        return f"ACR at ε = {eps}: {part(frequent)}"
    return (f"ACR at ε = {eps}: frequent secrets {part(frequent) if frequent else 'not searched'}; "
            f"rare {part(rare) if rare else 'not searched'}")


def summary_record(table, scores: list[str], main_unit: str = "record") -> dict:
    """``records/scores_by_epsilon.json`` (what ``empriv summary`` prints): ``per_epsilon`` (:func:`summarize`) of the
    runs of the main privacy unit and main adaptation method, ``scores`` (those present), ``n_runs``; with several
    units, ``unit``, ``n_runs_all_units`` and ``by_unit`` (each unit, main method); with several methods,
    ``method``, ``n_runs_all_methods`` and ``by_method`` (each method, main unit). One unit and one method: exactly
    the keys it had before units and methods existed. The analyze stage adds ``table8`` (the analysis' Table 8 of
    its primary score, :func:`table8`), which :func:`format_summary_record` prints under the main table, and
    ``acr_by_frequency`` (:func:`empriv.analysis.acr_frequency.acr_by_frequency` of the main table's runs)."""
    import polars as pl

    from empriv.analysis.table import main_method, table_methods

    units = list(dict.fromkeys(table["unit"].to_list())) if "unit" in table.columns else []
    methods = table_methods(table)
    main_u = main_unit if main_unit in units else (units[0] if units else None)
    main_m = main_method(methods) if len(methods) > 1 else None
    unit_t = table.filter(pl.col("unit") == main_u) if len(units) > 1 else table
    main_t = unit_t.filter(pl.col("method") == main_m) if main_m is not None else unit_t
    present = [s for s in scores if s in table.columns] or list(scores)  # absent ones: summarize says so
    out = {"scores": present, "per_epsilon": summarize(main_t, list(scores)), "n_runs": main_t.height}
    if len(units) > 1:
        per_unit = table.filter(pl.col("method") == main_m) if main_m is not None else table
        out.update(unit=main_u, n_runs_all_units=table.height,
                   by_unit={u: summarize(per_unit.filter(pl.col("unit") == u), list(scores)) for u in units})
    if main_m is not None:
        order = [main_m, *[m for m in methods if m != main_m]]
        out.update(method=main_m, n_runs_all_methods=unit_t.height,
                   by_method={m: summarize(unit_t.filter(pl.col("method") == m), list(scores)) for m in order})
    return out


def format_summary_record(summary: dict) -> str:
    """The whole summary for the terminal: the main table (:func:`format_summary`, with the per-ε ACR lines by secret
    frequency when the record has ``acr_by_frequency``), Table 8's lines, the table of ACR by secret frequency
    (:func:`empriv.analysis.acr_frequency.format_secret_table`), then one table per other privacy unit and per other
    adaptation method, each under a heading."""
    from empriv.analysis.acr_frequency import format_secret_table

    scores = summary["scores"]
    by_frequency = summary.get("acr_by_frequency")
    parts = [format_summary(summary["per_epsilon"], scores, by_frequency)]
    if (summary.get("table8") or {}).get("per_epsilon"):
        parts[0] += "\n" + format_table8(summary["table8"])
    if by_frequency and by_frequency.get("secrets"):
        parts[0] += "\n\n" + format_secret_table(by_frequency)
    heads = []
    if summary.get("by_unit"):
        heads.append(f"unit {summary.get('unit')}")
    if summary.get("by_method"):
        heads.append(f"method {summary.get('method')}")
    if heads:
        parts[0] = f"[{', '.join(heads)}]\n" + parts[0]
    for kind in ("unit", "method"):
        for name, per in (summary.get(f"by_{kind}") or {}).items():
            if name == summary.get(kind):
                continue
            parts.append(f"[{kind} {name}]\n" + format_summary(per, scores))
    return "\n\n".join(parts)


def format_table8(table8: dict) -> str:
    """One line per ε of the research's Table 8 for ``table8["score"]`` (:func:`table8`): std of the configuration
    means vs mean std across seeds and their ratio, over the configurations kept by the retention rule, then over
    every configuration (the numbers of the table above) when ``all`` is there."""
    s = table8["score"]

    def part(d: dict, said: str | None = None) -> str:
        text = f"{_g(d['hyperparameter'])} vs {_g(d['randomness'])} "
        if d.get("ratio") is not None:
            return text + f"(ratio {d['ratio']:.2f})"
        return text + ("(ratio n/a)" if d.get("ratio_reason") == said else f"(ratio n/a: {d.get('ratio_reason')})")

    def seeds(d: dict) -> str:
        lo, hi = d.get("n_seeds_min"), d.get("n_seeds_max")
        return "no seed" if hi is None else f"{lo} seed{'s' if hi > 1 else ''}" if lo == hi else f"{lo}–{hi} seeds"

    lines = []
    for eps, d in table8["per_epsilon"].items():
        line = f"ε = {eps}: configuration vs seed std of {s}: {part(d)} over the {d['n_configs']} configuration(s) " \
               f"kept by the retention rule ({seeds(d)} each)"
        if d.get("all"):
            line += f"; all {d['all']['n_configs']} configurations: {part(d['all'], d.get('ratio_reason'))}"
        lines.append(line)
    return "\n".join(lines)


def _g(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


# ----------------------------------------------------------------------------- Fig. 2 and Table 8
def group_std(configs, score: str, by: list[str] | tuple[str, ...] = ("epsilon",)) -> list[dict]:
    """Per group (ε, and any other ``by`` columns present: base model, data variant, method …): the standard
    deviation (ddof = 1) of the configuration means of ``score`` — the label on top of each cluster of
    the research's Fig. 2 — with the values themselves. Configurations without a value (null/NaN) are left out
    and counted in ``n_configs_without_value``; std is None with fewer than two configurations with a value."""
    import polars as pl

    from empriv.analysis.table import require_columns

    by = [c for c in by if c in configs.columns]
    require_columns(configs, [score])
    out = []
    for key, g in configs.sort(by).group_by(by, maintain_order=True):
        vals = [float(v) for v in g[score].cast(pl.Float64).fill_nan(None).drop_nulls().to_list()]
        labels = {c: (epsilon_label(k) if c == "epsilon" else str(k)) for c, k in zip(by, key)}
        out.append({"group": labels, "n_configs": len(vals), "n_configs_without_value": g.height - len(vals),
                    "mean": sum(vals) / len(vals) if vals else None,
                    "std": _std(vals), "values": vals,
                    "configs": (g.filter(g[score].cast(pl.Float64).fill_nan(None).is_not_null())["group"].to_list()
                                if "group" in g.columns else [])})
    return out



def seed_vs_configuration(configs, score: str, by: str = "epsilon") -> dict:
    """The research's Table 8, per ε: ``randomness`` = mean over configurations of the seed standard deviation
    (configurations with one seed have none and are left out; None if no configuration has two seeds),
    ``hyperparameter`` = standard deviation of the configuration means; with the counts behind each (configurations
    without a value of ``score`` are left out: ``n_configs`` counts those with one, ``n_configs_without_value`` the rest).

    ``ratio`` = hyperparameter / randomness (the research found about 2: seeds move a score about half as much as
    hyperparameters do), None with the reason in ``ratio_reason`` when either is undefined or the seed std is 0;
    ``n_seeds_min`` / ``n_seeds_max``: the fewest and most seeds with a value in one configuration (from the
    ``<score>__n_seeds`` column of :func:`empriv.analysis.table.config_table`, else ``n_seeds``), ``n_runs`` their sum."""
    import polars as pl

    out = {}
    std_col = f"{score}__seed_std"
    n_col = f"{score}__n_seeds" if f"{score}__n_seeds" in configs.columns else "n_seeds"
    for key in sorted(configs[by].unique().to_list()):
        g = configs.filter(pl.col(by) == key)
        has = g.filter(pl.col(score).cast(pl.Float64).fill_nan(None).is_not_null())
        means = [float(v) for v in has[score].cast(pl.Float64).to_list()]
        seeds = [float(v) for v in g[std_col].cast(pl.Float64).fill_nan(None).drop_nulls().to_list()] if std_col in g.columns else []
        counts = [int(v) for v in has[n_col].to_list()] if n_col in has.columns else []
        randomness, hyperparameter = (sum(seeds) / len(seeds) if seeds else None), _std(means)
        ratio, reason = table8_ratio(hyperparameter, randomness, len(means), max(counts, default=0))
        out[epsilon_label(key) if by == "epsilon" else str(key)] = {
            "randomness": randomness, "hyperparameter": hyperparameter,
            "n_configs": len(means), "n_configs_with_seed_std": len(seeds), "n_configs_without_value": g.height - len(means),
            "ratio": ratio, "ratio_reason": reason,
            "n_seeds_min": min(counts) if counts else None, "n_seeds_max": max(counts) if counts else None,
            "n_runs": sum(counts)}
    return out


def table8_ratio(hyperparameter: float | None, randomness: float | None, n_configs: int,
                 max_seeds: int) -> tuple[float | None, str | None]:
    """Std across configurations over mean std across seeds, or (None, why not)."""
    if n_configs < 2:
        return None, f"{n_configs} configuration(s) with a value: no std across configurations"
    if randomness is None:
        return None, ("one seed per configuration: no std across seeds" if max_seeds < 2
                      else "no configuration has two seeds with a value: no std across seeds")
    if randomness == 0:
        if hyperparameter == 0:
            return None, "the score is constant (both standard deviations are 0)"
        return None, "the std across seeds is 0 (every configuration gives one value on all its seeds)"
    return hyperparameter / randomness, None


def table8(configs, score: str | None, *, configs_all=None) -> dict:
    """Table 8 of one score (the report's primary): per ε, :func:`seed_vs_configuration` of the configurations
    (those kept by the retention rule in the analysis) and, under ``all``, of ``configs_all`` (every configuration,
    before the rule) when given. ``{}`` without a score."""
    if not score:
        return {}
    kept = seed_vs_configuration(configs, score)
    every = seed_vs_configuration(configs_all, score) if configs_all is not None else {}
    per = {}
    for label in sorted(set(kept) | set(every), key=_label_order):
        entry = dict(kept.get(label) or _empty_table8())
        if configs_all is not None:
            entry["all"] = every.get(label) or _empty_table8()
        per[label] = entry
    return {"score": score, "per_epsilon": per}


def _empty_table8() -> dict:
    return {"randomness": None, "hyperparameter": None, "n_configs": 0, "n_configs_with_seed_std": 0,
            "n_configs_without_value": 0, "ratio": None, "ratio_reason": "no configuration kept at this ε",
            "n_seeds_min": None, "n_seeds_max": None, "n_runs": 0}


def _label_order(label: str) -> float:
    return math.inf if label == "inf" else float(label)


def jitter_points(configs, score: str, *, seed: int = 0, width: float = 0.15) -> list[dict]:
    """The points of the research's Fig. 2 for one score: one per configuration with a value (its seed mean), at
    x = index of its ε (ε sorted, ∞ last) plus a uniform jitter in [−width, width] drawn from a generator seeded with
    ``seed`` over the configurations in a fixed order (ε, b, T, η, group) — the same table gives the same picture.
    Each point carries its configuration, seed std and seed count and its ε's ``std`` across configurations."""
    import numpy as np
    import polars as pl

    cols = [c for c in ("epsilon", "batch_size", "steps", "learning_rate", "group") if c in configs.columns]
    t = configs.with_columns(pl.col(score).cast(pl.Float64).fill_nan(None).alias("__y")).filter(
        pl.col("__y").is_not_null()).sort(cols)
    eps = sorted(t["epsilon"].unique().to_list())
    stds = {e: _std([float(v) for v in t.filter(pl.col("epsilon") == e)["__y"].to_list()]) for e in eps}
    rng = np.random.default_rng(seed)
    jitter = rng.uniform(-width, width, size=t.height)
    std_col, n_col = f"{score}__seed_std", f"{score}__n_seeds"
    out = []
    for j, r in zip(jitter, t.iter_rows(named=True)):
        i = eps.index(r["epsilon"])
        out.append({"score": score, "epsilon": epsilon_label(r["epsilon"]), "config": r.get("group"),
                    "batch_size": r.get("batch_size"), "steps": r.get("steps"), "learning_rate": r.get("learning_rate"),
                    "value": float(r["__y"]), "seed_std": _nan_none(r.get(std_col)),
                    "n_seeds": r.get(n_col, r.get("n_seeds")), "x": i + float(j), "jitter": float(j),
                    "std": stds[r["epsilon"]]})
    return out


def spearman_correlations(configs, columns: list[str], by: str = "epsilon") -> dict:
    """Per ε, the Spearman rank correlation (and its p-value) of every pair of ``columns`` that exist and have
    values — audited ε̂, scores, utility — over configurations. None where fewer than 3 points or a constant."""
    import numpy as np
    import polars as pl
    from scipy.stats import spearmanr

    cols = [c for c in columns if c in configs.columns]
    out: dict = {}
    for key in sorted(configs[by].unique().to_list()):
        g = configs.filter(pl.col(by) == key)
        label = epsilon_label(key) if by == "epsilon" else str(key)
        pairs = {}
        for i, a in enumerate(cols):
            for b in cols[i + 1:]:
                t = g.select(pl.col(a).cast(pl.Float64).fill_nan(None), pl.col(b).cast(pl.Float64).fill_nan(None)).drop_nulls()
                x, y = t[a].to_numpy(), t[b].to_numpy()
                if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
                    pairs[f"{a}~{b}"] = {"rho": None, "p": None, "n": len(x)}
                    continue
                res = spearmanr(x, y)
                pairs[f"{a}~{b}"] = {"rho": float(res.statistic), "p": float(res.pvalue), "n": len(x)}
        out[label] = pairs
    return out
