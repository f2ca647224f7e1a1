"""One table of every run of the cube: params + train metrics + score metrics (polars)."""

from __future__ import annotations

import math
from pathlib import Path

from empriv.config import ConfigError, Params
from empriv.io import parse_float, read_json

TRAIN_COLUMNS = ("noise_multiplier", "sample_rate", "delta", "epsilon_prv", "epsilon_rdp", "accountant", "sampler",
                 "method", "final_loss", "wall_time_s")
SCORE_COLUMNS = ("test_nll", "exposure_gap_mean", "exposure_gap_worst", "exposure_gap_vs_base_mean",
                 "exposure_gap_vs_base_worst", "continuation_nll_mean",
                 "continuation_nll_worst", "vmr_mean", "vmr_worst")


def run_table(params: Params, train_dir: str | Path = "metrics/train", score_dir: str | Path = "metrics/score"):
    """Rows for exactly the runs of the current cube (stale files of removed configurations are ignored)."""
    import polars as pl

    rows = []
    missing = []
    for run in params.runs():
        tpath, spath = Path(train_dir) / f"{run.name}.json", Path(score_dir) / f"{run.name}.json"
        if not (tpath.exists() and spath.exists()):
            missing.append(run.name)
            continue
        t, s = read_json(tpath), read_json(spath)
        row = {
            "config": run.name,
            "group": run.group,
            "epsilon": run.epsilon,
            "batch_size": run.batch_size,
            "steps": run.steps,
            "learning_rate": run.learning_rate,
            "seed": run.seed,
            "compute": run.batch_size * run.steps,  # C = b·T
            "update": run.batch_size * run.steps * run.learning_rate,  # U = C·η
        }
        for k in TRAIN_COLUMNS:
            v = t.get(k)
            row[k] = parse_float(v) if k.startswith("epsilon_") and v is not None else v
        for k in SCORE_COLUMNS:
            row[k] = s.get(k)
        rows.append(row)
    if missing:
        raise ConfigError(f"missing train/score metrics for {len(missing)} configuration(s), e.g. {missing[:3]}: run dvc repro")
    return pl.DataFrame(rows, infer_schema_length=None)


def epsilon_label(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"
