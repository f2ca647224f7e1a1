"""The ``empriv`` command: library utilities that are useful outside the pipeline.

    empriv summary [--json]          print the per-ε summary of the last `dvc repro`
    empriv validate [PARAMS]         validate params.yaml and dvc.yaml's cube matrices (exit 2, one line per problem);
                                     --fix-inputs first sets params' inputs to the raw files the other keys name;
                                     a cube above sweep.max_runs needs --yes
    empriv privacy ...               privacy accounting (calibrate, epsilon, profile, group)
    empriv audit ...                 ε lower bounds from audit counts (epsilon, clopper-pearson)
    empriv analyze select ...        Algorithm 1's pick from a run table, and the baselines'
    empriv study run PRESET          run presets/PRESET.yaml end to end in .studies/PRESET → results/PRESET
    empriv study plan PRESET         validate a preset; its run counts and estimated GPU hours and memory
    empriv sweep [--engine slurm]    one job per matrix item (locally or on SLURM via submitit), then one dvc.lock;
                                     one sweep per workspace (exit 75 while another one runs there); SIGINT or
                                     SIGTERM: cancel, commit what finished, exit 130 / 143
    empriv diff [REV_A] [REV_B]      the DVC metrics of two revisions (default HEAD vs the working tree), each row
                                     with a verdict: changed, new, gone shown; within noise, unchanged
                                     counted (--all, --md, --json)

    empriv --debug …                 show the traceback of an error (user errors are one line each otherwise)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _summary(args) -> int:
    from empriv.analysis.variance import format_summary_record

    path = Path(args.path)
    if not path.exists():
        print(f"error: {path} does not exist: run `make repro` (or `dvc repro`) first", file=sys.stderr)
        return 2
    summary = json.loads(path.read_text())
    from empriv.pipeline.integrity import output_problems

    problems = output_problems(args.root)  # runs whose model or record is gone or changed: the summary is stale
    for problem in problems[:5]:
        print(f"warning: {problem}", file=sys.stderr)
    if len(problems) > 5:
        print(f"warning: … and {len(problems) - 5} more outputs missing or changed (`dvc status` lists them)",
              file=sys.stderr)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"empriv summary ({summary['n_runs']} runs, {path})")
        print(format_summary_record(summary))
    return 0


def _exps(args) -> int:
    from empriv.experiments import dvc_exp_show, exp_rows, format_table, table_columns

    extra = (["-A"] if args.all_commits else []) + (["-n", str(args.num)] if args.num else [])
    rows = exp_rows(dvc_exp_show(args.root, extra), all_metrics=args.all_metrics)
    columns = table_columns(rows, all_params=args.all_params)
    if args.json:
        print(json.dumps([{c: r.get(c) for c in ["rev", *columns]} for r in rows], indent=2))
    elif args.csv:
        import csv

        w = csv.writer(sys.stdout)
        w.writerow([c.removeprefix("params:") for c in columns])
        w.writerows([["" if r.get(c) is None else json.dumps(r.get(c)) if isinstance(r.get(c), list) else r.get(c)
                      for c in columns] for r in rows])
    else:
        print(format_table(rows, columns))
    return 0


def _validate(args) -> int:
    from empriv.config import load_params
    from empriv.pipeline.cube_size import run_counts, size_lines
    from empriv.pipeline.validate import audit_join_warnings, fix_inputs, validate_project

    if args.fix_inputs:
        fixed = fix_inputs(args.params)
        print(f"{args.params}: inputs " + ("already up to date" if fixed is None else f"set to {fixed}"))
    size = size_lines(load_params(args.params), yes=args.yes)  # a huge cube stops here, before the per-run checks
    params = validate_project(args.params, args.dvc_yaml)  # a ConfigError: one line per problem, exit 2 (main)
    if args.fill_defaults:
        from empriv.pipeline.validate import fill_defaults, report_filled

        report_filled(args.params, fill_defaults(args.params, args.dvc_yaml))
    runs, audits = run_counts(params)
    print(f"{args.params}: valid ({runs} configurations in the cube, {audits} in the audit cube)")
    for line in size:
        print(line)
    for line in audit_join_warnings(params):
        print(f"note: {line}")
    return 0


def _study(args) -> int:
    from empriv.config import error_lines
    from empriv.study import StudyInterrupted, run_study

    try:
        study = run_study(args.preset, Path(args.root), data_path=args.data_path, jobs=args.jobs)
    except StudyInterrupted as err:  # Ctrl-C: the sweep stopped in order; one line, no traceback
        print(str(err), file=sys.stderr)
        return 130
    except RuntimeError as err:  # a failed `dvc repro` in the study's worktree (ConfigError: see main)
        if args.debug:
            raise
        print(error_lines(err), file=sys.stderr)
        return 2
    print(json.dumps(study, indent=2))
    return 0


def _study_plan(args) -> int:
    from empriv.study_plan import format_plan, plan_preset

    p = plan_preset(args.preset, Path(args.root), data_path=args.data_path)  # a ConfigError: one line each, exit 2
    print(json.dumps(p, indent=2) if args.json else format_plan(p))
    return 0


def _study_collect(args) -> int:
    from empriv.study import collect_study

    print(json.dumps(collect_study(args.preset, Path(args.root)), indent=2))  # a ConfigError: one line each, exit 2 (main)
    return 0


def _wandb_write(args) -> int:
    import logging

    from empriv.infra.tracking import write_offline_runs

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    written = write_offline_runs(args.root, force=args.all)
    print(f"wrote {len(written)} offline W&B run(s)" + (" (every journal was already written)" if not written else ""))
    return 0


def _sweep(args) -> int:
    from empriv.infra.sweep import EXIT_BUSY, SweepBusy, run_sweep, summary_line

    def split(values):
        return None if values is None else [v for value in values for v in value.split(",") if v]

    try:
        result = run_sweep(args.root, engine=args.engine, stages=split(args.stages), items=split(args.items),
                           jobs=args.jobs, params=args.params, dry_run=args.dry_run, everything=args.all,
                           echo=lambda line: print(line, flush=True))
    except SweepBusy as err:  # another sweep holds the workspace: a temporary condition, not a usage error
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BUSY
    except KeyboardInterrupt:  # before the sweep's own handlers were in place (or after): nothing was started
        print("sweep: interrupted by SIGINT; run `make repro` again to resume", flush=True)
        return 130
    if args.dry_run:
        return 0
    print(summary_line(result), flush=True)  # an interrupted sweep's one line (what was committed, cancelled)
    for address, reason in result.failed.items():
        print(f"error: {address} failed: {reason}", file=sys.stderr)
    if result.blocked:
        print(f"error: not run because an item they need failed: {', '.join(result.blocked)}", file=sys.stderr)
    if result.status:
        print(f"error: dvc status after the commit is not clean: {json.dumps(result.status)}", file=sys.stderr)
    if result.interrupted:  # 128 + the signal's number, as a shell reports a command the signal ended
        import signal

        return 128 + signal.Signals[result.interrupted].value
    return 0 if result.ok else 1


def _diff(args) -> int:
    from empriv.diff import diff_revisions, format_markdown, format_text, to_json

    rows = diff_revisions(Path(args.root), args.rev_a, args.rev_b, z=args.z, rel_tol=args.rel_tol)
    old_label, new_label = args.rev_a, args.rev_b or "workspace"
    if args.json:
        print(json.dumps(to_json(rows), indent=2))
    elif args.md:
        print(format_markdown(rows, old_label, new_label, z=args.z, show_all=args.all, rel_tol=args.rel_tol), end="")
    else:
        print(format_text(rows, old_label, new_label, z=args.z, show_all=args.all, rel_tol=args.rel_tol), end="")
    return 0  # a report, not a check: 0 whatever the verdicts


# the commands defined in this module; the others (diff, privacy, audit, analyze) come with their modules, imported
# only when one of them (or --help) is asked for: `make repro` runs validate, sweep and summary, and importing the
# others' libraries added ~0.1 s to each
_OWN_COMMANDS = ("summary", "exps", "validate", "wandb-write", "study", "sweep")


def _command_of(argv: list[str] | None) -> str | None:
    """The command word of an argv (its first argument that is not an option), None without one."""
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if not a.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``empriv`` parser. ``command``: the command word about to be parsed; when it is one of this module's own
    commands (:data:`_OWN_COMMANDS`), the commands defined in other modules are left out, with their imports."""
    everything = command not in _OWN_COMMANDS
    ap = argparse.ArgumentParser(prog="empriv", description="empirical privacy of DP fine-tuning")
    ap.add_argument("--debug", action="store_true", help="show the Python traceback of an error (also: EMPRIV_DEBUG=1)")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="print the per-ε statistics of every score (records/scores_by_epsilon.json) as a table")
    s.add_argument("--path", default="records/scores_by_epsilon.json")
    s.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    s.add_argument("--root", default=".", help="project root holding dvc.lock: a warning per run model or record that "
                   "is missing or differs from its DVC hash")
    s.set_defaults(func=_summary)
    e = sub.add_parser("exps", help="experiments as a results table: the params that differ and the headline metrics "
                       "(parsed from `dvc exp show --json`)")
    e.add_argument("--all-metrics", action="store_true", help="also std/worst/counts of every score")
    e.add_argument("--all-params", action="store_true", help="every params key, not only those that differ")
    e.add_argument("-A", "--all-commits", action="store_true", help="experiments of every commit (dvc exp show -A)")
    e.add_argument("-n", "--num", type=int, default=0, help="experiments of the last NUM commits (dvc exp show -n)")
    e.add_argument("--root", default=".", help="project root (default: the current directory)")
    fmt = e.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true")
    fmt.add_argument("--json", action="store_true")
    e.set_defaults(func=_exps)
    v = sub.add_parser("validate", help="validate a params file")
    v.add_argument("params", nargs="?", default="params.yaml")
    v.add_argument("--dvc-yaml", default="dvc.yaml", help="the pipeline whose cube matrices must match the params "
                   "(skipped when the file does not exist)")
    v.add_argument("--fix-inputs", action="store_true", help="first set the params file's inputs (the raw files DVC "
                   "tracks) to those data.path, secrets.overrides, a local base.name and data.public_path name; "
                   "comments are kept")
    v.add_argument("--fill-defaults", action="store_true", help="then write into the params file the defaults of "
                   "the keys dvc.yaml's stages read that it leaves out (DVC sees a missing key as changed; make repro "
                   "and the validate stage do this)")
    v.add_argument("--yes", action="store_true", help="accept a cube above sweep.max_runs (default 2,000 runs with "
                   "the audit cube; `make repro YES=1`); a large one prints its runs and estimated wall time either way")
    v.set_defaults(func=_validate)
    w = sub.add_parser("wandb-write", help="write the offline W&B runs whose journals changed (the analyze stage "
                       "does this; e.g. after `dvc repro train@…` alone)")
    w.add_argument("--root", default=None, help="the directory holding wandb/ (default: $EMPRIV_WANDB_DIR or the "
                   "project root)")
    w.add_argument("--all", action="store_true", help="rewrite every run, not only the changed ones")
    w.set_defaults(func=_wandb_write)
    st = sub.add_parser("study", help="preset studies (presets/*.yaml)")
    st_sub = st.add_subparsers(dest="study_command", required=True)
    sr = st_sub.add_parser("run", help="run a preset end to end in its own worktree; results in results/PRESET")
    sr.add_argument("preset", help="name of presets/<name>.yaml")
    sr.add_argument("--data-path", default=None, help="override the preset's data.path (your own corpus)")
    sr.add_argument("--root", default=".", help="project root (default: the current directory)")
    sr.add_argument("--jobs", type=int, default=None, help="stages at once (default: the preset's sweep.jobs)")
    sr.set_defaults(func=_study)
    sp = st_sub.add_parser("plan", help="validate a preset and print its run counts and an ESTIMATE of its GPU hours "
                           "and memory on one A100/H100 (arithmetic from FLOPs: see docs/gpu.md)")
    sp.add_argument("preset", help="name of presets/<name>.yaml")
    sp.add_argument("--data-path", default=None, help="override the preset's data.path (as study run)")
    sp.add_argument("--root", default=".", help="project root (default: the current directory)")
    sp.add_argument("--json", action="store_true", help="print the plan as JSON")
    sp.set_defaults(func=_study_plan)
    sc = st_sub.add_parser("collect", help="copy a study's results from its worktree again (no run)")
    sc.add_argument("preset")
    sc.add_argument("--root", default=".")
    sc.set_defaults(func=_study_collect)
    sw = sub.add_parser("sweep", help="run the matrix items of dvc.yaml's stages as jobs (local or SLURM, through "
                        "submitit), then commit them into dvc.lock and the DVC cache (docs/cluster.md); one sweep "
                        "per workspace: exit status 75 while another one runs there")
    sw.add_argument("--engine", choices=("local", "slurm"), default=None, help="where the jobs run (default: params "
                    "sweep.engine)")
    sw.add_argument("--stages", action="append", default=None, metavar="STAGE[,STAGE]",
                    help="matrix stages whose items become jobs (default: params sweep.stages)")
    sw.add_argument("--items", action="append", default=None, metavar="GLOB[,GLOB]",
                    help="only items whose name (train@KEY) or KEY matches a glob; the rest count as upstream")
    sw.add_argument("--all", action="store_true", help="every stage of dvc.yaml as a job, single stages too (no "
                    "upstream `dvc repro`, nothing left stale below): the whole pipeline in one sweep (`make repro`)")
    sw.add_argument("--jobs", type=int, default=None, help="local engine: items at once (default: sweep.jobs)")
    sw.add_argument("--params", default=None, help="params file holding the sweep section (default: ROOT/params.yaml)")
    sw.add_argument("--root", default=".", help="project root holding dvc.yaml (default: the current directory)")
    sw.add_argument("--dry-run", action="store_true", help="print the plan (stale and up-to-date items, upstream, "
                    "resources) and run nothing")
    sw.set_defaults(func=_sweep)
    if not everything:
        return ap
    from empriv.diff import REL_TOL, Z

    d = sub.add_parser("diff", help="the DVC metrics of two git revisions with a verdict per metric: changed (beyond "
                       "the combined uncertainty), within noise, unchanged, new, gone; the counts first, then the "
                       "changed, new and gone rows (docs/sweeps.md)")
    d.add_argument("rev_a", nargs="?", default="HEAD", help="the old side (default: HEAD)")
    d.add_argument("rev_b", nargs="?", default=None, help="the new side (default: the working tree)")
    d.add_argument("--z", type=float, default=Z, help=f"changed when |Δ| > z·√(σ_a² + σ_b²) (default {Z:g})")
    d.add_argument("--rel-tol", type=float, default=REL_TOL, help="changed, for a metric without an uncertainty, "
                   f"when |Δ| > this fraction of the value (default {REL_TOL:g}; also a floor for the others)")
    d.add_argument("--root", default=".", help="the repository (default: the current directory)")
    dfmt = d.add_mutually_exclusive_group()
    d.add_argument("--all", action="store_true", help="every row, within noise and unchanged too (markdown: folded "
                   "in <details>)")
    dfmt.add_argument("--md", action="store_true", help="markdown: the counts, then the changed, new and gone rows")
    dfmt.add_argument("--json", action="store_true", help="one object per row")
    d.set_defaults(func=_diff)
    from empriv.privacy.cli import add_privacy_parser, run as run_privacy

    add_privacy_parser(sub).set_defaults(func=run_privacy)
    from empriv.audit.cli import add_audit_parser, run as run_audit

    add_audit_parser(sub).set_defaults(func=run_audit)
    from empriv.analysis.cli import add_analyze_parser, run as run_analyze

    add_analyze_parser(sub).set_defaults(func=run_analyze)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user error (invalid params or inputs, a bad value, a missing file) prints one
    ``error: …`` line per problem and returns 2, with no traceback unless ``--debug`` (or ``EMPRIV_DEBUG=1``)."""
    args = build_parser(_command_of(argv)).parse_args(argv)
    try:
        rc = args.func(args)
    except (FileNotFoundError, ValueError) as err:  # a ConfigError is a ValueError
        from empriv.config import error_lines  # imported here: pydantic and the params models cost ~0.15 s
        from empriv.stage import debug_enabled

        if args.debug or debug_enabled():
            raise
        print(error_lines(err), file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
