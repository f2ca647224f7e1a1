"""One table of every run of the cube: params + train metrics + score metrics (+ audit metrics), polars.

Also the per-configuration view (seed means and seed standard deviations) and the research's
retention rule (keep configurations achieving ≥ 90 % of the utility gain from the base model to the
best run).

Record layouts (both are read, so a tree written before the cube had a method axis still loads):

- ``<kind>/<unit>/<method>/<point>.json`` — the cube's ``method`` axis; the run's name is
  ``<point>[-<unit suffix>]-<method>``;
- ``<kind>/<unit>/<point>.json`` — one method per cube; the method is the record's ``method`` key ("full"
  when it has none). Such a file stands for a run of another method only if its ``method`` says so.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from empriv.config import ConfigError, Params
from empriv.io import parse_float, read_json

TRAIN_COLUMNS = ("noise_multiplier", "sample_rate", "delta", "epsilon_prv", "epsilon_rdp", "accountant", "sampler",
                 "final_loss", "wall_time_s",
                 # user-level units (null for record-level runs): the guarantee's ε and the number of units
                 "epsilon_user_level", "n_units")
# Score columns listed first (in this order) when present; every other top-level numeric scalar of the
# score JSON follows in sorted order (ACR, AIR, greedy VMR … as the score stage adds them).
SCORE_COLUMNS = ("test_nll", "exposure_gap_mean", "exposure_gap_worst", "exposure_gap_vs_base_mean",
                 "exposure_gap_vs_base_worst", "continuation_nll_mean",
                 "continuation_nll_worst", "vmr_mean", "vmr_worst")
# Keys of a score/audit JSON that describe the run rather than measure it (never taken as columns).
NON_SCORE_KEYS = frozenset({"config", "epsilon", "batch_size", "steps", "learning_rate", "seed", "wall_time_s",
                            "per_secret", "per_canary", "method", "unit", "trainable_parameters"})
DEFAULT_METHOD = "full"  # the method of a record that names none (written before methods were recorded)
CONFIG_KEYS = ("epsilon", "batch_size", "steps", "learning_rate")
UTILITY = "test_nll"


def _numeric(v: Any) -> float | int | None | type(NotImplemented):
    """A JSON value as a number (None stays None, "inf"/"nan" strings parse); NotImplemented if not a number."""
    if v is None:
        return None
    if isinstance(v, bool):
        return NotImplemented
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str) and v.strip().lower() in ("inf", "-inf", "+inf", "nan", "infinity", "-infinity"):
        return parse_float(v)
    return NotImplemented


def numeric_scalars(metrics: dict, skip: frozenset[str] | set[str] = NON_SCORE_KEYS) -> dict[str, float | None]:
    """Every top-level numeric scalar (or null) of a metrics JSON, except ``skip``."""
    out = {}
    for k, v in metrics.items():
        if k in skip:
            continue
        x = _numeric(v)
        if x is not NotImplemented:
            out[k] = None if x is None else float(x)
    return out


def record_method(record: dict, default: str = DEFAULT_METHOD) -> str:
    """The adaptation method a run record names: its ``method`` key, else its ``train`` facts' (audit records),
    else ``default``."""
    m = record.get("method")
    if not m and isinstance(record.get("train"), dict):
        m = record["train"].get("method")
    return str(m) if m else default


def run_methods(params: Params, run) -> list[str | None]:
    """The methods a run of the cube is trained with: the run's own ``method`` (a cube with a method axis), else
    every ``cube.method`` when the cube lists them, else ``[None]`` (one method, named by the records)."""
    m = getattr(run, "method", None)
    if m:
        return [str(m)]
    listed = getattr(getattr(params, "cube", None), "method", None)
    if isinstance(listed, (list, tuple)) and listed:
        return [str(x) for x in listed]
    return [None]


def run_name(run, method: str | None) -> str:
    """The run's name: ``run.name`` (which carries the method when the run has one), else ``<name>-<method>``."""
    if method is None or getattr(run, "method", None):
        return run.name
    return f"{run.name}-{method}"


def base_group(run) -> str:
    """The configuration without seed and method: ``eps…-b…-T…-lr…[-<unit suffix>]``."""
    return run.point_name.rsplit("-s", 1)[0] + run.privacy_unit.suffix


def find_record(directory: str | Path, run, method: str | None, default_method: str | None = None) -> Path | None:
    """The record of ``run`` (trained with ``method``) below ``directory``, in either layout, or None.

    New layout: ``<unit>/<method>/<point>.json``; old: ``<unit>/<point>.json`` (also ``run.file_stem``), which stands
    for ``method`` only if the record's method (its ``method`` key, else ``default_method``, else "full") is
    ``method``. ``method`` None: whatever the old-layout file holds."""
    d = Path(directory)
    stem = getattr(run, "file_stem", None)
    new, old = [], [d / run.unit / f"{run.point_name}.json"]
    if method is not None:
        new.append(d / run.unit / method / f"{run.point_name}.json")
    if stem:
        (new if method is not None and stem.count("/") >= 2 else old).insert(0, d / f"{stem}.json")
    for path in dict.fromkeys(new):
        if path.exists():
            return path
    for path in dict.fromkeys(old):
        if path.exists():
            if method is None or record_method(read_json(path), default_method or DEFAULT_METHOD) == method:
                return path
    return None


def run_table(params: Params, train_dir: str | Path, score_dir: str | Path, audit_dir: str | Path | None = None):
    """Rows for exactly the runs of the current cube (stale files of removed configurations are ignored).

    One row per run and adaptation method, with ``method`` and ``trainable_parameters`` (null when the train record
    lacks it). ``group`` is the configuration without its seed; with more than one method in the table it ends in
    ``-<method>`` (so each method's configurations stay apart); with one method it is as before methods existed.
    Score columns: every top-level numeric scalar of the score record (missing or null → null).
    Audit columns (``audit_…``): joined by configuration, whatever the seeds (:func:`configuration_audit`): every run
    of a configuration carries the audit of that configuration, so the main cube's seeds can change and its audit
    rows stay. Both record layouts are read (module docstring).
    """
    import polars as pl

    rows, missing = [], []
    score_keys: dict[str, None] = dict.fromkeys(SCORE_COLUMNS)
    audit_keys: dict[str, None] = {}
    for run, method, run_method, t, spath in _cube_records(params, train_dir, score_dir):
        if t is None or spath is None:
            missing.append(run_name(run, method))
            continue
        s = read_json(spath)
        trainable = _numeric(t.get("trainable_parameters", s.get("trainable_parameters")))
        row: dict[str, Any] = {
            "config": run_name(run, method),
            "group": base_group(run),
            "epsilon": float(run.epsilon),
            "batch_size": run.batch_size,
            "steps": run.steps,
            "learning_rate": float(run.learning_rate),
            "seed": run.seed,
            "unit": run.unit,  # the privacy unit (record, group-k5-longest, userwise-k10-chunk)
            "method": run_method,  # the adaptation method (full, lora, prefix, prompt, head, dpflat …)
            "trainable_parameters": (int(trainable) if isinstance(trainable, (int, float))
                                     and math.isfinite(trainable) else None),
            "compute": run.batch_size * run.steps,  # C = b·T
            "update": run.batch_size * run.steps * run.learning_rate,  # U = C·η
        }
        for k in TRAIN_COLUMNS:
            v = t.get(k)
            row[k] = parse_float(v) if k.startswith("epsilon_") and v is not None else v
        scores = numeric_scalars(s, NON_SCORE_KEYS | set(row))
        score_keys.update(dict.fromkeys(scores))
        row["__scores"] = scores
        audit = (configuration_audit(params, audit_dir, run, method, run_method, NON_SCORE_KEYS | set(row) | set(scores))
                 if audit_dir is not None else {})
        audit_keys.update(dict.fromkeys(audit))
        row["__audit"] = audit
        rows.append(row)
    if missing:
        raise ConfigError(f"missing train/score metrics for {len(missing)} configuration(s), e.g. {missing[:3]}: run dvc repro")
    if len({r["method"] for r in rows}) > 1:
        for row in rows:
            row["group"] = f"{row['group']}-{row['method']}"
    ordered = list(SCORE_COLUMNS) + sorted(k for k in score_keys if k not in SCORE_COLUMNS)
    audit_cols = sorted(audit_keys)
    for row in rows:
        scores, audit = row.pop("__scores"), row.pop("__audit")
        for k in ordered:
            row[k] = scores.get(k)
        for k in audit_cols:
            row[k] = audit.get(k)
    schema_overrides = {k: pl.Float64 for k in ordered + audit_cols}
    schema_overrides["trainable_parameters"] = pl.Int64
    return pl.DataFrame(rows, infer_schema_length=None, schema_overrides=schema_overrides)


def audit_seeds(params: Params) -> list[int]:
    """The seeds of the audit cube (the audit trains its own models: its seeds are not the main cube's)."""
    cube = getattr(getattr(params, "audit", None), "cube", None)
    return list(dict.fromkeys(int(s) for s in (getattr(cube, "seed", None) or [0])))


def configuration_audit(params: Params, audit_dir: str | Path, run, method: str | None, run_method: str,
                        skip: frozenset[str] | set[str]) -> dict[str, float | None]:
    """The audit of ``run``'s configuration (same ε, b, T, η, unit and method; any seed of the audit cube,
    :func:`audit_seeds`): every numeric scalar of its audit records but ``skip``, averaged over the audit seeds with
    a record (null where none has a value); ``{}`` when the configuration was not audited. The main cube's seed plays
    no part: re-seeding the cube (``cube.seed``) keeps the audit joined."""
    from dataclasses import replace

    records = []
    for seed in audit_seeds(params):
        path = find_record(audit_dir, replace(run, seed=seed), method, default_method=run_method)
        if path is not None:
            records.append(numeric_scalars(read_json(path), skip))
    if len(records) <= 1:
        return records[0] if records else {}
    out: dict[str, float | None] = {}
    for key in dict.fromkeys(k for r in records for k in r):
        vals = [r[key] for r in records if r.get(key) is not None and not math.isnan(r[key])]
        out[key] = sum(vals) / len(vals) if vals else None
    return out


def _cube_records(params: Params, train_dir: str | Path, score_dir: str | Path):
    """(run, method, the run's method, its train record or None, its score record's path or None) of every run of the
    current cube and method, located as :func:`run_table` reads them."""
    for run in params.runs():
        for method in run_methods(params, run):
            tpath = find_record(train_dir, run, method)
            t = read_json(tpath) if tpath is not None else None
            run_method = method or (record_method(t) if t is not None else DEFAULT_METHOD)
            yield run, method, run_method, t, find_record(score_dir, run, method, default_method=run_method)


def score_records(params: Params, train_dir: str | Path, score_dir: str | Path,
                  configs: set[str] | None = None) -> list[dict]:
    """The score record (the score stage's JSON, ``per_secret`` rows included) of every run of the current cube
    (``params.runs()``: stale files of removed configurations are not read), found as :func:`run_table` finds them;
    ``configs``: only the runs of these names (the run table's ``config``). A run without records is left out
    (:func:`run_table` is the one that says so)."""
    out = []
    for run, method, _, t, spath in _cube_records(params, train_dir, score_dir):
        if t is not None and spath is not None and (configs is None or run_name(run, method) in configs):
            out.append(read_json(spath))
    return out


def audit_runs_outside_cube(params: Params, audit_dir: str | Path, table=None) -> list[str]:
    """Names of the audit cube's runs that have an audit record but no configuration in the main cube (the same ε,
    b, T, η, unit and method at any seed: ``table``'s ``config`` column, or ``params.runs()``): they have no
    memorisation scores to correlate with."""
    def configuration(name: str) -> str:  # the run's name without its seed
        return re.sub(r"-s\d+(?=-|$)", "", name, count=1)

    if table is not None:
        names = {configuration(n) for n in table["config"].to_list()}
    else:
        names = {configuration(run_name(r, m)) for r in params.runs() for m in run_methods(params, r)}
    audit_params = getattr(params, "audit", None)
    out = []
    for run in params.audit_runs():
        methods = [getattr(run, "method", None)] if getattr(run, "method", None) else None
        if methods is None:
            listed = getattr(getattr(audit_params, "cube", None), "method", None)
            methods = [str(x) for x in listed] if isinstance(listed, (list, tuple)) and listed else [None]
        for m in methods:
            name = run_name(run, m)
            if configuration(name) not in names and find_record(audit_dir, run, m) is not None:
                out.append(name)
    return out


def read_run_table(path: str | Path):
    """``records/runs.csv`` (or a user's own table with the same columns) as a polars DataFrame.

    Needs ``epsilon``, ``batch_size``, ``steps``, ``learning_rate``; ``seed``, ``compute``, ``update`` and
    ``group`` are derived when absent. ``epsilon`` may be ``inf``.
    """
    import polars as pl

    path = Path(path)
    if not path.exists():
        raise ValueError(f"run table {str(path)!r} does not exist (the analyze stage writes records/runs.csv)")
    table = pl.read_csv(path, infer_schema_length=None)
    return normalize_run_table(table, source=str(path))


def normalize_run_table(table, source: str = "run table"):
    import polars as pl

    need = [c for c in CONFIG_KEYS if c not in table.columns]
    if need:
        raise ValueError(f"{source} lacks column(s) {need}; it has {table.columns}")
    if table.schema["epsilon"] == pl.String:
        table = table.with_columns(pl.col("epsilon").map_elements(parse_float, return_dtype=pl.Float64))
    table = table.with_columns(pl.col("epsilon").cast(pl.Float64), pl.col("learning_rate").cast(pl.Float64))
    if "seed" not in table.columns:
        table = table.with_columns(pl.lit(0).alias("seed"))
    if "unit" not in table.columns:
        table = table.with_columns(pl.lit("record").alias("unit"))
    if "method" not in table.columns:
        table = table.with_columns(pl.lit(DEFAULT_METHOD).alias("method"))
    if "compute" not in table.columns:
        table = table.with_columns((pl.col("batch_size") * pl.col("steps")).alias("compute"))
    if "update" not in table.columns:
        table = table.with_columns((pl.col("batch_size") * pl.col("steps") * pl.col("learning_rate")).alias("update"))
    if "group" not in table.columns:
        table = table.with_columns(pl.struct(list(CONFIG_KEYS)).map_elements(
            lambda r: f"eps{epsilon_label(r['epsilon'])}-b{r['batch_size']}-T{r['steps']}-lr{r['learning_rate']:g}",
            return_dtype=pl.String).alias("group"))
        if table["method"].n_unique() > 1:  # each method's configurations apart, as run_table names them
            table = table.with_columns((pl.col("group") + "-" + pl.col("method")).alias("group"))
    return table


def require_columns(table, columns: list[str] | tuple[str, ...], what: str = "score") -> None:
    """Raise ``ValueError`` naming every unknown column and listing the numeric ones that exist."""
    import polars as pl

    unknown = [c for c in columns if c not in table.columns]
    if unknown:
        numeric = [c for c, t in table.schema.items() if t.is_numeric() and c not in ("seed",)]
        raise ValueError(f"unknown {what} column(s) {unknown}; numeric columns in the table: {numeric}")
    bad = [c for c in columns if not (table.schema[c].is_numeric() or table.schema[c] == pl.Null)]
    if bad:
        raise ValueError(f"{what} column(s) {bad} are not numeric")


def available(table, column: str) -> bool:
    """True if ``column`` exists and has at least one non-null, non-NaN value."""
    import polars as pl

    if column not in table.columns:
        return False
    col = table[column]
    if col.dtype == pl.Null:
        return False
    col = col.cast(pl.Float64, strict=False).drop_nulls()
    return col.len() > 0 and not bool(col.is_nan().all())


def config_table(table, columns: list[str], by: list[str] | None = None):
    """One row per configuration: the seed mean of each column and its seed standard deviation
    (``<col>__seed_std``, ddof = 1; null with a single seed), the number of seeds with a value of it
    (``<col>__n_seeds``), and ``n_seeds`` (runs of the configuration).

    Grouped by ``group`` plus the hyperparameters (ε, b, T, η, C, U) and any extra ``by`` columns
    (e.g. base model, data variant) that exist in the table; ``unit`` and ``method`` (constant within a group) are
    carried along, and ``trainable_parameters`` (one number per method) as its largest value over the seeds.
    """
    import polars as pl

    keys = ["group", *CONFIG_KEYS, "compute", "update", "unit", "method",
            *[c for c in (by or []) if c in table.columns and c != "group"]]
    keys = list(dict.fromkeys(k for k in keys if k in table.columns))
    aggs = []
    for c in dict.fromkeys(columns):
        x = pl.col(c).cast(pl.Float64).fill_nan(None)
        aggs += [x.mean().alias(c), x.std(ddof=1).alias(f"{c}__seed_std"), x.is_not_null().sum().alias(f"{c}__n_seeds")]
    if "trainable_parameters" in table.columns and "trainable_parameters" not in keys and "trainable_parameters" not in columns:
        aggs.append(pl.col("trainable_parameters").max())
    out = table.group_by(keys, maintain_order=True).agg(*aggs, pl.len().alias("n_seeds"))
    return out.sort(["epsilon", "batch_size", "steps", "learning_rate"])


def retention_filter(configs, base_utility: float | None, fraction: float = 0.9, utility: str = UTILITY,
                     by: str = "epsilon"):
    """The research's retention rule, per ``by`` group (ε): keep configurations whose utility gain over the
    base model is ≥ ``fraction`` × the best configuration's gain (utility = test NLL, lower is better:
    gain = base − NLL). Returns (kept table, info per group).

    The rule is not applied (everything is kept, and ``info[...]['applied']`` is False with a reason) when the
    base utility is unknown or no configuration improves on the base model (gain ≤ 0).
    """
    import polars as pl

    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"retention fraction must be in [0, 1], got {fraction}")
    require_columns(configs, [utility], "utility")
    kept, info = [], {}
    for key in sorted(configs[by].unique().to_list()):
        g = configs.filter(pl.col(by) == key)
        label = epsilon_label(key) if by == "epsilon" else str(key)
        u = g[utility].cast(pl.Float64)
        best = u.min()
        entry = {"n_configs": g.height, "base_utility": base_utility, "best_utility": best, "fraction": fraction}
        if base_utility is None or best is None or not math.isfinite(float(base_utility)):
            entry.update(applied=False, reason="base model utility unknown", threshold=None, n_kept=g.height)
            kept.append(g)
        elif base_utility - best <= 0:
            entry.update(applied=False, threshold=None, n_kept=g.height,
                         reason=f"no configuration improves on the base model's utility ({base_utility:.4g}; "
                                f"best {best:.4g}): rule not applicable, all kept")
            kept.append(g)
        else:
            threshold = base_utility - fraction * (base_utility - best)  # NLL ≤ threshold ⟺ gain ≥ fraction·best gain
            k = g.filter(pl.col(utility) <= threshold + 1e-12)
            entry.update(applied=True, reason=None, threshold=threshold, n_kept=k.height)
            kept.append(k)
        info[label] = entry
    out = pl.concat(kept) if kept else configs.clear()
    return out, info


def epsilon_label(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:g}"


def main_method(methods) -> str | None:
    """The method the research's per-configuration analysis (regression, heuristics, selection) covers when a table
    holds several: full fine-tuning when present (the research's setting), else the first listed."""
    methods = [m for m in dict.fromkeys(methods) if m is not None]
    if not methods:
        return None
    return DEFAULT_METHOD if DEFAULT_METHOD in methods else methods[0]


def table_methods(table) -> list[str]:
    """The distinct methods of a run or configuration table, in order of appearance ([] without a method column)."""
    if "method" not in table.columns:
        return []
    return [m for m in dict.fromkeys(table["method"].to_list()) if m is not None]
