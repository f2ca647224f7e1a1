"""Experiments as a results table: ``dvc exp show --json`` parsed into one row per experiment.

``dvc exp show`` prints a column for every params key (≈ 110) and every dependency (≈ 150 on the default DAG), and DVC
has no setting to hide them. ``empriv exps`` prints the table a researcher reads instead: the experiment, the params
that differ between the experiments shown, and the headline metrics of ``metrics/summary.json`` (per ε group: the
mean of each score, the utility and the audit's ε̂). ``--all-metrics`` adds std/worst/counts; ``--csv``/``--json``
for scripts.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

from empriv import paths

SUMMARY = paths.SUMMARY.as_posix()  # the keys of `dvc exp show --json`: paths relative to the project root
PARAMS = paths.PARAMS.as_posix()


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _states(entries: list[dict]):
    """Every (label, rev, data, error) of ``dvc exp show --json``: the workspace, the baseline commits and their
    experiments, in DVC's order. An experiment that failed or is still queued has an error or no metrics."""
    for entry in entries:
        yield entry.get("name") or entry.get("rev"), entry.get("rev"), entry.get("data") or {}, entry.get("error")
        for exp in entry.get("experiments") or []:
            executor = exp.get("executor") or {}
            for rev in exp.get("revs") or []:
                name = rev.get("name") or exp.get("name") or (rev.get("rev") or "")[:7]
                error = rev.get("error")
                if not error and isinstance(executor, dict) and executor.get("state") in ("failed", "queued", "running"):
                    error = executor["state"]
                yield name, rev.get("rev"), rev.get("data") or {}, error


def exp_rows(entries: list[dict], *, all_metrics: bool = False) -> list[dict]:
    """One row per experiment (and the workspace and baseline): ``experiment``, ``rev``, every params key
    (flattened, ``cube.epsilon``) and the summary's metrics: per ε group the configuration count, each score's mean
    (``eps8.exposure_gap_mean``) and the audit's ε̂ (with ``all_metrics``: every key, std/worst/n included). Lists (the cube's grids) are kept as lists."""
    rows = []
    for label, rev, data, error in _states(entries):
        row: dict[str, Any] = {"experiment": label, "rev": rev}
        if error:
            row["error"] = error if isinstance(error, str) else json.dumps(error)[:200]
        params = ((data.get("params") or {}).get(PARAMS) or {}).get("data") or {}
        row.update({f"params:{k}": v for k, v in _flatten(params).items()})
        metrics = ((data.get("metrics") or {}).get(SUMMARY) or {}).get("data") or {}
        for k, v in _flatten(metrics).items():
            if all_metrics:
                row[k] = v
            elif k.startswith("eps") and k.endswith(".mean"):
                row[k.removesuffix(".mean")] = v  # eps8.exposure_gap_mean: the mean over configurations
            elif k.startswith("eps") and k.endswith((".audit_eps_lb_95", ".n_configs")):
                row[k] = v
            elif not k.startswith("eps") and k.count(".") == 0:
                row[k] = v  # n_runs, n_configs, base_test_nll
        rows.append(row)
    return rows


def table_columns(rows: list[dict], *, all_params: bool = False) -> list[str]:
    """``experiment``, then the params whose values differ across ``rows`` (all of them with ``all_params``), then the
    metrics in first-seen order."""
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    params = [k for k in keys if k.startswith("params:")]
    if not all_params:
        params = [k for k in params if len({json.dumps(r.get(k), sort_keys=True) for r in rows}) > 1]
    metrics = [k for k in keys if not k.startswith("params:") and k not in ("experiment", "rev", "error")]
    errors = ["error"] if any("error" in r for r in rows) else []
    return ["experiment", *params, *metrics, *errors]


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ",".join(_cell(x) for x in v) + "]"
    return str(v)


def format_table(rows: list[dict], columns: list[str]) -> str:
    header = [c.removeprefix("params:") for c in columns]
    body = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def dvc_exp_show(root: str | Path = ".", extra: list[str] | None = None) -> list[dict]:
    """``dvc exp show --json`` of the project at ``root`` (the baseline commit's experiments by default)."""
    import shutil
    import sys

    local = Path(sys.executable).parent / "dvc"  # the dvc of this environment, even when it is not on PATH
    dvc = str(local) if local.exists() else shutil.which("dvc")
    if dvc is None:
        raise ValueError("dvc is not installed in this environment (run `make venv`)")
    proc = subprocess.run([dvc, "exp", "show", "--json", *(extra or [])], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ValueError(f"dvc exp show failed in {root}: {last}")
    return json.loads(proc.stdout)
