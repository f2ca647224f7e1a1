"""The research's Fig. 5 (a–c): one hyperparameter varies, the other two are held at a reference value.

Three panels — vary b, vary T, vary η — each a line per ε of the score's seed mean (± seed std) against the varied
hyperparameter, over the configurations whose other two hyperparameters equal the reference. The **reference** of an
axis is the middle of its distinct values in the cube (sorted; the upper of the two middle ones for an even count —
with two values per axis, the larger: the configurations that train most, where memorisation registers first).
Every configuration of the cube counts, before the retention rule (the case study is about the effect of a
hyperparameter, and a low-utility configuration is part of it); each point says whether the rule kept it.
A cube with one value on an axis has nothing to vary there: that panel is empty and says why; so is an ε whose
cube lacks the reference configurations (a partial sweep) or where fewer than two of them have a value.
"""

from __future__ import annotations

import math

AXES = ("batch_size", "steps", "learning_rate")
AXIS_SYMBOLS = {"batch_size": "b", "steps": "T", "learning_rate": "η"}
REFERENCE_RULE = ("the middle of the axis' distinct values in the cube (the upper of the two middle ones for an even "
                  "count), the other two axes held there")


def reference_values(configs) -> dict:
    """Per hyperparameter axis present in ``configs``: the reference value (see the module docstring)."""
    out = {}
    for axis in AXES:
        if axis not in configs.columns:
            continue
        values = sorted({v for v in configs[axis].to_list() if v is not None})
        if values:
            out[axis] = values[len(values) // 2]
    return out


def one_at_a_time(configs, score: str | None, *, kept_groups=None) -> dict:
    """The three panels' data for ``score`` from the configuration table (seed means; every configuration, before
    the retention rule; ``kept_groups``: the groups the rule kept, marked ``kept`` per point, None = unknown).

    Returns ``score``, ``reference`` (axis → value), ``reference_rule`` and ``panels`` (one per axis, in the order
    b, T, η): ``vary`` (axis), ``held`` (the other axes' reference values), ``lines`` (ε label → points sorted by
    the varied value: ``config``, ``value`` of the varied axis, ``mean``, ``seed_std``, ``n_seeds``, ``kept``) and
    ``reason`` when the panel or an ε has no line (``missing``: ε label → why)."""
    import polars as pl

    from empriv.analysis.table import epsilon_label

    if not score or score not in configs.columns:
        return {}
    ref = reference_values(configs)
    out = {"score": score, "reference": ref, "reference_rule": REFERENCE_RULE, "panels": []}
    missing_axes = [a for a in AXES if a not in ref]
    std_col, n_col = f"{score}__seed_std", f"{score}__n_seeds"
    eps_values = sorted(configs["epsilon"].unique().to_list())
    for axis in AXES:
        panel: dict = {"vary": axis, "held": {}, "lines": {}, "missing": {}, "reason": None}
        out["panels"].append(panel)
        if axis in missing_axes or missing_axes:
            panel["reason"] = f"no {', '.join(missing_axes)} column in the run table"
            continue
        others = [a for a in AXES if a != axis]
        panel["held"] = {a: ref[a] for a in others}
        distinct = sorted(set(configs[axis].to_list()))
        if len(distinct) < 2:
            panel["reason"] = f"the cube has one {AXIS_SYMBOLS[axis]} ({axis_value_text(distinct[0])}): nothing to vary"
            continue
        for eps in eps_values:
            label = epsilon_label(eps)
            g = configs.filter((pl.col("epsilon") == eps) & pl.all_horizontal([pl.col(a) == ref[a] for a in others]))
            g = g.with_columns(pl.col(score).cast(pl.Float64).fill_nan(None).alias("__y"))
            has = g.filter(pl.col("__y").is_not_null()).sort(axis)
            if has.height < 2:
                held = ", ".join(f"{AXIS_SYMBOLS[a]} = {axis_value_text(ref[a])}" for a in others)
                panel["missing"][label] = (f"{g.height} configuration(s) with {held}, {has.height} with a value of "
                                           f"{score} (need two)")
                continue
            panel["lines"][label] = [
                {"config": r.get("group"), "value": r[axis], "mean": float(r["__y"]),
                 "seed_std": _nan_none(r.get(std_col)), "n_seeds": r.get(n_col, r.get("n_seeds")),
                 "kept": None if kept_groups is None else r.get("group") in kept_groups}
                for r in has.iter_rows(named=True)]
        if not panel["lines"]:
            panel["reason"] = "no ε has two configurations at the reference with a value"
    return out


def axis_value_text(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _nan_none(x):
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x
