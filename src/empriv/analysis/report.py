"""Plots (matplotlib PNGs + DVC plot data) and the self-contained HTML report of the analyze stage.

The report embeds every image as base64, so ``reports/report.html`` is one file that opens anywhere.
It holds numbers, configuration names, the cube's parameters and what each run's guarantee
assumes — never secret text (the analysis reads only top-level numeric scalars of the score JSON).
"""

from __future__ import annotations

import base64
import csv
import html
import math
from pathlib import Path

from empriv.analysis.selection import METHOD_LABELS, METHODS

RULE_COLORS = {"individual": "#4C72B0", "compute": "#DD8452", "updates": "#55A868"}
METHOD_COLORS = {"algorithm1": "#C44E52", "best_utility": "#4C72B0", "worst_utility": "#8172B3", "oracle": "#E5AE38"}
METHOD_MARKERS = {"algorithm1": "D", "best_utility": "s", "worst_utility": "^", "oracle": "*"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 100, "font.size": 9})
    return plt


def _save(fig, path: Path) -> Path:
    from empriv.io import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    _plt().close(fig)
    return path


def _write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    from empriv.io import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])
    return path


def _fmt(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, float):
        if x != 0 and (abs(x) < 10 ** -digits or abs(x) >= 10 ** 6):
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}f}"
    return str(x)


def _fmt_p(p) -> str:
    if p is None:
        return "n/a"
    return f"{p:.2e}" if p < 1e-3 else f"{p:.3f}"


# ----------------------------------------------------------------------------------------- plots
def plot_variance(analysis: dict, out: Path) -> Path | None:
    """Fig. 2: jitter of configuration means per ε, standard deviation on top of each cluster."""
    import numpy as np

    scores = [s for s in analysis["privacy_scores"] + [analysis["utility"]] if s in analysis["variance"]]
    if not scores:
        return None
    plt = _plt()
    n = len(scores)
    ncol = min(3, n)
    nrow = math.ceil(n / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.2 * nrow), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, s in zip(axes.flat, scores):
        groups = analysis["variance"][s]
        for i, g in enumerate(groups):
            vals = g["values"]
            x = i + rng.uniform(-0.15, 0.15, size=len(vals))
            ax.scatter(x, vals, s=18, alpha=0.8, color=f"C{i % 10}")
            top = max(vals) if vals else 0.0
            ax.annotate(_fmt(g["std"]), (i, top), xytext=(0, 6), textcoords="offset points", ha="center", fontsize=8)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(["ε=" + " ".join(g["group"].values()) for g in groups])
        ax.set_title(s + (" (utility)" if s == analysis["utility"] else ""))
        ax.margins(y=0.2)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("Empirical privacy variance: configuration means per ε (label: std across configurations)")
    fig.tight_layout()
    return _save(fig, out)


def plot_hyperparameters(configs, score: str, utility: str, epsilon_label_: str, out: Path) -> Path | None:
    """Fig. 5: score and utility while one hyperparameter varies (others fixed), at fixed compute, at fixed updates."""
    import polars as pl

    from empriv.analysis.table import epsilon_label

    g = configs.filter(pl.col("epsilon").map_elements(epsilon_label, return_dtype=pl.String) == epsilon_label_)
    g = g.filter(pl.col(score).is_not_null())
    if g.height < 2:
        return None
    rows = list(g.iter_rows(named=True))
    panels = [
        ("vary b (T, η fixed)", "batch_size", lambda r: (r["steps"], r["learning_rate"]), lambda k: f"T={k[0]}, η={k[1]:g}"),
        ("vary T (b, η fixed)", "steps", lambda r: (r["batch_size"], r["learning_rate"]), lambda k: f"b={k[0]}, η={k[1]:g}"),
        ("vary η (b, T fixed)", "learning_rate", lambda r: (r["batch_size"], r["steps"]), lambda k: f"b={k[0]}, T={k[1]}"),
        ("fixed compute C, η: vary b", "batch_size", lambda r: (r["compute"], r["learning_rate"]), lambda k: f"C={k[0]:g}, η={k[1]:g}"),
        ("fixed updates U: vary η (mean per η)", "learning_rate", lambda r: (f"{r['update']:.9g}",), lambda k: f"U={k[0]}"),
    ]
    plt = _plt()
    fig, axes = plt.subplots(2, len(panels), figsize=(3.4 * len(panels), 5.6), squeeze=False)
    for j, (title, xcol, keyf, labf) in enumerate(panels):
        groups: dict = {}
        xticks: set = set()
        for r in rows:
            groups.setdefault(keyf(r), []).append(r)
        drawn = 0
        for k, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            if len({m[xcol] for m in members}) < 2:
                continue
            xs = sorted({m[xcol] for m in members})  # several points at one x (fixed U, same η): their mean
            for i, col in enumerate((score, utility)):
                ys = [sum(m[col] for m in members if m[xcol] == x) / sum(1 for m in members if m[xcol] == x) for x in xs]
                axes[i][j].plot(xs, ys, marker="o", label=labf(k))
            drawn += 1
            xticks.update(xs)
        for i, col in enumerate((score, utility)):
            ax = axes[i][j]
            ax.set_xscale("log", base=2)
            if xticks:
                ax.set_xticks(sorted(xticks), [f"{x:g}" for x in sorted(xticks)])
                ax.minorticks_off()
            ax.set_xlabel({"batch_size": "b", "steps": "T", "learning_rate": "η"}[xcol])
            if j == 0:
                ax.set_ylabel(col)
            if i == 0:
                ax.set_title(title)
            if not drawn:
                ax.text(0.5, 0.5, "no such group in the cube", ha="center", va="center", transform=ax.transAxes)
            elif i == 0 and drawn <= 6:
                ax.legend(fontsize=6)
    fig.suptitle(f"Effect of hyperparameters at ε = {epsilon_label_}: {score} (top), {utility} (bottom)")
    fig.tight_layout()
    return _save(fig, out)


def plot_heuristics(analysis: dict, score: str, out: Path) -> Path | None:
    """Fig. 7: accuracy of the three heuristics per ε, with the random-guess baseline."""
    from empriv.analysis.heuristics import RULES

    h = analysis["heuristics"]
    labels = [e for e in h if score in h[e]]
    if not labels:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(labels) + 2), 3.4))
    width = 0.26
    for i, rule in enumerate(RULES):
        for k, e in enumerate(labels):
            s = h[e][score][rule]
            x = k + (i - 1) * width
            acc = s["accuracy"]
            ax.bar(x, acc if acc is not None else 0.0, width, color=RULE_COLORS[rule], label=rule if k == 0 else None,
                   hatch=None if acc is not None else "//", alpha=1.0 if acc is not None else 0.3)
            if s["random_baseline"] is not None:
                ax.hlines(s["random_baseline"], x - width / 2, x + width / 2, colors="black", linestyles="--",
                          label="random guess" if (i == 0 and k == 0) else None)
            ax.annotate(f"n={s['n_pairs']}", (x, acc or 0.0), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=6)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([f"ε={e}" for e in labels])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("accuracy")
    ax.set_title(f"Heuristic accuracy ({score}; ties count as wrong)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return _save(fig, out)


def plot_layout(analysis: dict, configs, score: str, utility: str, out: Path) -> Path | None:
    """Fig. 9/20: utility vs score of every configuration with each method's pick (top), and the score each
    method picks at every utility threshold with the oracle's (bottom), per finite ε."""
    import polars as pl

    from empriv.analysis.table import epsilon_label

    sel = analysis["selection"]
    labels = [e for e in sel if score in sel[e] and sel[e][score].get("sweep")]
    if not labels:
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, len(labels), figsize=(4.4 * len(labels), 6.4), squeeze=False)
    for j, e in enumerate(labels):
        entry = sel[e][score]
        g = configs.filter(pl.col("epsilon").map_elements(epsilon_label, return_dtype=pl.String) == e)
        g = g.filter(pl.col(score).is_not_null())
        ax = axes[0][j]
        ax.scatter(g[utility].to_list(), g[score].to_list(), color="0.6", s=20, label="configuration")
        full = entry["sweep"][-1]
        pts = {m: full["picks"][m] for m in METHODS}
        pts["oracle"] = {"utility": None, "score": full["oracle_score"], "config": full["oracle"]}
        byname = {f"b{r['batch_size']}-T{r['steps']}-lr{r['learning_rate']:g}": r for r in g.iter_rows(named=True)}
        for m, p in pts.items():
            r = byname.get(p["config"])
            if r is None:
                continue
            ax.scatter([r[utility]], [r[score]], marker=METHOD_MARKERS[m], s=90, facecolors="none" if m != "oracle" else METHOD_COLORS[m],
                       edgecolors=METHOD_COLORS[m], linewidths=1.6, label=f"{METHOD_LABELS[m]}: {p['config']}")
        ax.set_xlabel(f"{utility} (lower = better utility)")
        ax.set_ylabel(score)
        ax.set_title(f"ε = {e}: pool of {len(byname)} configurations")
        ax.legend(fontsize=6)
        ax2 = axes[1][j]
        thr = [s["threshold"] for s in entry["sweep"]]
        ax2.plot(thr, [s["oracle_score"] for s in entry["sweep"]], color=METHOD_COLORS["oracle"], marker="*", label="oracle")
        for m in METHODS:
            ax2.plot(thr, [s["picks"][m]["score"] for s in entry["sweep"]], color=METHOD_COLORS[m], marker=METHOD_MARKERS[m],
                     ms=4, label=METHOD_LABELS[m], alpha=0.85)
        ax2.set_xlabel(f"utility threshold u ({utility} ≤ u)")
        ax2.set_ylabel(f"{score} of the pick")
        ax2.legend(fontsize=6)
    fig.suptitle(f"Selection: Algorithm 1 vs baselines ({score})")
    fig.tight_layout()
    return _save(fig, out)


def plot_risks(analysis: dict, score: str, out: Path) -> Path | None:
    """Fig. 10 (and appendix D.3): relative and absolute privacy risk per method, on the seed means and
    averaged over Monte Carlo layouts."""
    import numpy as np

    sel = analysis["selection"]
    labels = [e for e in sel if score in sel[e] and sel[e][score].get("risks", {}).get("mean")]
    if not labels:
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(9, 5.6), squeeze=False)
    width = 0.26
    for r, kind in enumerate(("relative_risk", "absolute_risk")):
        for c, layout in enumerate(("mean", "monte_carlo")):
            ax = axes[r][c]
            for i, m in enumerate(METHODS):
                vals = []
                for e in labels:
                    d = sel[e][score]["risks"].get(layout)
                    v = d[m][kind] if d else None
                    vals.append(np.nan if v is None else v)
                ax.bar(np.arange(len(labels)) + (i - 1) * width, vals, width, color=METHOD_COLORS[m], label=METHOD_LABELS[m])
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels([f"ε={e}" for e in labels])
            ax.set_title(f"{kind.replace('_', ' ')} — {'seed means' if layout == 'mean' else 'Monte Carlo'}")
            ax.axhline(0, color="black", lw=0.6)
            if r == 0 and c == 0:
                ax.legend(fontsize=7)
    fig.suptitle(f"Privacy risk of the selected configuration vs the oracle, averaged over utility thresholds ({score})")
    fig.tight_layout()
    return _save(fig, out)


def write_plot_data(analysis: dict, configs, out_dir: Path) -> list[Path]:
    """DVC plot data (CSV) for the figures: variance, heuristics, risks, layout."""
    out_dir = Path(out_dir)
    paths = []
    rows = []
    for s, groups in analysis["variance"].items():
        for g in groups:
            for cfg, v in zip(g.get("configs") or [None] * len(g["values"]), g["values"]):
                rows.append([s, " ".join(g["group"].values()), cfg, v, g["std"]])
    paths.append(_write_csv(out_dir / "variance.csv", ["score", "epsilon", "config", "value", "std"], rows))
    rows = []
    for e, per in analysis["heuristics"].items():
        for s, rules in per.items():
            for rule, d in rules.items():
                rows.append([e, s, rule, d["accuracy"], d["random_baseline"], d["n_pairs"], d["n_ties"]])
    paths.append(_write_csv(out_dir / "heuristics.csv", ["epsilon", "score", "rule", "accuracy", "random_baseline", "n_pairs", "n_ties"], rows))
    rows, lay = [], []
    for e, per in analysis["selection"].items():
        for s, d in per.items():
            for layout in ("mean", "monte_carlo"):
                res = (d.get("risks") or {}).get(layout)
                if not res:
                    continue
                for m in METHODS:
                    rows.append([e, s, layout, m, res[m]["relative_risk"], res[m]["absolute_risk"]])
            for t in d.get("sweep") or []:
                for m in METHODS:
                    lay.append([e, s, t["threshold"], m, t["picks"][m]["config"], t["picks"][m]["score"], t["oracle_score"]])
    paths.append(_write_csv(out_dir / "risks.csv", ["epsilon", "score", "layout", "method", "relative_risk", "absolute_risk"], rows))
    paths.append(_write_csv(out_dir / "selection.csv", ["epsilon", "score", "threshold", "method", "config", "score_value", "oracle_score"], lay))
    return paths


def make_figures(analysis: dict, configs, out_dir: Path) -> dict[str, Path]:
    """Every PNG of the report (name → path); figures without data are left out."""
    out_dir = Path(out_dir)
    primary, utility = analysis["primary_score"], analysis["utility"]
    figs: dict[str, Path | None] = {"variance": plot_variance(analysis, out_dir / "variance.png")}
    if primary:
        figs["hyperparameters"] = plot_hyperparameters(configs, primary, utility, analysis["focus_epsilon"], out_dir / "hyperparameters.png")
        figs["heuristics"] = plot_heuristics(analysis, primary, out_dir / "heuristics.png")
        figs["selection"] = plot_layout(analysis, configs, primary, utility, out_dir / "selection.png")
        figs["risks"] = plot_risks(analysis, primary, out_dir / "risks.png")
    return {k: v for k, v in figs.items() if v is not None}


# ------------------------------------------------------------------------------------------- HTML
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
        body.append("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_esc(_fmt(c) if not isinstance(c, str) else c)}</td>'
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
    "heuristics": "Fig. 7 analogue: accuracy of the pairwise heuristics (a pair is correct only if the predicted-better configuration "
                  "has a strictly lower score); dashed: random guess on the same pairs (½ per untied pair).",
    "selection": "Fig. 9/20 analogue: top, every configuration's utility and score with each method's pick on the whole pool; "
                 "bottom, the score each method picks from the subpool with utility ≤ u, for every threshold u, and the oracle's.",
    "risks": "Fig. 10 / appendix D.3 analogue: privacy risk of each method's pick relative to the oracle, averaged over utility "
             "thresholds, on the seed means and over Monte Carlo layouts (scores drawn from N(seed mean, seed std)).",
}


def render_html(analysis: dict, figures: dict[str, Path], *, cube: dict, params: dict, assumptions: list[dict],
                run_rows: tuple[list[str], list[list]], profile_images: list[Path] | None = None) -> str:
    """The report as one HTML string (images inline)."""
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
    parts.append(_table(["parameter", "values"], [[k, ", ".join(_fmt(v) if isinstance(v, float) else str(v) for v in vs)]
                                                  for k, vs in cube.items()]))
    parts.append("<details><summary>analysis parameters</summary>" + _yaml_block(params) + "</details>")
    ret = a["retention"]
    parts.append("<h3>Retention rule</h3><p>Configurations achieving at least "
                 f"{_esc(a['retention_fraction'])} of the utility gain from the base model to the best configuration are kept (per ε).</p>")
    parts.append(_table(["ε", "configurations", "kept", "applied", "base utility", "best utility", "threshold", "note"],
                        [[e, r["n_configs"], r["n_kept"], "yes" if r["applied"] else "no", r["base_utility"], r["best_utility"],
                          r["threshold"], r.get("reason") or ""] for e, r in ret.items()]))

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
    if "hyperparameters" in figures:
        parts.append(_img(figures["hyperparameters"], "score and utility versus hyperparameters", CAPTIONS["hyperparameters"]))

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
                    rows.append([s, e, m, term, f"{_fmt(t['coef'])}{significance_stars(t['p'])}", t["se"], t["t"],
                                 _fmt_p(t["p"]), fit["r2"], fit["n"],
                                 ("dropped (constant): " + ", ".join(fit["dropped"])) if fit["dropped"] else ""])
    parts.append(_table(["score", "ε", "model", "term", "coef", "SE", "t", "p", "R²", "n", "note"], rows, left=4))

    # -- heuristics
    parts.append("<h2>Selection heuristics</h2>")
    rows = []
    for e, per in a["heuristics"].items():
        for s, rules in per.items():
            rows.append([s, e] + [f"{_fmt(rules[r]['accuracy'])} ({rules[r]['n_pairs']} pairs, {rules[r]['n_ties']} ties)"
                                  for r in RULES] + [_fmt(rules["individual"]["random_baseline"])])
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
    parts.append("<h2>Every run</h2><details><summary>run table (metrics/runs.csv)</summary>"
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
