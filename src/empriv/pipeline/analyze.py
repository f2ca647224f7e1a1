"""analyze: every run in one table → records/runs.csv; per-ε statistics of every score (and ACR by secret frequency,
frequent and rare secrets apart) → records/scores_by_epsilon.json; the research's analysis → records/analysis.json;
the DVC metrics (compact, numbers only: metrics/summary.json, metrics/configs.json, metrics/analysis.json; see
empriv.analysis.metrics); plots/analysis/ (PNGs + DVC plot data) and the self-contained reports/report.html."""

from __future__ import annotations

from pathlib import Path

from empriv import paths
from empriv.config import Params
from empriv.analysis.bootstrap import REPLICATES as BOOTSTRAP_REPLICATES
from empriv.io import read_json, write_json
from empriv.pipeline.staged_outputs import StagedOutputs

# Facts of each run's training shown in the report's assumptions table.
ASSUMPTION_KEYS = ("config", "epsilon", "sampler", "accountant", "requested_accountant", "accountant_fallback_reason",
                   "delta", "noise_multiplier", "sample_rate", "epsilon_prv", "epsilon_rdp", "optimizer", "clip_norm",
                   "method", "unnoised_outputs", "empty_batches", "mean_batch_size", "n", "threads")


def assumptions(stems: list[str], train_dir: Path) -> list[dict]:
    """The accounting assumptions of each run's training record (``stems``: ``<unit>/<point>`` of each run)."""
    out = []
    for stem in stems:
        path = Path(train_dir) / f"{stem}.json"
        if path.exists():
            m = read_json(path)
            out.append({k: m[k] for k in ASSUMPTION_KEYS if k in m})
    return out


def base_utility(params: Params, path: Path) -> float | None:
    """analyze.base_utility, or the base model's own utility from records/base.json."""
    if params.analyze.base_utility is not None:
        return float(params.analyze.base_utility)
    if Path(path).exists():
        v = read_json(path).get(params.analyze.utility)
        return float(v) if v is not None else None
    return None


def main(params: Params) -> dict:
    from empriv.analysis.figures import make_figures, write_plot_data
    from empriv.analysis.report import render_html, write_report
    import polars as pl

    from empriv.analysis.acr_frequency import acr_by_frequency
    from empriv.analysis.adaptation_audit import analyze_adaptation_audit
    from empriv.analysis.metrics import analysis_metrics, config_metrics, summary_metrics_by_unit
    from empriv.analysis.precision import round_metrics
    from empriv.analysis.stage import compute_analysis, format_analysis
    from empriv.analysis.table import audit_runs_outside_cube, run_table, score_records
    from empriv.analysis.variance import format_summary_record, summary_record

    with StagedOutputs() as out:  # a failure anywhere below, W&B included, leaves the previous outputs whole
        ap = params.analyze
        full = run_table(params, paths.TRAIN_METRICS_DIR, paths.SCORE_METRICS_DIR, paths.AUDIT_METRICS_DIR)
        # Privacy units (cube.unit): the research's analysis (variance, regression, heuristics, selection) compares
        # hyperparameters at one guarantee, so it runs on the runs of one unit — record-level when the cube has
        # them — and every unit gets its per-ε summary, side by side in the summary, the metrics and the report.
        units = list(dict.fromkeys(full["unit"].to_list()))
        main_unit = "record" if "record" in units else units[0]
        table = full.filter(pl.col("unit") == main_unit) if len(units) > 1 else full
        summary = summary_record(full, list(ap.scores), main_unit)  # per ε (and per unit / method when several)
        scores = summary["scores"]
        base = base_utility(params, paths.BASE_METRICS)
        analysis, configs = compute_analysis(
            table, privacy_scores=list(ap.privacy_scores), utility=ap.utility,
            base_utility=base, retention_fraction=ap.retention_fraction,
            monte_carlo_trials=ap.monte_carlo_trials, seed=ap.seed,
            audit_outside_cube=audit_runs_outside_cube(params, paths.AUDIT_METRICS_DIR, full),
            bootstrap_replicates=BOOTSTRAP_REPLICATES,  # the derived statistics' standard errors (empriv diff's)
            primary=ap.primary_score)
        # the adaptation audit (adaptation_audit.cube; none in the default run): its runs' attacks, per dataset ×
        # method × ε
        adaptation = analyze_adaptation_audit(paths.ADAPTATION_AUDIT_DIR, out.file(paths.ADAPTATION_AUDIT_TABLE))
        if adaptation is not None:
            analysis["adaptation_audit"] = adaptation
        if analysis.get("table8"):  # `empriv summary` prints it under the table: Table 8 of the primary score per ε
            summary["table8"] = analysis["table8"]
        # ACR per ε by secret frequency (frequent and rare secrets apart), over the runs of the summary's main table
        main_runs = table.filter(pl.col("method") == summary["method"]) if summary.get("method") else table
        analysis["acr_by_frequency"] = summary["acr_by_frequency"] = acr_by_frequency(
            score_records(params, paths.TRAIN_METRICS_DIR, paths.SCORE_METRICS_DIR,
                          configs=set(main_runs["config"].to_list())))
        if len(units) > 1:
            analysis["notes"].append(f"privacy units {', '.join(units)}: this analysis covers the {main_unit} runs; "
                                     "every unit's per-ε summary is in the 'Record- vs user-level' table and "
                                     "metrics/summary.json")
        profiles = paths.PROFILES_DIR
        plots = out.directory(paths.ANALYSIS_PLOTS_DIR)
        figures = make_figures(analysis, configs, plots)
        write_plot_data(analysis, configs, plots)
        html_text = render_html(
            analysis, figures, cube=params.cube.model_dump(), params=ap.model_dump(),
            assumptions=assumptions([r.file_stem for r in params.runs()], paths.TRAIN_METRICS_DIR),
            run_rows=(full.columns, [list(r) for r in full.iter_rows()]),
            units=unit_comparison(full.filter(pl.col("method") == analysis["methods"]["main"]) if "methods" in analysis
                                  else full, analysis["primary_score"], ap.utility) if len(units) > 1 else None,
            profile_images=sorted(profiles.glob("*.png")) if profiles.is_dir() else None)
        write_report(out.file(paths.REPORT), html_text)
        full.write_csv(out.file(paths.RUNS_TABLE))
        write_json(out.file(paths.SCORES_BY_EPSILON), summary)
        write_json(out.file(paths.ANALYSIS_DETAIL), analysis)
        # the DVC metrics to the digits their uncertainty supports (empriv.analysis.precision); exact values: records/
        write_json(out.file(paths.SUMMARY),
                   round_metrics(summary_metrics_by_unit(full, scores, ap.utility, base, main_unit)))
        write_json(out.file(paths.CONFIGS), round_metrics(config_metrics(full, analysis["primary_score"], ap.utility)))
        write_json(out.file(paths.ANALYSIS), round_metrics(analysis_metrics(analysis)))
        out.publish()  # every output in place at once; W&B (below) reads the published figures
        print(format_summary_record(summary))
        print(format_analysis(analysis))
        print(f"report: {paths.REPORT}")
        track_analysis(params, full, summary, analysis, configs)
    return summary


def unit_comparison(table, primary: str | None, utility: str) -> dict:
    """Record- vs user-level side by side: per ε and privacy unit, the configuration count, the mean (over
    configurations, seeds averaged first) and best of the utility, and the mean of the primary privacy score."""

    from empriv.analysis.table import config_table, epsilon_label

    columns = [c for c in dict.fromkeys([utility, primary]) if c and c in table.columns]
    configs = config_table(table, columns, by=["unit"])
    rows = []
    for (eps, unit), g in configs.group_by(["epsilon", "unit"], maintain_order=True):
        u = g[utility].drop_nulls() if utility in g.columns else None
        p = g[primary].drop_nulls() if primary and primary in g.columns else None
        rows.append([epsilon_label(eps), unit, g.height,
                     float(u.mean()) if u is not None and u.len() else None,
                     float(u.min()) if u is not None and u.len() else None,
                     float(p.mean()) if p is not None and p.len() else None])
    rows.sort(key=lambda r: (float(r[0]) if r[0] != "inf" else float("inf"), r[1] != "record", r[1]))
    return {"columns": ["ε", "unit", "configurations", f"mean {utility}", f"best {utility}",
                        f"mean {primary}" if primary else "primary score"], "rows": rows}


def _flat(obj, prefix: str = "") -> dict:
    """Nested dicts as one level of dotted keys (lists kept as values)."""
    out: dict = {}
    for k, v in (obj.items() if isinstance(obj, dict) else ()):
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, f"{key}."))
        else:
            out[key] = v
    return out


def _polars_table(frame) -> tuple[list[str], list[list]]:
    return list(frame.columns), [list(r) for r in frame.iter_rows()]


def track_analysis(params: Params, table, summary: dict, analysis: dict, configs) -> None:
    """The pipeline's summary W&B run (:func:`empriv.infra.tracking.open_summary_run`): the run table, the per-ε summary,
    the retained configurations and every number of the analysis as wandb.Tables, the report's figures
    (plots/analysis/*.png) and the privacy profiles as wandb.Images. Ids and numbers only, scrubbed like every run.
    Offline, this is also where every configuration's run is written (:func:`empriv.infra.tracking.write_offline_runs`)."""
    from empriv.io import parse_float
    from empriv.infra.tracking import SecretScrubber, open_summary_run, write_offline_runs

    with open_summary_run(params, scrub=SecretScrubber.from_files(paths.PLANTED_SECRETS, paths.SECRETS)) as t:
        if not t.active:
            return
        t.table("analysis/runs", *_polars_table(table))
        if configs is not None and hasattr(configs, "iter_rows"):
            t.table("analysis/configurations", *_polars_table(configs))
        per_eps = summary.get("per_epsilon") or {}
        if isinstance(per_eps, dict) and per_eps:
            rows = [{"epsilon": parse_float(e) if str(e) != "inf" else None, "epsilon_label": str(e), **_flat(v)}
                    for e, v in per_eps.items()]
            columns = list(dict.fromkeys(k for r in rows for k in r))
            t.table("analysis/per_epsilon", columns, [[r.get(c) for c in columns] for r in rows])
        numbers = {k: v for k, v in _flat(analysis).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        t.table("analysis/statistics", ["statistic", "value"], [[k, v] for k, v in numbers.items()])
        notes = analysis.get("notes") if isinstance(analysis, dict) else None
        if notes:
            t.table("analysis/notes", ["note"], [[n] for n in notes])
        for png in sorted(paths.ANALYSIS_PLOTS_DIR.glob("*.png")):
            t.image(f"figures/{png.stem}", png, caption=png.stem)
        if paths.PROFILES_DIR.is_dir():
            for png in sorted(paths.PROFILES_DIR.glob("*.png")):
                t.image(f"profiles/{png.stem}", png, caption=f"privacy profile {png.stem}")
        t.summary({"analysis/n_runs": summary.get("n_runs"), "analysis/scores": summary.get("scores")})
    if t.deferred:  # offline: every run journaled by this pipeline's stages is written now, W&B started once
        write_offline_runs()


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/analyze.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
