"""The analyze stage's figures: matplotlib PNGs (embedded in the HTML report, :mod:`empriv.analysis.report`);
the CSV data of the DVC plots is :mod:`empriv.analysis.plot_data` (its writers importable from here too).

Each figure takes the analysis dict (and the configuration table) and writes one PNG atomically; a figure
without data is skipped (None).
"""

from __future__ import annotations

import math
from pathlib import Path

from empriv.analysis.formatting import format_value
from empriv.analysis.plot_data import (  # noqa: F401  (the analyze stage and the tests import them from here)
    JITTER_HEADER,
    ONE_AT_A_TIME_HEADER,
    TABLE8_HEADER,
    one_at_a_time_rows,
    write_plot_data,
    write_research_plot_data,
)
from empriv.analysis.plotting import INFINITY_LABEL, epsilon_display, group_display, pyplot, save_figure  # noqa: F401
from empriv.analysis.selection import METHOD_LABELS, METHODS

RULE_COLORS = {"individual": "#4C72B0", "compute": "#DD8452", "updates": "#55A868"}
METHOD_COLORS = {"algorithm1": "#C44E52", "best_utility": "#4C72B0", "worst_utility": "#8172B3", "oracle": "#E5AE38"}
METHOD_MARKERS = {"algorithm1": "D", "best_utility": "s", "worst_utility": "^", "oracle": "*"}


def plot_variance(analysis: dict, out: Path) -> Path | None:
    """Fig. 2: jitter of configuration means per ε, standard deviation on top of each cluster."""
    import numpy as np

    scores = [s for s in analysis["privacy_scores"] + [analysis["utility"]] if s in analysis["variance"]]
    if not scores:
        return None
    plt = pyplot()
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
            ax.annotate(format_value(g["std"]), (i, top), xytext=(0, 6), textcoords="offset points", ha="center", fontsize=8)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(["ε=" + " · ".join(g["group"].values()) for g in groups],
                           rotation=30 if len(groups) > 4 else 0, ha="right" if len(groups) > 4 else "center")
        ax.set_title(s + (" (utility)" if s == analysis["utility"] else ""))
        ax.margins(y=0.2)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("Empirical privacy variance: configuration means per ε (label: std across configurations)")
    fig.tight_layout()
    return save_figure(fig, out)


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
    plt = pyplot()
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
    return save_figure(fig, out)


def plot_heuristics(analysis: dict, score: str, out: Path) -> Path | None:
    """Fig. 7: accuracy of the three heuristics per ε, with the random-guess baseline."""
    from empriv.analysis.heuristics import RULES

    h = analysis["heuristics"]
    labels = [e for e in h if score in h[e]]
    if not labels:
        return None
    plt = pyplot()
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
    return save_figure(fig, out)


def plot_layout(analysis: dict, configs, score: str, utility: str, out: Path) -> Path | None:
    """Fig. 9/20: utility vs score of every configuration with each method's pick (top), and the score each
    method picks at every utility threshold with the oracle's (bottom), per finite ε."""
    import polars as pl

    from empriv.analysis.table import epsilon_label

    sel = analysis["selection"]
    labels = [e for e in sel if score in sel[e] and sel[e][score].get("sweep")]
    if not labels:
        return None
    plt = pyplot()
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
    return save_figure(fig, out)


def plot_risks(analysis: dict, score: str, out: Path) -> Path | None:
    """Fig. 10 (and appendix D.3): relative and absolute privacy risk per method, on the seed means and
    averaged over Monte Carlo layouts."""
    import numpy as np

    sel = analysis["selection"]
    labels = [e for e in sel if score in sel[e] and sel[e][score].get("risks", {}).get("mean")]
    if not labels:
        return None
    plt = pyplot()
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
    return save_figure(fig, out)


def plot_methods(analysis: dict, out: Path) -> Path | None:
    """Every configuration's primary score against its utility, one colour per adaptation method, one panel per ε
    (filled: kept by the method's retention rule; hollow: not kept)."""
    m = analysis.get("methods")
    if not m or not m.get("primary_score"):
        return None
    primary, utility = m["primary_score"], m["utility"]
    points = [p for p in m["points"] if p["primary"] is not None and p["utility"] is not None]
    if not points:
        return None
    labels = list(dict.fromkeys(p["epsilon"] for p in m["points"]))
    labels.sort(key=lambda e: math.inf if e == "inf" else float(e))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(labels), figsize=(4.2 * len(labels), 3.6), squeeze=False)
    colors = {meth: f"C{i % 10}" for i, meth in enumerate(m["methods"])}
    for ax, e in zip(axes[0], labels):
        for meth in m["methods"]:
            pts = [p for p in points if p["epsilon"] == e and p["method"] == meth]
            if not pts:
                continue
            kept = [p for p in pts if p["kept"]]
            dropped = [p for p in pts if not p["kept"]]
            ax.scatter([p["utility"] for p in kept], [p["primary"] for p in kept], color=colors[meth], s=22,
                       label=meth)
            if dropped:
                ax.scatter([p["utility"] for p in dropped], [p["primary"] for p in dropped], facecolors="none",
                           edgecolors=colors[meth], s=22, label=None if kept else meth)
        ax.set_title(f"ε = {epsilon_display(e)}")
        ax.set_xlabel(f"{utility} (lower = better utility)")
        ax.set_ylabel(primary)
        ax.legend(fontsize=7)
    fig.suptitle(f"Adaptation methods: {primary} vs {utility} per configuration (hollow: dropped by the retention rule)")
    fig.tight_layout()
    return save_figure(fig, out)


def plot_audit_spread(analysis: dict, out: Path) -> Path | None:
    """Audited ε̂ against the primary score of every audited configuration, one panel per finite ε (and method)
    with ≥ 3 of them, each point labelled with its configuration and the panel with Spearman's ρ."""
    spread = analysis.get("audit_spread") or {}
    primary = analysis.get("primary_score")
    if not spread.get("eligible") or not primary:
        return None
    lead = spread["epsilon_columns"][0]
    groups = [(k, g) for k, g in spread["groups"].items() if g.get("eligible")]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(groups), figsize=(4.6 * len(groups), 3.8), squeeze=False)
    for ax, (key, g) in zip(axes[0], groups):
        pts = [r for r in g["ranking"] if r.get(primary) is not None and r.get(lead) is not None]
        ax.scatter([r[primary] for r in pts], [r[lead] for r in pts], color="C3", s=26)
        for r in pts:
            name = r["config"].split("-", 1)[1] if r["config"].startswith("eps") and "-" in r["config"] else r["config"]
            ax.annotate(name, (r[primary], r[lead]), xytext=(3, 3), textcoords="offset points", fontsize=6)
        c = g["correlations"].get(f"{lead}~{primary}", {})
        rho = (f"ρ = {c['rho']:.2f} (p = {c['p']:.2g}, n = {c['n']})" if c.get("rho") is not None
               else f"ρ undefined: {c.get('reason')}")
        ax.set_title(f"ε = {epsilon_display(g['epsilon'])}{' · ' + g['method'] if g.get('method') else ''}\n{rho}",
                     fontsize=8)
        ax.set_xlabel(f"{primary} (main cube, seed mean)")
        ax.set_ylabel(rf"$\hat{{\varepsilon}}$ ({lead})")
    fig.suptitle(r"Audited $\hat{\varepsilon}$ vs empirical privacy at equal ε")
    fig.tight_layout()
    return save_figure(fig, out)


def plot_jitter(analysis: dict, configs, out: Path) -> Path | None:
    """Fig. 2 of the primary score: one point per configuration kept by the retention rule (its seed mean) above its
    ε (a category, ∞ last), jittered sideways (:func:`empriv.analysis.variance.jitter_points`, seeded with the
    analysis seed), each ε labelled with the std across its configurations."""
    from empriv.analysis.variance import jitter_points

    score = analysis.get("primary_score")
    if not score or score not in configs.columns:
        return None
    points = jitter_points(configs, score, seed=analysis.get("seed", 0))
    if not points:
        return None
    labels = list(dict.fromkeys(p["epsilon"] for p in points))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(3.6, 1.3 * len(labels) + 1.6), 3.6))
    for i, e in enumerate(labels):
        pts = [p for p in points if p["epsilon"] == e]
        ax.scatter([p["x"] for p in pts], [p["value"] for p in pts], s=24, alpha=0.85, color=f"C{i % 10}")
        ax.annotate(f"std {format_value(pts[0]['std'])}", (i, max(p["value"] for p in pts)), xytext=(0, 7),
                    textcoords="offset points", ha="center", fontsize=8)
    per = ((analysis.get("table8") or {}).get("per_epsilon") or {})
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([f"ε = {epsilon_display(e)}\n{per[e]['n_configs']}/{per[e]['all']['n_configs']} kept"
                        if e in per and per[e].get("all") else f"ε = {epsilon_display(e)}" for e in labels])
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.margins(y=0.2)
    ax.set_ylabel(f"{score} (seed mean per configuration)")
    ax.set_title(f"Empirical privacy variance of {score}\n(one point per configuration; label: std across them)",
                 fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out)


def plot_one_at_a_time(analysis: dict, out: Path) -> Path | None:
    """Fig. 5 (a–c): the primary score (seed mean ± seed std) against b, T and η in turn, the other two held at the
    reference (:mod:`empriv.analysis.one_at_a_time`), one line per ε; hollow points were dropped by the retention
    rule. A panel without data says why."""
    from empriv.analysis.one_at_a_time import AXIS_SYMBOLS, axis_value_text

    fig5 = analysis.get("one_at_a_time") or {}
    if not fig5.get("panels") or not any(p["lines"] for p in fig5["panels"]):
        return None
    score = fig5["score"]
    labels = sorted({e for p in fig5["panels"] for e in p["lines"]}, key=lambda e: math.inf if e == "inf" else float(e))
    colors = {e: f"C{i % 10}" for i, e in enumerate(labels)}
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.5), squeeze=False, sharey=True)
    for ax, p in zip(axes[0], fig5["panels"]):
        sym = AXIS_SYMBOLS[p["vary"]]
        held = ", ".join(f"{AXIS_SYMBOLS[a]} = {axis_value_text(v)}" for a, v in p["held"].items())
        ax.set_title(f"vary {sym}" + (f" ({held})" if held else ""), fontsize=9)
        ax.set_xlabel(sym)
        if not p["lines"]:
            ax.text(0.5, 0.5, p.get("reason") or "no data", ha="center", va="center", transform=ax.transAxes,
                    fontsize=7, wrap=True)
            continue
        xs = set()
        for e, pts in p["lines"].items():
            x = [pt["value"] for pt in pts]
            y = [pt["mean"] for pt in pts]
            err = [pt["seed_std"] or 0.0 for pt in pts]
            ax.errorbar(x, y, yerr=err, color=colors[e], marker=None, capsize=3, lw=1.4, label=f"ε = {epsilon_display(e)}")
            kept = [pt["kept"] is not False for pt in pts]
            ax.scatter([a for a, k in zip(x, kept) if k], [b for b, k in zip(y, kept) if k], color=colors[e], s=28, zorder=3)
            ax.scatter([a for a, k in zip(x, kept) if not k], [b for b, k in zip(y, kept) if not k], facecolors="white",
                       edgecolors=colors[e], s=28, zorder=3)
            xs.update(x)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(xs), [f"{v:g}" for v in sorted(xs)])
        ax.minorticks_off()
        ax.margins(x=0.15)
    axes[0][0].set_ylabel(f"{score} (seed mean ± seed std)")
    handles, names = [], []
    for ax in axes[0]:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        axes[0][-1].legend(handles, names, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(f"One hyperparameter at a time: {score} (hollow: dropped by the retention rule)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out)


def make_figures(analysis: dict, configs, out_dir: Path) -> dict[str, Path]:
    """Every PNG of the report (name → path); figures without data are left out."""
    out_dir = Path(out_dir)
    primary, utility = analysis["primary_score"], analysis["utility"]
    figs: dict[str, Path | None] = {"variance": plot_variance(analysis, out_dir / "variance.png")}
    if primary:
        figs["jitter"] = plot_jitter(analysis, configs, out_dir / "jitter.png")
        figs["one_at_a_time"] = plot_one_at_a_time(analysis, out_dir / "one_at_a_time.png")
        figs["hyperparameters"] = plot_hyperparameters(configs, primary, utility, analysis["focus_epsilon"], out_dir / "hyperparameters.png")
        figs["heuristics"] = plot_heuristics(analysis, primary, out_dir / "heuristics.png")
        figs["selection"] = plot_layout(analysis, configs, primary, utility, out_dir / "selection.png")
        figs["risks"] = plot_risks(analysis, primary, out_dir / "risks.png")
    if analysis.get("methods"):
        figs["methods"] = plot_methods(analysis, out_dir / "methods.png")
    if (analysis.get("audit_spread") or {}).get("eligible"):
        figs["audit_spread"] = plot_audit_spread(analysis, out_dir / "audit_spread.png")
    if analysis.get("adaptation_audit"):
        from empriv.analysis.adaptation_audit import plot_adaptation_audit, plot_pretraining_leakage

        figs["adaptation_audit"] = plot_adaptation_audit(analysis["adaptation_audit"], out_dir / "adaptation_audit.png")
        figs["adaptation_pretraining"] = plot_pretraining_leakage(analysis["adaptation_audit"],
                                                                  out_dir / "adaptation_pretraining.png")
    return {k: v for k, v in figs.items() if v is not None}
