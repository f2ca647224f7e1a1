"""The adaptation-audit study's results (issue 17; research: auditing private adaptations): membership inference
against DP adaptations (full, LoRA, prefix, prompt, head …) on in-distribution (``iid``) and out-of-distribution
(``ood``) adaptation data, per method × ε, and the leakage of the base's pre-training data before and after the
adaptation.

Input: one record per run, ``<dir>/<dataset>/<method>/<point>.json``, with ``dataset``, ``method``, ``epsilon``,
``batch_size``, ``steps``, ``learning_rate``, ``seed``, ``trainable_parameters``, ``test_nll``, ``mia``
(attack → ``auc``, ``tpr_at_1pct_fpr``, ``tpr_at_0.1pct_fpr`` …; attacks loss, zlib, min_k, reference, rmia and
``<attack>_optimistic`` variants) and ``pretraining`` (``auc_base``, ``auc_adapted`` …). A run may lack attacks or
the pre-training block: what is absent is null, never 0. The dataset and method default to the directories'
names when the record does not carry them.

Output: ``records/adaptation_audit.csv`` (one row per run and attack), a summary (means over the runs of each
dataset × method × ε × attack) that the report, the figures and ``plots/analysis/adaptation_audit.csv`` draw from.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

ATTACKS = ("loss", "zlib", "min_k", "reference_pretrained", "reference_shadow", "reference", "rmia_pretrained",
           "rmia_shadow", "rmia")
# the research mainly reports RMIA with the shadow adaptation as reference (empriv.audit.adaptation's names first)
HEADLINE_PREFERENCE = ("rmia_shadow", "rmia", "reference_pretrained", "reference", "min_k", "zlib", "loss")
MIA_METRICS = ("auc", "tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr")
DATASET_ORDER = ("iid", "ood")
RUN_COLUMNS = ("dataset", "method", "epsilon", "epsilon_label", "batch_size", "steps", "learning_rate", "seed",
               "config", "trainable_parameters", "test_nll", "attack", "optimistic", *MIA_METRICS)
CSV_COLUMNS = (*RUN_COLUMNS, "pretraining_auc_base", "pretraining_auc_adapted")


def study_dir(records_dir: str | Path) -> Path:
    """``records/adaptation_audit`` given it or its parent (``records``)."""
    d = Path(records_dir)
    return d / "adaptation_audit" if (d / "adaptation_audit").is_dir() else d


def _number(value, key: str, path: Path, allow_inf: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{path}: {key} must be a number, got {value!r}")
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("inf", "+inf", "infinity") and allow_inf:
            return math.inf
        if text == "nan":
            return None
        raise ValueError(f"{path}: {key} must be a number{' or inf' if allow_inf else ''}, got {value!r}")
    if not isinstance(value, (int, float)):
        raise ValueError(f"{path}: {key} must be a number, got {value!r}")
    x = float(value)
    if math.isnan(x):
        return None
    if math.isinf(x) and not allow_inf:
        raise ValueError(f"{path}: {key} must be finite, got {value!r}")
    return x


def epsilon_label(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


def attack_order(name: str) -> tuple:
    base = name[: -len("_optimistic")] if name.endswith("_optimistic") else name
    return (ATTACKS.index(base) if base in ATTACKS else len(ATTACKS), base, name.endswith("_optimistic"), name)


def read_records(directory: str | Path) -> list[dict]:
    """One row per run and attack (a run without any attack: one row with ``attack`` null), sorted by dataset,
    method, ε, point and attack. Raises ``ValueError`` naming the file and key for a malformed record."""
    from empriv.io import read_json

    root = study_dir(directory)
    if not root.is_dir():
        return []
    rows = []
    for path in sorted(root.glob("*/*/*.json")):
        rec = read_json(path)
        if not isinstance(rec, dict):
            raise ValueError(f"{path}: a record must be a JSON object, got {type(rec).__name__}")
        eps = _number(rec.get("epsilon"), "epsilon", path, allow_inf=True)
        if eps is None or eps <= 0:
            raise ValueError(f"{path}: epsilon must be a number > 0 or inf, got {rec.get('epsilon')!r}")
        mia = rec.get("mia") or {}
        pre = rec.get("pretraining") or {}
        if not isinstance(mia, dict):
            raise ValueError(f"{path}: mia must map attack names to results, got {type(mia).__name__}")
        if not isinstance(pre, dict):
            raise ValueError(f"{path}: pretraining must be an object, got {type(pre).__name__}")
        tp = _number(rec.get("trainable_parameters"), "trainable_parameters", path)
        base = {
            "dataset": str(rec.get("dataset") or path.parent.parent.name),
            "method": str(rec.get("method") or path.parent.name),
            "epsilon": eps, "epsilon_label": epsilon_label(eps),
            "batch_size": rec.get("batch_size"), "steps": rec.get("steps"),
            "learning_rate": _number(rec.get("learning_rate"), "learning_rate", path), "seed": rec.get("seed"),
            "config": rec.get("config") or path.stem,
            "trainable_parameters": int(tp) if tp is not None else None,
            "test_nll": _number(rec.get("test_nll"), "test_nll", path),
        }
        for k, v in pre.items():
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                try:
                    base[f"pretraining_{k}"] = _number(v, f"pretraining.{k}", path)
                except ValueError:
                    continue  # a descriptive string (the proxy set's name …): not a measurement
        attacks = sorted(mia, key=attack_order)
        if not attacks:
            rows.append({**base, "attack": None, "optimistic": None, **dict.fromkeys(MIA_METRICS)})
        for name in attacks:
            res = mia[name]
            if not isinstance(res, dict):
                raise ValueError(f"{path}: mia.{name} must be an object of metrics, got {type(res).__name__}")
            rows.append({**base, "attack": name, "optimistic": name.endswith("_optimistic"),
                         **{m: _number(res.get(m), f"mia.{name}.{m}", path) for m in MIA_METRICS}})
    rows.sort(key=lambda r: (_dataset_key(r["dataset"]), r["method"], r["epsilon"], str(r["config"]),
                             attack_order(r["attack"]) if r["attack"] else ()))
    return rows


def _dataset_key(d: str) -> tuple:
    return (DATASET_ORDER.index(d) if d in DATASET_ORDER else len(DATASET_ORDER), d)


def write_csv(rows: list[dict], path: str | Path) -> Path:
    """``records/adaptation_audit.csv``: every row of :func:`read_records` (header only without records), atomically."""
    from empriv.io import atomic_path

    extra = sorted({k for r in rows for k in r if k.startswith("pretraining_")} - set(CSV_COLUMNS))
    columns = [*CSV_COLUMNS, *extra]
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    return path


def _mean(vals: list[float]) -> float | None:
    return sum(vals) / len(vals) if vals else None


def _std(vals: list[float]) -> float | None:
    if len(vals) < 2:
        return None
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def summarize(rows: list[dict]) -> dict | None:
    """Means over the runs of each dataset × method × ε (× attack); None without rows.

    ``cells``: per attack, the mean (and std over runs) AUC and the mean TPRs; ``strongest``: per dataset × method ×
    ε, the non-optimistic attack with the highest mean AUC; ``headline_attack``: the attack the figures and the main
    tables show (RMIA when present, else reference, min-k, zlib, loss); ``pretraining``: mean AUC of the
    pre-training-data attack on the base and on the adapted model and their difference; ``utility``: mean test NLL
    and trainable parameters."""
    if not rows:
        return None
    datasets = sorted({r["dataset"] for r in rows}, key=_dataset_key)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    eps_values = sorted({r["epsilon"] for r in rows})
    attacks = sorted({r["attack"] for r in rows if r["attack"]}, key=attack_order)
    plain = [a for a in attacks if not a.endswith("_optimistic")]
    headline = next((a for a in HEADLINE_PREFERENCE if a in plain), plain[0] if plain else None)
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["method"], r["epsilon"]), []).append(r)
    cells, strongest, pretraining, utility = [], [], [], []
    for d in datasets:
        for m in methods:
            for e in eps_values:
                g = groups.get((d, m, e))
                if not g:
                    continue
                runs = {}
                for r in g:
                    runs.setdefault(r["config"], r)
                label = epsilon_label(e)
                best = None
                for a in attacks:
                    ar = [r for r in g if r["attack"] == a]
                    if not ar:
                        continue
                    auc = [r["auc"] for r in ar if r["auc"] is not None]
                    cell = {"dataset": d, "method": m, "epsilon": label, "attack": a,
                            "optimistic": a.endswith("_optimistic"), "n_runs": len(ar),
                            "auc": _mean(auc), "auc_std": _std(auc), "n_auc": len(auc),
                            **{k: _mean([r[k] for r in ar if r[k] is not None]) for k in MIA_METRICS[1:]}}
                    cells.append(cell)
                    if not cell["optimistic"] and cell["auc"] is not None and (best is None or cell["auc"] > best["auc"]):
                        best = cell
                if best is not None:
                    strongest.append({"dataset": d, "method": m, "epsilon": label, "attack": best["attack"],
                                      "auc": best["auc"], "tpr_at_1pct_fpr": best["tpr_at_1pct_fpr"]})
                pb = [r["pretraining_auc_base"] for r in runs.values() if r.get("pretraining_auc_base") is not None]
                pa = [r["pretraining_auc_adapted"] for r in runs.values() if r.get("pretraining_auc_adapted") is not None]
                if pb or pa:
                    both = [(r["pretraining_auc_base"], r["pretraining_auc_adapted"]) for r in runs.values()
                            if r.get("pretraining_auc_base") is not None and r.get("pretraining_auc_adapted") is not None]
                    pretraining.append({"dataset": d, "method": m, "epsilon": label, "n_runs": len(runs),
                                        "auc_base": _mean(pb), "auc_adapted": _mean(pa),
                                        "change": _mean([after - before for before, after in both]) if both else None})
                nll = [r["test_nll"] for r in runs.values() if r["test_nll"] is not None]
                tp = [r["trainable_parameters"] for r in runs.values() if r["trainable_parameters"] is not None]
                utility.append({"dataset": d, "method": m, "epsilon": label, "n_runs": len(runs),
                                "test_nll": _mean(nll), "trainable_parameters": max(tp) if tp else None})
    n_runs = len({(r["dataset"], r["method"], r["config"]) for r in rows})
    return {"n_runs": n_runs, "datasets": datasets, "methods": methods,
            "epsilons": [epsilon_label(e) for e in eps_values], "attacks": attacks, "headline_attack": headline,
            "cells": cells, "strongest": strongest, "pretraining": pretraining, "utility": utility}


def analyze_adaptation_audit(records_dir: str | Path, csv_path: str | Path | None = None) -> dict | None:
    """The analyze stage's entry point: read ``<records_dir>/adaptation_audit`` (or ``records_dir`` itself when it
    is that directory), write ``csv_path`` (one row per run and attack; the header only when there is no record, so
    the file can be a stage output either way) and return the summary (None without records) — put it in the
    analysis as ``analysis["adaptation_audit"]`` before the figures, plot data and report are made."""
    rows = read_records(records_dir)
    if csv_path is not None:
        write_csv(rows, csv_path)
    return summarize(rows)


# ----------------------------------------------------------------------------- tables for the report and DVC plots
def cell(summary: dict, dataset: str, method: str, eps: str, attack: str | None, key: str = "auc"):
    for c in summary["cells"]:
        if (c["dataset"], c["method"], c["epsilon"], c["attack"]) == (dataset, method, eps, attack):
            return c.get(key)
    return None


def method_by_epsilon(summary: dict, key: str = "auc", attack: str | None = None) -> tuple[list[str], list[list]]:
    """(header, rows): one row per method, one column per dataset × ε, the headline attack's mean ``key``."""
    attack = attack or summary["headline_attack"]
    header = ["method"] + [f"{d} ε={e}" for d in summary["datasets"] for e in summary["epsilons"]]
    rows = [[m] + [cell(summary, d, m, e, attack, key) for d in summary["datasets"] for e in summary["epsilons"]]
            for m in summary["methods"]]
    return header, rows


def write_adaptation_plot_data(summary: dict, path: str | Path) -> Path:
    """``plots/analysis/adaptation_audit.csv``: one row per dataset × method × ε × attack (means over runs), with
    ``epsilon_label`` (∞ for the non-private runs) for a categorical axis."""
    from empriv.io import atomic_path

    header = ["dataset", "method", "attack", "optimistic", "epsilon", "epsilon_label", "auc", "tpr_at_1pct_fpr",
              "tpr_at_0.1pct_fpr", "n_runs"]
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for c in summary["cells"]:
            w.writerow(["" if v is None else v for v in (
                c["dataset"], c["method"], c["attack"], c["optimistic"], c["epsilon"],
                "∞" if c["epsilon"] == "inf" else c["epsilon"], c["auc"], c["tpr_at_1pct_fpr"],
                c["tpr_at_0.1pct_fpr"], c["n_runs"])])
    return path


# ----------------------------------------------------------------------------- figures
def _positions(labels: list[str]) -> dict[str, int]:
    return {e: i for i, e in enumerate(labels)}


def plot_adaptation_audit(summary: dict, out: Path) -> Path | None:
    """AUC of the headline attack against ε, a line per method, one panel per dataset (ε on an ordinal axis with ∞
    last; dashed: chance)."""
    from empriv.analysis.plotting import epsilon_display, pyplot, save_figure

    attack = summary.get("headline_attack")
    if not attack:
        return None
    plt = pyplot()
    labels = summary["epsilons"]
    pos = _positions(labels)
    fig, axes = plt.subplots(1, len(summary["datasets"]), figsize=(4.6 * len(summary["datasets"]), 3.6),
                             squeeze=False, sharey=True)
    for ax, d in zip(axes[0], summary["datasets"]):
        for i, m in enumerate(summary["methods"]):
            pts = [(pos[e], cell(summary, d, m, e, attack)) for e in labels]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i % 10}", label=m)
        ax.axhline(0.5, color="0.5", lw=0.8, ls="--")
        ax.set_xticks(range(len(labels)), [epsilon_display(e) for e in labels])
        ax.set_xlabel("ε")
        ax.set_title(f"{d} adaptation data")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, f"no {attack} result", ha="center", va="center", transform=ax.transAxes)
    axes[0][0].set_ylabel(f"AUC ({attack})")
    fig.suptitle(f"Membership inference on the adaptation data: {attack} AUC per method (dashed: chance)")
    fig.tight_layout()
    return save_figure(fig, out)


def plot_pretraining_leakage(summary: dict, out: Path) -> Path | None:
    """AUC of the pre-training-data attack on the adapted model against ε, a line per method, one panel per
    dataset; the base model's AUC (mean over runs) as a grey dashed line."""
    from empriv.analysis.plotting import epsilon_display, pyplot, save_figure

    pre = summary.get("pretraining") or []
    if not any(p["auc_adapted"] is not None for p in pre):
        return None
    plt = pyplot()
    labels = summary["epsilons"]
    pos = _positions(labels)
    datasets = [d for d in summary["datasets"] if any(p["dataset"] == d for p in pre)]
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.6 * len(datasets), 3.6), squeeze=False, sharey=True)
    for ax, d in zip(axes[0], datasets):
        for i, m in enumerate(summary["methods"]):
            pts = sorted((pos[p["epsilon"]], p["auc_adapted"]) for p in pre
                         if p["dataset"] == d and p["method"] == m and p["auc_adapted"] is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i % 10}", label=m)
        base = [p["auc_base"] for p in pre if p["dataset"] == d and p["auc_base"] is not None]
        if base:
            ax.axhline(sum(base) / len(base), color="0.4", lw=1.0, ls="--", label="base model")
        ax.set_xticks(range(len(labels)), [epsilon_display(e) for e in labels])
        ax.set_xlabel("ε")
        ax.set_title(f"after adapting on {d} data")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("pre-training data AUC")
    fig.suptitle("Leakage of the pre-training data after private adaptation (dashed: before)")
    fig.tight_layout()
    return save_figure(fig, out)
