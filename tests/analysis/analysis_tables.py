"""A constructed run table shaped like records/runs.csv (no pipeline needed)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl


def make_run_table(epsilons=(2.0, 8.0, math.inf), seeds=(0, 1), seed=0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for e in epsilons:
        scale = 1.0 if math.isinf(e) else e / 8
        for b in (64, 128):
            for t in (16, 32):
                for lr in (0.005, 0.01):
                    for s in seeds:
                        gap = scale * (0.2 * math.log(b) + 0.6 * math.log(t) + 1.0 * math.log(lr / 0.001)) + 0.05 * rng.normal()
                        nll = 1.5 - 0.05 * math.log(b * t * lr) + 0.01 * rng.normal()
                        name = f"eps{'inf' if math.isinf(e) else f'{e:g}'}-b{b}-T{t}-lr{lr:g}"
                        rows.append({"config": f"{name}-s{s}", "group": name, "epsilon": e, "batch_size": b, "steps": t,
                                     "learning_rate": lr, "seed": s, "compute": b * t, "update": b * t * lr,
                                     "test_nll": nll, "exposure_gap_mean": gap, "exposure_gap_worst": 2 * gap,
                                     "vmr_mean": 0.0, "acr_mean": (gap / 3 if s == 0 else None), "air_mean": None})
    return pl.DataFrame(rows, schema_overrides={"acr_mean": pl.Float64, "air_mean": pl.Float64})


def make_method_table(methods=("full", "lora"), epsilons=(2.0, 8.0, math.inf), seeds=(0, 1)) -> pl.DataFrame:
    """:func:`make_run_table` once per adaptation method, as run_table builds it for a cube with a method axis: a
    ``method`` column, ``trainable_parameters``, groups ending in ``-<method>``; each further method memorises less
    (gap × 0.5, 0.25 …) and is less useful (NLL + 0.3 per step)."""
    parts = []
    for i, m in enumerate(methods):
        t = make_run_table(epsilons=epsilons, seeds=seeds, seed=i)
        parts.append(t.with_columns(
            (pl.col("group") + f"-{m}").alias("group"), (pl.col("config") + f"-{m}").alias("config"),
            pl.lit(m).alias("method"), pl.lit(1000 // (i + 1)).alias("trainable_parameters"),
            (pl.col("exposure_gap_mean") * 0.5 ** i).alias("exposure_gap_mean"),
            (pl.col("test_nll") + 0.3 * i).alias("test_nll")))
    return pl.concat(parts) if len(parts) > 1 else parts[0]
