"""The analyze stage: metrics/runs.csv and metrics/summary.json (DVC metrics)."""

from __future__ import annotations

import logging
from pathlib import Path

from empriv.config import Params
from empriv.io import atomic_path, write_json

log = logging.getLogger("empriv.analyze")


def analyze(params: Params, out_dir: str | Path = "metrics") -> dict:
    from empriv.analysis.table import run_table
    from empriv.analysis.variance import format_summary, summarize

    table = run_table(params)
    scores = list(params.analyze.scores)
    summary = {"scores": scores, "per_epsilon": summarize(table, scores), "n_runs": table.height}
    with atomic_path(Path(out_dir) / "runs.csv") as tmp:
        table.write_csv(tmp)
    write_json(Path(out_dir) / "summary.json", summary)
    print(format_summary(summary["per_epsilon"], scores))
    return summary
