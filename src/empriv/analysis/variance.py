"""Per-ε statistics across configurations: the research's empirical privacy variance.

Runs are first averaged over seeds within each configuration (ε, b, T, η); then, per ε, the mean
and standard deviation across configurations of every score, and — to tell configuration effects
from training noise — the mean within-configuration standard deviation across seeds.
"""

from __future__ import annotations

import math

from empriv.analysis.table import epsilon_label


def summarize(table, scores: list[str]) -> dict:
    import polars as pl

    missing = [s for s in scores if s not in table.columns]
    if missing:
        raise ValueError(f"analyze.scores names unknown columns {missing}; available: {table.columns}")
    per_config = table.group_by(["epsilon", "group"]).agg(
        *[pl.col(s).mean().alias(s) for s in scores],
        *[pl.col(s).std(ddof=1).alias(f"{s}__seed_std") for s in scores],
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
                "std_across_configs": float(col.std(ddof=1)) if col.len() > 1 else None,
                "min": float(col.min()) if col.len() else None,
                "max": float(col.max()) if col.len() else None,
                "mean_seed_std": _nan_none(g[f"{s}__seed_std"].drop_nulls().mean()),
            }
        out[epsilon_label(eps)] = entry
    return out


def _nan_none(x):
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def format_summary(summary: dict, scores: list[str]) -> str:
    """A readable table: one row per ε, mean ± std across configurations for each score."""
    head = ["eps", "configs"] + scores
    lines = []
    rows = [head]
    for eps, entry in summary.items():
        row = [eps, str(entry["n_configs"])]
        for s in scores:
            v = entry[s]
            if v["mean"] is None:
                row.append("n/a")
                continue
            cell = f"{v['mean']:.3f}"
            if v["std_across_configs"] is not None:
                cell += f" ± {v['std_across_configs']:.3f}"
            if v.get("mean_seed_std") is not None:
                cell += f" [{v['mean_seed_std']:.3f}]"
            row.append(cell)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("mean ± std across configurations at each ε (seeds averaged first) "
                 "[mean std across seeds within a configuration]")
    return "\n".join(lines)
