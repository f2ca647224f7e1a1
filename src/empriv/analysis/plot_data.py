"""The CSV data of the DVC plots (``.dvc/plots/`` templates), written by the analyze stage beside the figures of
:mod:`empriv.analysis.figures`."""

from __future__ import annotations

from pathlib import Path

from empriv.analysis.plotting import epsilon_display, group_display, write_rows
from empriv.analysis.selection import METHODS


def write_plot_data(analysis: dict, configs, out_dir: Path) -> list[Path]:
    """DVC plot data (CSV) for the figures: variance, heuristics, risks, selection, and the primary score's jitter
    (Fig. 2), seed_vs_configuration (Table 8) and one_at_a_time (Fig. 5 a–c): :func:`write_research_plot_data`.

    Every file is long (one row per plotted value) and carries the columns the plot templates in ``.dvc/plots/``
    split series by: ``score`` and ``epsilon`` / ``epsilon_label`` (ε = ∞ as "∞", so it is a category on an axis
    and never a non-number in a numeric one) everywhere, ``group`` (variance), ``rule`` (heuristics), ``layout`` and
    ``method`` (risks), ``method`` (selection, the oracle as a method of its own).

    With ``analysis["acr_by_frequency"]`` (:mod:`empriv.analysis.acr_frequency`), ``acr_by_frequency.csv``: one row
    per ε and searched secret (its id, occurrences, frequency, ``rare`` 1/0, searches, successes, success rate and the
    ACR over successes; :data:`empriv.analysis.acr_frequency.PLOT_HEADER`).
    """
    out_dir = Path(out_dir)
    paths = []
    rows = []
    for s, groups in analysis["variance"].items():
        for g in groups:
            label = g["group"].get("epsilon", "")
            for cfg, v in zip(g.get("configs") or [None] * len(g["values"]), g["values"]):
                rows.append([s, label, epsilon_display(label), group_display(g["group"]), cfg, v, g["std"]])
    paths.append(write_rows(out_dir / "variance.csv", ["score", "epsilon", "epsilon_label", "group", "config", "value", "std"],
                            rows))
    rows = []
    for e, per in analysis["heuristics"].items():
        for s, rules in per.items():
            for rule, d in rules.items():
                rows.append([e, epsilon_display(e), s, rule, d["accuracy"], d["random_baseline"], d["n_pairs"], d["n_ties"]])
    paths.append(write_rows(out_dir / "heuristics.csv", ["epsilon", "epsilon_label", "score", "rule", "accuracy",
                                                         "random_baseline", "n_pairs", "n_ties"], rows))
    rows, lay = [], []
    for e, per in analysis["selection"].items():
        for s, d in per.items():
            for layout in ("mean", "monte_carlo"):
                res = (d.get("risks") or {}).get(layout)
                if not res:
                    continue
                for m in METHODS:
                    rows.append([e, epsilon_display(e), s, layout, m, res[m]["relative_risk"], res[m]["absolute_risk"]])
            for t in d.get("sweep") or []:
                for m in METHODS:
                    lay.append([e, epsilon_display(e), s, t["threshold"], m, t["picks"][m]["config"], t["picks"][m]["score"],
                                t["oracle_score"]])
                lay.append([e, epsilon_display(e), s, t["threshold"], "oracle", t["oracle"], t["oracle_score"], t["oracle_score"]])
    paths.append(write_rows(out_dir / "risks.csv", ["epsilon", "epsilon_label", "score", "layout", "method", "relative_risk",
                                                    "absolute_risk"], rows))
    paths.append(write_rows(out_dir / "selection.csv", ["epsilon", "epsilon_label", "score", "threshold", "method", "config",
                                                        "score_value", "oracle_score"], lay))
    paths += write_research_plot_data(analysis, configs, out_dir)
    if analysis.get("acr_by_frequency") is not None:  # per ε and searched secret (the analyze stage adds it)
        from empriv.analysis.acr_frequency import PLOT_HEADER, plot_rows

        paths.append(write_rows(out_dir / "acr_by_frequency.csv", PLOT_HEADER, plot_rows(analysis["acr_by_frequency"])))
    if analysis.get("adaptation_audit"):
        from empriv.analysis.adaptation_audit import write_adaptation_plot_data

        paths.append(write_adaptation_plot_data(analysis["adaptation_audit"], out_dir / "adaptation_audit.csv"))
    return paths


JITTER_HEADER = ["score", "epsilon", "epsilon_label", "group", "config", "batch_size", "steps", "learning_rate",
                 "value", "seed_std", "n_seeds", "x", "jitter", "std"]
TABLE8_HEADER = ["score", "epsilon", "epsilon_label", "configurations", "std_configs", "std_seeds", "ratio",
                 "n_configs", "n_seeds_min", "n_seeds_max", "n_runs", "reason"]


def one_at_a_time_rows(fig5: dict) -> list[list]:
    """The DVC plot rows of :func:`empriv.analysis.one_at_a_time.one_at_a_time` (one per point), in the columns
    of :data:`ONE_AT_A_TIME_HEADER`."""
    from empriv.analysis.one_at_a_time import AXIS_SYMBOLS, axis_value_text

    rows = []
    for p in fig5.get("panels", []):
        held = ", ".join(f"{AXIS_SYMBOLS[a]}={axis_value_text(v)}" for a, v in p["held"].items())
        title = f"vary {AXIS_SYMBOLS[p['vary']]} ({held})"
        for label, pts in p["lines"].items():
            for pt in pts:
                rows.append([fig5["score"], label, epsilon_display(label), title, p["vary"], pt["value"], pt["mean"],
                             pt["seed_std"], pt["n_seeds"], pt["config"],
                             None if pt["kept"] is None else int(bool(pt["kept"]))])
    return rows


ONE_AT_A_TIME_HEADER = ["score", "epsilon", "epsilon_label", "panel", "hyperparameter", "value", "mean", "seed_std",
                        "n_seeds", "config", "kept"]


def write_research_plot_data(analysis: dict, configs, out_dir: Path) -> list[Path]:
    """The primary score's Fig. 2, Table 8 and Fig. 5 (a–c) as CSV (headers only without a primary score):

    - ``jitter.csv``: one row per configuration kept by the retention rule (Fig. 2; the columns of ``variance.csv``
      plus the hyperparameters, seed std and count, and the jittered ``x`` of the PNG);
    - ``seed_vs_configuration.csv``: Table 8, one row per ε and set of configurations (``kept`` by the retention
      rule, ``all``): the two standard deviations, their ratio (empty with the ``reason`` where undefined), counts;
    - ``one_at_a_time.csv``: one row per point of Fig. 5 (a–c) (``panel``, ``hyperparameter`` varied, its ``value``,
      the seed ``mean`` and ``seed_std``, ``kept`` 1/0)."""
    from empriv.analysis.variance import jitter_points

    out_dir = Path(out_dir)
    score = analysis.get("primary_score")
    rows = []
    if score and score in configs.columns:
        for p in jitter_points(configs, score, seed=analysis.get("seed", 0)):
            rows.append([p["score"], p["epsilon"], epsilon_display(p["epsilon"]), group_display({"epsilon": p["epsilon"]}),
                         p["config"], p["batch_size"], p["steps"], p["learning_rate"], p["value"], p["seed_std"],
                         p["n_seeds"], p["x"], p["jitter"], p["std"]])
    paths = [write_rows(out_dir / "jitter.csv", JITTER_HEADER, rows)]
    rows = []
    t8 = analysis.get("table8") or {}
    for e, d in (t8.get("per_epsilon") or {}).items():
        for kind, v in (("kept", d), ("all", d.get("all"))):
            if v:
                rows.append([t8["score"], e, epsilon_display(e), kind, v["hyperparameter"], v["randomness"], v["ratio"],
                             v["n_configs"], v["n_seeds_min"], v["n_seeds_max"], v["n_runs"], v["ratio_reason"]])
    paths.append(write_rows(out_dir / "seed_vs_configuration.csv", TABLE8_HEADER, rows))
    paths.append(write_rows(out_dir / "one_at_a_time.csv", ONE_AT_A_TIME_HEADER,
                            one_at_a_time_rows(analysis.get("one_at_a_time") or {})))
    return paths
