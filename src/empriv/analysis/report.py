"""The self-contained HTML report of the analyze stage (the figures are made by :mod:`empriv.analysis.figures`).

The report embeds every image as base64, so ``reports/report.html`` is one file that opens anywhere.
It holds numbers, configuration names, the cube's parameters and what each run's guarantee
assumes — never secret text (the analysis reads only top-level numeric scalars of the score JSON).
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from empriv.analysis.formatting import format_value
from empriv.analysis.selection import METHOD_LABELS, METHODS


def _fmt_p(p) -> str:
    if p is None:
        return "n/a"
    return f"{p:.2e}" if p < 1e-3 else f"{p:.3f}"


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#222;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.2rem}h3{margin-bottom:.3rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.85rem}th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}figure{margin:1rem 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85rem;color:#555}.note{background:#fff8e1;border-left:4px solid #f0c000;padding:.4rem .8rem;font-size:.9rem}
code{background:#f4f4f4;padding:0 .2rem}details{margin:.5rem 0}.small{font-size:.8rem;color:#666}
"""


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _table(header: list[str], rows: list[list], left: int = 1) -> str:
    h = "".join(f'<th class="{"l" if i < left else ""}">{_esc(c)}</th>' for i, c in enumerate(header))
    body = []
    for r in rows:
        body.append("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_esc(format_value(c) if not isinstance(c, str) else c)}</td>'
                                     for i, c in enumerate(r)) + "</tr>")
    return f"<table><thead><tr>{h}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _img(path: Path, alt: str, caption: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{_esc(alt)}">'
            f"<figcaption>{_esc(caption)}</figcaption></figure>")


def _yaml_block(obj) -> str:
    import json

    return f"<pre>{_esc(json.dumps(obj, indent=2, default=str))}</pre>"


CAPTIONS = {
    "variance": "Fig. 2 analogue: each point is one configuration (b, T, η) averaged over seeds; the label on top of each "
                "cluster is the standard deviation across configurations.",
    "hyperparameters": "Fig. 5 analogue: one hyperparameter varies while the others are fixed (a–c), at fixed compute C = b·T and η (d), "
                       "at fixed updates U = C·η (e). Panels with no such group in the cube say so.",
    "jitter": "Fig. 2 analogue for the primary score: each point is one configuration kept by the retention rule "
              "(its seed mean), jittered sideways (seeded); the label is the std across configurations at that ε "
              "(Table 8's 'std across configurations', kept).",
    "one_at_a_time": "Fig. 5 (a–c) analogue: the primary score (seed mean, bars: seed std) while one hyperparameter "
                     "varies and the other two stay at the reference, one line per ε; hollow: dropped by the "
                     "retention rule.",
    "heuristics": "Fig. 7 analogue: accuracy of the pairwise heuristics (a pair is correct only if the predicted-better configuration "
                  "has a strictly lower score); dashed: random guess on the same pairs (½ per untied pair).",
    "selection": "Fig. 9/20 analogue: top, every configuration's utility and score with each method's pick on the whole pool; "
                 "bottom, the score each method picks from the subpool with utility ≤ u, for every threshold u, and the oracle's.",
    "risks": "Fig. 10 / appendix D.3 analogue: privacy risk of each method's pick relative to the oracle, averaged over utility "
             "thresholds, on the seed means and over Monte Carlo layouts (scores drawn from N(seed mean, seed std)).",
    "methods": "Every configuration (seed means) of every adaptation method: primary privacy score against utility, one "
               "panel per ε; hollow points were dropped by their method's retention rule.",
    "audit_spread": "Audited ε̂ (95 % lower bound) against the primary score of the main cube's configuration of the same "
                    "name, at each finite ε with at least three audited configurations; Spearman's ρ in the title.",
    "adaptation_audit": "AUC of the headline membership inference attack on the adaptation data, per adaptation method "
                        "and ε (means over runs), one panel per adaptation data set; dashed: chance (0.5).",
    "adaptation_pretraining": "AUC of the attack on the base model's pre-training data after the private adaptation "
                              "(lines) and on the base model itself (dashed).",
}


def _table8_section(t8: dict, figures: dict) -> list[str]:
    """Table 8 of the primary score (kept configurations and all of them) and its Fig. 2 jitter plot."""
    if not t8.get("per_epsilon"):
        return []
    s = t8["score"]
    out = [f"<h3 id=\"table8\">Table 8: configurations vs seeds ({_esc(s)})</h3>"
           "<p>Per ε: the standard deviation of the configuration means (seeds averaged first) against the mean "
           "standard deviation across the seeds of one configuration, and their ratio (the research found about 2: "
           "seeds move a score about half as much as hyperparameters). <i>kept</i>: the configurations the retention "
           "rule keeps (every statistic of this report); <i>all</i>: every configuration of the cube (the numbers of "
           "<code>empriv summary</code>). A ratio is n/a with its reason: one seed, fewer than two configurations, "
           "or a seed std of 0.</p>"]
    rows = []
    for e, d in t8["per_epsilon"].items():
        for kind, v in (("kept", d), ("all", d.get("all"))):
            if not v:
                continue
            lo, hi = v["n_seeds_min"], v["n_seeds_max"]
            rows.append([e, kind, v["hyperparameter"], v["randomness"], v["ratio"], v["n_configs"],
                         "n/a" if hi is None else str(lo) if lo == hi else f"{lo}–{hi}", v["ratio_reason"] or ""])
    out.append(_table(["ε", "configurations", "std across configurations", "mean std across seeds", "ratio",
                       "n configurations", "seeds per configuration", "note"], rows, left=2))
    if "jitter" in figures:
        out.append(_img(figures["jitter"], f"jitter plot of {s} per epsilon", CAPTIONS["jitter"]))
    return out


def _one_at_a_time_section(fig5: dict, figures: dict) -> list[str]:
    """Fig. 5 (a–c): the reference point, panels or why they are empty, the figure."""
    from empriv.analysis.one_at_a_time import AXIS_SYMBOLS

    if not fig5.get("panels"):
        return []
    ref = ", ".join(f"{AXIS_SYMBOLS[a]} = {format_value(v) if isinstance(v, float) else v}"
                    for a, v in fig5["reference"].items())
    out = [f"<h3 id=\"one-at-a-time\">One hyperparameter at a time ({_esc(fig5['score'])})</h3>"
           f"<p>Reference: {_esc(ref)} ({_esc(fig5['reference_rule'])}). Every configuration of the cube counts, "
           "before the retention rule.</p>"]
    gaps = []
    for p in fig5["panels"]:
        name = f"vary {AXIS_SYMBOLS[p['vary']]}"
        if p.get("reason"):
            gaps.append(f"{name}: {p['reason']}")
        gaps += [f"{name}, ε = {e}: {why}" for e, why in p.get("missing", {}).items()]
    if gaps:
        out.append("<ul class=\"small\">" + "".join(f"<li>{_esc(g)}</li>" for g in gaps) + "</ul>")
    if "one_at_a_time" in figures:
        out.append(_img(figures["one_at_a_time"], "score versus one hyperparameter at a time", CAPTIONS["one_at_a_time"]))
    return out


def _table2_section(regression: dict, score: str) -> list[str]:
    """Table 2 for ``score``: per model, a row per term and a column pair (coef with stars, p) per ε, then n and R²."""
    from empriv.analysis.regression import MODELS, TERM_NAMES, significance_stars

    labels = [e for e, per in regression.items() if score in per]
    if not labels:
        return []
    out = [f"<h3 id=\"table2\">Table 2: {_esc(score)} on log hyperparameters, per ε</h3>"
           "<p>Coefficient (stars: *** p &lt; 0.001, ** p &lt; 0.01, * p &lt; 0.05) and two-sided p-value per ε; "
           "a term constant among the kept configurations is dropped (—); a model with too few runs is not fitted "
           "(n/a, the note says why). The research (GPT-2-S on Enron, ACR at ε = 4): 0.13 (log b), 0.37 (log T), "
           "0.51 (log η), all p &lt; 10⁻⁴.</p>"]
    for model, covariates in MODELS.items():
        terms = [TERM_NAMES[c] for c in covariates]
        header = ["", *[f"{h} (ε = {e})" for e in labels for h in ("coef", "p")]]
        rows = []
        for term in terms:
            row = [term]
            for e in labels:
                fit = regression[e][score][model]
                t = fit["terms"].get(term) if fit["fitted"] else None
                row += ([f"{format_value(t['coef'])}{significance_stars(t['p'])}", _fmt_p(t["p"])] if t
                        else ["—" if fit["fitted"] else "n/a", ""])
            rows.append(row)
        rows.append(["n", *[c for e in labels for c in (regression[e][score][model].get("n"), "")]])
        rows.append(["R²", *[c for e in labels for c in (regression[e][score][model].get("r2"), "")]])
        notes = [f"ε = {e}: {regression[e][score][model]['reason']}" for e in labels
                 if not regression[e][score][model]["fitted"]]
        out.append(f"<p><b>({'a' if model == 'individual' else 'b'}) {model}</b>: {_esc(score)} ~ "
                   f"{' + '.join(terms)}</p>" + _table(header, rows))
        if notes:
            out.append(f"<p class=\"small\">{_esc('; '.join(notes))}</p>")
    return out


def _methods_section(m: dict, figures: dict) -> list[str]:
    primary, utility = m.get("primary_score"), m["utility"]
    out = [f"<h2>Adaptation methods</h2><p>Per ε and adaptation method ({_esc(', '.join(m['methods']))}): "
           f"configurations (all, and kept by the retention rule applied per ε and method), trainable parameters, "
           f"utility <code>{_esc(utility)}</code> (mean and best over the kept configurations, seeds averaged first) "
           f"and the primary score <code>{_esc(primary or 'none')}</code>: mean, std across the kept configurations "
           f"and mean std across seeds; the highest audited ε̂ where the audit ran. The per-configuration analysis "
           f"below (regression, heuristics, selection) covers the <b>{_esc(m['main'])}</b> runs.</p>"]
    rows = [[r["epsilon"], r["method"], f"{r['n_kept']}/{r['n_configs']}", r["trainable_parameters"], r["utility_mean"],
             r["utility_best"], r["primary_mean"], r["primary_std"], r["primary_mean_seed_std"],
             r["audit_eps_lb_95_max"]] for r in m["table"]]
    out.append(_table(["ε", "method", "configurations kept/all", "trainable parameters", f"mean {utility}",
                       f"best {utility}", f"mean {primary}", "std across configurations", "mean std across seeds",
                       "highest ε̂ (95 %)"], rows, left=2))
    rows = []
    for meth, per_score in m["seed_vs_configuration"].items():
        for s, per_eps in per_score.items():
            for e, d in per_eps.items():
                rows.append([s, e, meth, d["n_configs"], d["hyperparameter"], d["randomness"]])
    out.append("<details><summary>variance per ε and method, every score (Table 8)</summary>"
               + _table(["score", "ε", "method", "configurations with a value", "std across configurations",
                         "mean std across seeds"], rows, left=3) + "</details>")
    if "methods" in figures:
        out.append(_img(figures["methods"], "primary score versus utility per adaptation method", CAPTIONS["methods"]))
    return out


def _acr_frequency_section(result: dict) -> list[str]:
    """ACR per ε by secret frequency (:mod:`empriv.analysis.acr_frequency`): one row per searched secret."""
    from empriv.analysis.acr_frequency import percent, secret_table

    if not result.get("secrets"):
        return []
    header, rows = secret_table(result)
    return ["<h2 id=\"acr-by-frequency\">ACR by secret frequency</h2>"
            "<p>Secrets in at most <code>score.acr.rare_frequency</code> = "
            f"{_esc(percent(result['rare_frequency']))} of the training records are shown apart as <i>rare</i>: "
            "record-level ε bounds what one record can leak, not a string repeated in many records, so frequent "
            "secrets can be memorised under DP while rare ones stay protected. Per ε: <i>k/m</i> = runs whose search "
            "found a prompt / runs that searched the secret, then the ACR over those successes (a failed search has "
            "no value, only an upper bound); – = not searched at that ε; the <i>all</i> rows pool the searches of "
            "every secret of the group.</p>", _table(header, rows, left=2)]


def _audit_spread_section(spread: dict, figures: dict) -> list[str]:
    out = ["<h2>Audited ε̂ across configurations at equal ε</h2>"]
    if not spread.get("eligible"):
        out.append(f"<p>Not computed: {_esc(spread.get('reason') or 'no audit')}.</p>")
        if spread.get("outside_cube"):
            out.append(f"<p>Audit runs without a main-cube run: {_esc(', '.join(spread['outside_cube']))}.</p>")
        return out
    out.append("<p>At each finite ε (and method) with at least three audited configurations, the configurations are "
               "ranked by their audited lower bound ε̂ (rank 1 = highest; the audit trains its own models, joined with "
               "the main cube's configuration of the same name: scores and utility are the main cube's seed means; "
               "every audited configuration, before the retention rule). Spearman ρ with its two-sided p-value and the "
               "number of configurations n; a pair with n &lt; 3 or a constant column has no ρ and says why. The "
               "research found ε̂ barely correlated with memorisation (ρ = −0.13 with ACR at ε = 8) and strongly "
               "with utility (ρ = −0.71 with the test loss).</p>")
    for key, g in spread["groups"].items():
        title = f"ε = {g['epsilon']}" + (f", {g['method']}" if g.get("method") else "")
        if not g.get("eligible"):
            out.append(f"<p class=\"small\">{_esc(title)}: {_esc(g['reason'])}.</p>")
            continue
        out.append(f"<h3>{_esc(title)}: {g['n_audited']} audited configurations</h3>")
        rows = [[pair.replace("~", " ~ "), c["rho"], _fmt_p(c["p"]), c["n"], c["reason"] or ""]
                for pair, c in g["correlations"].items()]
        out.append(_table(["pair", "ρ", "p", "n", "note"], rows))
        cols = [c for c in g["ranking"][0] if c not in ("config", "rank")]
        out.append(_table(["rank", "configuration", *cols], [[r["rank"], r["config"], *[r.get(c) for c in cols]]
                                                              for r in g["ranking"]], left=2))
    if spread.get("outside_cube"):
        out.append(f"<p class=\"small\">Audit runs without a main-cube run (no scores): "
                   f"{_esc(', '.join(spread['outside_cube']))}.</p>")
    if "audit_spread" in figures:
        out.append(_img(figures["audit_spread"], "audited epsilon versus primary score", CAPTIONS["audit_spread"]))
    return out


def _adaptation_section(aa: dict, figures: dict) -> list[str]:
    from empriv.analysis.adaptation_audit import method_by_epsilon

    attack = aa["headline_attack"]
    out = [f"<h2>Auditing private adaptations</h2><p>{aa['n_runs']} runs: methods {_esc(', '.join(aa['methods']))} × ε "
           f"{_esc(', '.join(aa['epsilons']))} on the adaptation data sets {_esc(', '.join(aa['datasets']))} "
           "(iid: the pre-training distribution, unseen records; ood: another distribution). Membership inference on "
           f"the adaptation data (attacks: {_esc(', '.join(aa['attacks']) or 'none')}); the tables show "
           f"<b>{_esc(attack or 'no attack')}</b>, means over the runs of each cell (records/adaptation_audit.csv has "
           "every run and attack). An attack a run did not record is n/a, not 0.</p>"]
    if attack:
        h, rows = method_by_epsilon(aa, "auc")
        out.append(f"<h3>AUC ({_esc(attack)})</h3>" + _table(h, rows))
        h, rows = method_by_epsilon(aa, "tpr_at_1pct_fpr")
        out.append(f"<h3>TPR at 1 % FPR ({_esc(attack)})</h3>" + _table(h, rows))
    if aa["strongest"]:
        out.append("<h3>Strongest attack per cell</h3><p>The non-optimistic attack with the highest mean AUC.</p>")
        out.append(_table(["data", "method", "ε", "attack", "AUC", "TPR at 1 % FPR"],
                          [[r["dataset"], r["method"], r["epsilon"], r["attack"], r["auc"], r["tpr_at_1pct_fpr"]]
                           for r in aa["strongest"]], left=4))
    if aa["pretraining"]:
        out.append("<h3>Leakage of the pre-training data</h3><p>AUC of the attack on the base model's pre-training "
                   "data, on the base model (before) and on the adapted model (after); change = after − before "
                   "(negative: the adaptation hides the pre-training data).</p>")
        out.append(_table(["adapted on", "method", "ε", "runs", "AUC before", "AUC after", "change"],
                          [[r["dataset"], r["method"], r["epsilon"], r["n_runs"], r["auc_base"], r["auc_adapted"],
                            r["change"]] for r in aa["pretraining"]], left=3))
    out.append("<details><summary>utility and trainable parameters</summary>"
               + _table(["data", "method", "ε", "runs", "test NLL", "trainable parameters"],
                        [[r["dataset"], r["method"], r["epsilon"], r["n_runs"], r["test_nll"], r["trainable_parameters"]]
                         for r in aa["utility"]], left=3) + "</details>")
    out.append("<details><summary>every attack</summary>"
               + _table(["data", "method", "attack", "ε", "runs", "AUC", "AUC std over runs", "TPR at 1 % FPR",
                         "TPR at 0.1 % FPR"],
                        [[c["dataset"], c["method"], c["attack"], c["epsilon"], c["n_runs"], c["auc"], c["auc_std"],
                          c["tpr_at_1pct_fpr"], c["tpr_at_0.1pct_fpr"]] for c in aa["cells"]], left=4) + "</details>")
    for name in ("adaptation_audit", "adaptation_pretraining"):
        if name in figures:
            out.append(_img(figures[name], name.replace("_", " "), CAPTIONS[name]))
    return out


def render_html(analysis: dict, figures: dict[str, Path], *, cube: dict, params: dict, assumptions: list[dict],
                run_rows: tuple[list[str], list[list]], profile_images: list[Path] | None = None,
                units: dict | None = None) -> str:
    """The report as one HTML string (images inline). ``units`` (a cube with several privacy units): the
    record- vs user-level comparison table (``columns``, ``rows``), shown before the variance analysis, which
    covers the runs of one unit."""
    from empriv.analysis.heuristics import RULES
    from empriv.analysis.regression import significance_stars

    a = analysis
    primary, utility = a["primary_score"], a["utility"]
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>empriv report</title>"
             f"<style>{CSS}</style></head><body>",
             "<h1>empriv — empirical privacy variance report</h1>",
             f"<p>{a['n_runs']} runs, {a['n_configs']} configurations (b, T, η) × ε; ε values: "
             f"{_esc(', '.join(a['epsilons']))}. Scores: higher = more memorised (worse empirical privacy); "
             f"utility <code>{_esc(utility)}</code>: lower = better. Primary score: <code>{_esc(primary or 'none')}</code>.</p>"]
    if a.get("notes"):
        parts.append('<div class="note"><ul>' + "".join(f"<li>{_esc(n)}</li>" for n in a["notes"]) + "</ul></div>")

    # -- cube and retention
    parts.append("<h2>The cube</h2>")
    parts.append(_table(["parameter", "values"], [[k, ", ".join(format_value(v) if isinstance(v, float) else str(v) for v in vs)]
                                                  for k, vs in cube.items()]))
    parts.append("<details><summary>analysis parameters</summary>" + _yaml_block(params) + "</details>")
    ret = a["retention"]
    parts.append("<h3>Retention rule</h3><p>Configurations achieving at least "
                 f"{_esc(a['retention_fraction'])} of the utility gain from the base model to the best configuration are kept (per ε).</p>")
    parts.append(_table(["ε", "configurations", "kept", "applied", "base utility", "best utility", "threshold", "note"],
                        [[e, r["n_configs"], r["n_kept"], "yes" if r["applied"] else "no", r["base_utility"], r["best_utility"],
                          r["threshold"], r.get("reason") or ""] for e, r in ret.items()]))

    # -- privacy units side by side
    if units:
        parts.append("<h2>Record- vs user-level</h2><p>Per ε and privacy unit (docs/user-level.md): configurations, "
                     "utility (mean over configurations, seeds averaged first, and best) and the primary score. The "
                     "analysis below covers the runs of one unit only.</p>")
        parts.append(_table(units["columns"], units["rows"]))

    # -- adaptation methods side by side
    if a.get("methods"):
        parts += _methods_section(a["methods"], figures)

    # -- variance
    parts.append("<h2>Empirical privacy variance</h2>")
    rows = []
    for s in a["privacy_scores"] + [utility]:
        for e, d in a["seed_vs_configuration"].get(s, {}).items():
            rows.append([s, e, d["n_configs"], d.get("n_configs_without_value", 0), d["hyperparameter"], d["randomness"],
                         d["n_configs_with_seed_std"]])
    parts.append("<p>Standard deviations across configurations (seed means; the research's Fig. 2 labels) and across seeds "
                 "within a configuration (mean over configurations; Table 8). n/a: fewer than two configurations, or no "
                 "configuration with two seeds. Configurations without a value of a score (e.g. ACR over successes where no "
                 "search found a prompt: a censored result, not 0) are left out of every statistic of that score and "
                 "counted here.</p>")
    parts.append(_table(["score", "ε", "configurations with a value", "without a value", "std across configurations",
                         "mean std across seeds", "configurations with ≥ 2 seeds"], rows, left=2))
    if "variance" in figures:
        parts.append(_img(figures["variance"], "jitter plot of scores per epsilon", CAPTIONS["variance"]))
    parts += _table8_section(a.get("table8") or {}, figures)
    parts += _one_at_a_time_section(a.get("one_at_a_time") or {}, figures)
    if "hyperparameters" in figures:
        parts.append(_img(figures["hyperparameters"], "score and utility versus hyperparameters", CAPTIONS["hyperparameters"]))
    parts += _acr_frequency_section(a.get("acr_by_frequency") or {})

    # -- regression
    parts.append("<h2>Regression on hyperparameters (log space)</h2>")
    parts.append("<p>OLS as R's <code>lm()</code> reports it; every run (seed) is an observation. "
                 "individual: y ~ log b + log T + log η; composite: y ~ log C + log η. "
                 "*** p &lt; 0.001, ** p &lt; 0.01, * p &lt; 0.05.</p>")
    rows = []
    for e, per in a["regression"].items():
        for s, models in per.items():
            for m, fit in models.items():
                if not fit["fitted"]:
                    rows.append([s, e, m, "—", "", "", "", "", None, fit.get("n"), fit["reason"]])
                    continue
                for term, t in fit["terms"].items():
                    if term == "intercept":
                        continue
                    rows.append([s, e, m, term, f"{format_value(t['coef'])}{significance_stars(t['p'])}", t["se"], t["t"],
                                 _fmt_p(t["p"]), fit["r2"], fit["n"],
                                 ("dropped (constant): " + ", ".join(fit["dropped"])) if fit["dropped"] else ""])
    if primary:
        parts += _table2_section(a["regression"], primary)
    parts.append("<details><summary>every score and model: coefficients, SE, t, p</summary>"
                 + _table(["score", "ε", "model", "term", "coef", "SE", "t", "p", "R²", "n", "note"], rows, left=4)
                 + "</details>")

    # -- heuristics
    parts.append("<h2>Selection heuristics</h2>")
    rows = []
    for e, per in a["heuristics"].items():
        for s, rules in per.items():
            rows.append([s, e] + [f"{format_value(rules[r]['accuracy'])} ({rules[r]['n_pairs']} pairs, {rules[r]['n_ties']} ties)"
                                  for r in RULES] + [format_value(rules["individual"]["random_baseline"])])
    parts.append(_table(["score", "ε", *RULES, "random (individual pairs)"], rows, left=2))
    if "heuristics" in figures:
        parts.append(_img(figures["heuristics"], "heuristic accuracy", CAPTIONS["heuristics"]))

    # -- selection
    parts.append("<h2>Hyperparameter selection (Algorithm 1)</h2>")
    parts.append(f"<p>Per finite ε (ε = inf is the non-private reference and has no (ε, δ) pool). Monte Carlo: "
                 f"{a['monte_carlo_trials']} trials, seed {a['seed']}. Relative risk is defined only where the oracle's score is &gt; 0.</p>")
    rows = []
    for e, per in a["selection"].items():
        for s, d in per.items():
            if d.get("reason"):
                rows.append([s, e, d["reason"], "", "", "", "", "", 0])
                continue
            picks = d["picks"]
            for m in METHODS:
                mean, mc = d["risks"]["mean"][m], (d["risks"].get("monte_carlo") or {}).get(m, {})
                rows.append([s, e, METHOD_LABELS[m], picks[m], mean["relative_risk"], mean["absolute_risk"],
                             mc.get("relative_risk"), mc.get("absolute_risk"),
                             f"{d['n_points']} ({d['n_configs_without_value']} without a value left out)"
                             if d.get("n_configs_without_value") else d.get("n_points")])
    parts.append(_table(["score", "ε", "method", "pick (whole pool)", "relative risk (means)", "absolute risk (means)",
                         "relative risk (MC)", "absolute risk (MC)", "pool"], rows, left=4))
    if primary:
        for e, per in a["selection"].items():
            d = per.get(primary)
            if not d or not d.get("steps") and d.get("reason"):
                continue
            parts.append(f"<details><summary>Algorithm 1 at ε = {_esc(e)} ({_esc(primary)} pool): picks "
                         f"{_esc(d['picks']['algorithm1'])}</summary><ul>"
                         + "".join(f"<li><b>{_esc(st['step'])}</b> [{_esc(st['group'])}]: discarded {_esc(', '.join(st['discarded']))} — {_esc(st['reason'])}</li>"
                                   for st in d["steps"]) + "</ul></details>")
    for name in ("selection", "risks"):
        if name in figures:
            parts.append(_img(figures[name], name, CAPTIONS[name]))

    # -- correlations
    parts.append("<h2>Rank correlations</h2>")
    rows = [[pair.replace("~", " ~ "), e, d["rho"], _fmt_p(d["p"]), d["n"]]
            for e, per in a["correlations"].items() for pair, d in per.items()]
    if rows:
        parts.append("<p>Spearman rank correlation over configurations (seed means) at each ε: audited ε̂ (when the audit "
                     "ran), the scores and utility.</p>" + _table(["pair", "ε", "ρ", "p", "n"], rows, left=2))
    else:
        parts.append("<p>No pair of columns to correlate.</p>")

    # -- audited ε̂ across configurations at one ε
    if a.get("audit_spread") is not None and (a["audit_spread"].get("eligible") or a["audit_spread"].get("epsilon_columns")):
        parts += _audit_spread_section(a["audit_spread"], figures)

    # -- the adaptation-audit study
    if a.get("adaptation_audit"):
        parts += _adaptation_section(a["adaptation_audit"], figures)

    # -- privacy profiles
    if profile_images:
        parts.append("<h2>Privacy profiles</h2><p>ε(δ) of every configuration, calibrated to the same (ε, δ) "
                     "(the profiles stage).</p>")
        for p in profile_images:
            parts.append(_img(p, f"privacy profiles {p.stem}", f"privacy profiles, {p.stem}"))

    # -- assumptions
    parts.append("<h2>What each run's guarantee assumes</h2>")
    if assumptions:
        keys = [k for k in ("sampler", "accountant", "requested_accountant", "accountant_fallback_reason", "delta",
                            "optimizer", "clip_norm", "method", "unnoised_outputs") if any(k in r for r in assumptions)]
        distinct = []
        for k in keys:
            vals = sorted({str(r.get(k)) for r in assumptions})
            distinct.append([k, "; ".join(vals)])
        parts.append(_table(["recorded", "values across runs"], distinct))
        cols = ["config", "epsilon", "noise_multiplier", "sample_rate", "delta", "epsilon_prv", "epsilon_rdp", "sampler",
                "accountant", "empty_batches", "mean_batch_size"]
        cols = [c for c in cols if any(c in r for r in assumptions)]
        parts.append("<details><summary>per run</summary>"
                     + _table(cols, [[r.get(c) for c in cols] for r in assumptions]) + "</details>")
    else:
        parts.append("<p>No train metrics found.</p>")

    header, body = run_rows
    parts.append("<h2>Every run</h2><details><summary>run table (records/runs.csv)</summary>"
                 + _table(header, body) + "</details>")
    parts.append('<p class="small">Generated by the analyze stage of empriv. The report holds no secret text: '
                 "only configuration names and numbers.</p></body></html>")
    return "\n".join(parts)


def write_report(path: str | Path, text: str) -> Path:
    from empriv.io import atomic_path

    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
