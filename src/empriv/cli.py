"""The ``empriv`` command: library utilities that are useful outside the pipeline.

    empriv summary [--json]          print the per-ε summary of the last `dvc repro`
    empriv validate [PARAMS]         validate params.yaml (exit 2 with the reasons if invalid)
    empriv privacy ...               privacy accounting (calibrate, epsilon, profile, group)
    empriv audit ...                 ε lower bounds from audit counts (epsilon, clopper-pearson)
    empriv analyze select ...        Algorithm 1's pick from a run table, and the baselines'
    empriv study run PRESET          run presets/PRESET.yaml end to end in .studies/PRESET → results/PRESET
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _summary(args) -> int:
    from empriv.analysis.variance import format_summary

    path = Path(args.path)
    if not path.exists():
        print(f"error: {path} does not exist: run `make repro` (or `dvc repro`) first", file=sys.stderr)
        return 2
    summary = json.loads(path.read_text())
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"empriv summary ({summary['n_runs']} runs, {path})")
        print(format_summary(summary["per_epsilon"], summary["scores"]))
    return 0


def _validate(args) -> int:
    from empriv.config import ConfigError, load_params

    try:
        params = load_params(args.params)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.params}: valid ({len(params.runs())} configurations in the cube)")
    return 0


def _study(args) -> int:
    from empriv.config import ConfigError
    from empriv.study import run_study

    try:
        study = run_study(args.preset, Path(args.root), data_path=args.data_path, jobs=args.jobs)
    except (ConfigError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(study, indent=2))
    return 0


def _study_collect(args) -> int:
    from empriv.config import ConfigError
    from empriv.study import collect

    try:
        print(json.dumps(collect(args.preset, Path(args.root)), indent=2))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="empriv", description="empirical privacy of DP fine-tuning")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="print metrics/summary.json as a table")
    s.add_argument("--path", default="metrics/summary.json")
    s.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    s.set_defaults(func=_summary)
    v = sub.add_parser("validate", help="validate a params file")
    v.add_argument("params", nargs="?", default="params.yaml")
    v.set_defaults(func=_validate)
    st = sub.add_parser("study", help="preset studies (presets/*.yaml)")
    st_sub = st.add_subparsers(dest="study_command", required=True)
    sr = st_sub.add_parser("run", help="run a preset end to end in its own worktree; results in results/PRESET")
    sr.add_argument("preset", help="name of presets/<name>.yaml")
    sr.add_argument("--data-path", default=None, help="override the preset's data.path (your own corpus)")
    sr.add_argument("--root", default=".", help="project root (default: the current directory)")
    sr.add_argument("--jobs", type=int, default=1, help="dvc repro --jobs (keep 1 on a 2-core machine)")
    sr.set_defaults(func=_study)
    sc = st_sub.add_parser("collect", help="copy a study's results from its worktree again (no run)")
    sc.add_argument("preset")
    sc.add_argument("--root", default=".")
    sc.set_defaults(func=_study_collect)
    from empriv.privacy.cli import add_privacy_parser, run as run_privacy

    add_privacy_parser(sub).set_defaults(func=run_privacy)
    from empriv.audit.cli import add_audit_parser, run as run_audit

    add_audit_parser(sub).set_defaults(func=run_audit)
    from empriv.analysis.cli import add_analyze_parser, run as run_analyze

    add_analyze_parser(sub).set_defaults(func=run_analyze)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rc = args.func(args)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
