"""Preset studies: the whole pipeline on a preset's params, in its own git worktree.

A preset (``presets/<name>.yaml``) is a params overlay: the keys it sets replace those of the
project's ``params.yaml`` (mappings merge key by key; lists and values replace), and the merged
file is the study's ``params.yaml`` — what ``dvc repro`` reads and ``dvc.lock`` records.
``empriv study run <name>``:

1. merges and validates the preset (relative ``data.path`` / ``secrets.overrides`` are resolved
   against the project root, so a preset can point at ``../shared/data/...``);
2. checks out the current commit into ``.studies/<name>/`` (``git worktree``; the study runs
   committed code, and its results name that commit), writes the preset there as ``params.yaml``
   and points that worktree's DVC cache at the project's own (``.dvc/config.local``), so outputs
   are cached once and the real base's weights are built once;
3. runs the whole pipeline there as ``make repro`` does — ``empriv sweep --engine local --all`` (every stage a
   job, ``sweep.jobs`` or ``--jobs`` at once, one lock dump), then ``dvc repro`` (a no-op check that nothing is
   left stale) — but first trains, then scores, the cube one ε at a time (:func:`chunks`: ``empriv sweep --stages
   train --items '<ε>-*'``, …, then the same for ``score``, each committed when it ends), so that a study killed
   after hours (SIGKILL, a session's end: a sweep commits at its end) loses at most one ε of one stage — recording every stage process's wall time, CPU time and peak memory
   (``$EMPRIV_TIMING_LOG``, written by :func:`empriv.stage.record_cost`), and stops the study's warm worker;
   A study stopped part-way and run again resumes: DVC skips the stages that finished, and the
   cost records of the earlier attempt are kept;
4. copies the study's metrics, analysis plots, report, params and ``dvc.lock`` into
   ``results/<name>/`` with ``cost.csv`` (per stage) and ``study.json`` (commit, totals).

Nothing in ``results/`` holds secret text: the metrics carry ids and numbers only.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from empriv.config import ConfigError, expected_inputs, parse_params, read_yaml

PRESETS_DIR = Path("presets")
STUDIES_DIR = Path(".studies")
RESULTS_DIR = Path("results")
COPIED = ("metrics", "records", "plots/analysis", "plots/profiles", "reports/report.html", "params.yaml", "dvc.lock")


def preset_path(name: str, root: Path) -> Path:
    path = root / PRESETS_DIR / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (root / PRESETS_DIR).glob("*.yaml"))
        raise ConfigError(f"preset {name!r} does not exist ({path}); known presets: {', '.join(known) or 'none'}")
    return path


def merge(base: dict, overlay: dict) -> dict:
    """``overlay`` over ``base``: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in overlay.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def resolve_preset(name: str, root: Path, data_path: str | None = None) -> dict:
    """``params.yaml`` with the preset merged over it and file paths made absolute (``data_path``
    overrides ``data.path``); validated, each part of its design (:mod:`empriv.study_design`; the preset's ``study``
    section stays in the returned mapping)."""
    overlay = read_yaml(preset_path(name, root))
    if not isinstance(overlay, dict):
        raise ConfigError(f"preset {name!r} must be a mapping of params sections")
    raw = merge(read_yaml(root / "params.yaml"), overlay)
    data = raw.setdefault("data", {})
    if data_path is not None:
        data["path"] = data_path
    for section, key in (("data", "path"), ("data", "public_path"), ("secrets", "overrides")):
        value = (raw.get(section) or {}).get(key)
        if value and not Path(value).expanduser().is_absolute():
            raw[section][key] = str((root / value).resolve())
    raw["inputs"] = expected_inputs((raw.get("data") or {}).get("path"), (raw.get("secrets") or {}).get("overrides"),
                                    (raw.get("base") or {}).get("name"),
                                    (raw.get("data") or {}).get("public_path"))  # the raw files DVC tracks (input@<key>)
    from empriv.study_design import parts

    for _, part in parts(raw):  # the preset's `study` section (its design) is checked, then every part's params
        parse_params(part)  # fails here, before any worktree or output is touched
    return raw


def _run(cmd: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, check=True, text=True, **kwargs)


def _write_params(raw: dict, path: Path) -> None:
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = None
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("# written by `empriv study run` from the preset of the same name\n")
        yaml.dump(raw, fh)


def study_written_files(work: Path) -> set[str]:
    """Files of the worktree that differ from its commit or are not tracked: what the study's stages wrote
    (the committed default-run metrics it did not rewrite are left out, even for a study stopped part-way)."""
    changed = _run(["git", "diff", "--name-only", "HEAD"], work, capture_output=True).stdout.split("\n")
    untracked = _run(["git", "ls-files", "--others"], work, capture_output=True).stdout.split("\n")
    return {f for f in changed + untracked if f}


def cube_files(params) -> set[str]:
    """The per-run record files of the study's cube and audit cube (``records/{train,score,audit}/<unit>/<point>.json``)."""
    from empriv import paths

    names = {r.file_stem for r in params.runs()}
    audits = {r.file_stem for r in params.audit_runs()}
    return ({(d / f"{n}.json").as_posix() for d in (paths.TRAIN_METRICS_DIR, paths.SCORE_METRICS_DIR) for n in names}
            | {(paths.AUDIT_METRICS_DIR / f"{n}.json").as_posix() for n in audits})


def summarise_cost(records: list[dict]) -> list[dict]:
    """Per stage kind (``train@…`` runs grouped as ``train``): count, total and max wall time, max peak memory.

    The timing log is appended to across resumed and re-run studies: only the last record of each stage process
    (``train@<config>``) counts — the execution whose outputs the study holds."""
    groups: dict[str, dict] = {}
    latest = {r["stage"]: r for r in records}
    for r in latest.values():
        kind = r["stage"].split("@")[0]
        g = groups.setdefault(kind, {"stage": kind, "processes": 0, "wall_s_total": 0.0, "wall_s_max": 0.0,
                                     "cpu_s_total": 0.0, "peak_rss_mb_max": 0.0})
        g["processes"] += 1
        g["wall_s_total"] = round(g["wall_s_total"] + r["wall_s"], 2)
        g["wall_s_max"] = max(g["wall_s_max"], r["wall_s"])
        g["cpu_s_total"] = round(g["cpu_s_total"] + r["cpu_s"], 2)
        g["peak_rss_mb_max"] = max(g["peak_rss_mb_max"], r["peak_rss_mb"])
    return list(groups.values())


def study_env(work: Path, timing: Path) -> dict:
    """The environment of a study's ``dvc repro``: the stages import the worktree's own ``src`` (the commit the
    study records), not the editable install's — the project's live tree, which may change while a study runs."""
    return {**os.environ, "EMPRIV_TIMING_LOG": str(timing), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join([str(work / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}


CHUNKED_STAGES = ("train", "score")  # the matrix stages over the cube whose items a study runs one ε at a time


def chunks(raw: dict) -> list[tuple[str, str]]:
    """``(stage, --items pattern)`` pairs that split the ``train`` and then the ``score`` stage of the cube
    ``raw['cube']`` by ε, in the cube's order (item keys start with ε as DVC renders it: ``8-256-50-…``,
    ``inf-…``); none for a cube of one ε (the ``--all`` sweep runs it)."""
    from empriv.config.runs import format_number

    epsilons = list(dict.fromkeys(format_number(e) for e in (raw.get("cube") or {}).get("epsilon") or []))
    if len(epsilons) < 2:
        return []
    return [(stage, f"{e}-*") for stage in CHUNKED_STAGES for e in epsilons]


class StudyInterrupted(RuntimeError):
    """Ctrl-C during a study: its sweep stopped in order (it commits what finished); ``empriv study run`` prints the
    one line and exits 130."""


def stopped_by_signal(returncode: int) -> bool:
    """Whether a sweep's exit status says it stopped in order on SIGINT or SIGTERM (it committed what finished, exit
    128 + the signal) or was ended by one. A study counts that as interrupted even when the Ctrl-C never reached the
    study's own process: a study started in the background of a non-interactive shell ignores SIGINT, and a signal
    may be sent to the sweep alone."""
    import signal

    return returncode in {128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM}


def run_waiting(cmd: list[str], **kwargs) -> tuple[int, bool]:
    """Run ``cmd`` and return (its exit status, whether a Ctrl-C came meanwhile). Ctrl-C sends SIGINT to the
    terminal's whole process group, the child included: rather than kill the child 0.25 s later (what
    ``subprocess.run`` does on ``KeyboardInterrupt``) — a sweep would lose the commit of its finished items — this
    waits for it to stop in its own orderly way, however many times Ctrl-C is pressed."""
    interrupted = False
    with subprocess.Popen(cmd, **kwargs) as child:
        while True:
            try:
                return child.wait(), interrupted
            except KeyboardInterrupt:
                interrupted = True


def run_study(name: str, root: Path, *, data_path: str | None = None, jobs: int | None = None) -> dict:
    """Run preset ``name`` end to end (see the module docstring); returns ``study.json``'s content. A one-at-a-time
    design (:mod:`empriv.study_design`) runs its parts one after another, then the analysis of their union."""
    from empriv.study_design import parts, study_section

    root = root.resolve()
    raw = resolve_preset(name, root, data_path)
    commit = _run(["git", "rev-parse", "HEAD"], root, capture_output=True).stdout.strip()
    plan = parts(raw)
    if study_section(raw)["design"] == "product":
        return _run_part(name, plan[0][1], root, commit, root / STUDIES_DIR / name, root / RESULTS_DIR / name, jobs)
    done = []
    for part, part_raw in plan:
        done.append(_run_part(f"{name}.{part}", part_raw, root, commit, root / STUDIES_DIR / f"{name}.{part}",
                              root / RESULTS_DIR / name / PARTS_DIR / part, jobs))
    return _run_union(name, raw, plan, root, commit, done)


PARTS_DIR = "parts"  # results/<name>/parts/<part>/: each part's own results (one-at-a-time design)


def _checkout(work: Path, root: Path, commit: str) -> None:
    if not work.exists():
        _run(["git", "worktree", "add", "--detach", str(work), commit], root, capture_output=True)
    else:
        _run(["git", "checkout", "--detach", "--force", commit], work, capture_output=True)


def _run_part(name: str, raw: dict, root: Path, commit: str, work: Path, out: Path, jobs: int | None) -> dict:
    """One product cube's whole pipeline in worktree ``work``, its results copied into ``out``."""
    _checkout(work, root, commit)
    _write_params(raw, work / "params.yaml")
    (work / ".dvc" / "config.local").write_text(f"[cache]\n    dir = {root / '.dvc' / 'cache'}\n")
    out.mkdir(parents=True, exist_ok=True)
    timing = out / "cost.jsonl"  # appended to: a study stopped and run again resumes (DVC skips finished stages)
    if not (work / "dvc.lock").exists():
        timing.unlink(missing_ok=True)
    env = study_env(work, timing)
    started = time.time()
    sweep = [sys.executable, "-m", "empriv.cli", "sweep", "--engine", "local", "--root", str(work),
             *(["--jobs", str(jobs)] if jobs else [])]
    parts = [[*sweep, "--stages", stage, "--items", pattern] for stage, pattern in chunks(raw)]
    with open(out / "dvc_repro.log", "a", encoding="utf-8") as log:
        returncode, interrupted = 0, False
        for cmd in (*parts, [*sweep, "--all"], ["dvc", "repro"]):
            shown = "dvc repro" if cmd[0] == "dvc" else "empriv sweep " + " ".join(cmd[cmd.index("--root") + 2:])
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            returncode, interrupted = run_waiting(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
            interrupted = interrupted or stopped_by_signal(returncode)
            if returncode or interrupted:
                break
        run_waiting([sys.executable, "-m", "empriv.infra.warm", "--stop"], cwd=work, env=env, stdout=log,
                    stderr=subprocess.STDOUT)
    if interrupted:  # no results/ copy of a half-run study: the last complete one stays
        raise StudyInterrupted(f"study {name!r}: interrupted during `{shown}` (exit status {returncode}), which "
                               f"committed what had finished; run `empriv study run {name.split('.')[0]}` again to "
                               "resume")
    wall = time.time() - started
    study = collect(name, root, raw=raw, commit=commit, exit_code=returncode, wall_time_s=wall, work=work, out=out)
    if returncode != 0:
        raise RuntimeError(f"study {name!r}: `{shown}` "
                           f"failed with exit code {returncode}; see {out / 'dvc_repro.log'}")
    return study


def _run_union(name: str, raw: dict, plan: list[tuple[str, dict]], root: Path, commit: str, done: list[dict]) -> dict:
    """The analysis of a one-at-a-time design's union (:func:`empriv.pipeline.analyze_union.analyze_union`) in
    ``.studies/<name>``, its outputs copied into ``results/<name>/`` with ``study.json`` over all parts."""
    work, out = root / STUDIES_DIR / name, root / RESULTS_DIR / name
    _checkout(work, root, commit)
    base = {k: v for k, v in raw.items() if k != "study"}
    _write_params(base, work / "params.yaml")
    spec = work / ".empriv" / "union.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps({"raw": raw, "parts": [p for _, p in plan], "work": str(work),
                                "part_works": [str(root / STUDIES_DIR / f"{name}.{part}") for part, _ in plan]}))
    env = {**study_env(work, out / "cost.jsonl"), "WANDB_MODE": "disabled"}  # each part's runs went to W&B already
    started = time.time()
    with open(out / "analyze_union.log", "w", encoding="utf-8") as log:
        returncode, interrupted = run_waiting([sys.executable, "-m", "empriv.pipeline.analyze_union", str(spec)], cwd=work,
                                              env=env, stdout=log, stderr=subprocess.STDOUT)
    if interrupted or stopped_by_signal(returncode):
        raise StudyInterrupted(f"study {name!r}: interrupted during the analysis of its parts' union; run "
                               f"`empriv study run {name}` again (the parts are done: it only re-analyses)")
    if returncode != 0:
        raise RuntimeError(f"study {name!r}: the analysis of its parts' union failed with exit code {returncode}; "
                           f"see {out / 'analyze_union.log'}")
    records = []
    for part, _ in plan:
        timing = out / PARTS_DIR / part / "cost.jsonl"
        if timing.exists():
            records += [json.loads(line) for line in timing.read_text().splitlines() if line.strip()]
    study = collect(name, root, raw=base, commit=commit, exit_code=0, work=work, out=out, items=UNION_COPIED,
                    cost_records=records, only_written=False, wall_time_s=sum(d.get("wall_time_s") or 0 for d in done)
                    + time.time() - started)
    design = {"design": "one-at-a-time", "parts": [
        {"part": part, "results": (Path(RESULTS_DIR) / name / PARTS_DIR / part).as_posix(),
         "dvc_repro_exit_code": d.get("dvc_repro_exit_code"), "wall_time_s": d.get("wall_time_s")}
        for (part, _), d in zip(plan, done)]}
    study = {**design, **{k: v for k, v in study.items() if k not in design}}
    (out / "study.json").write_text(json.dumps(study, indent=2) + "\n")
    return study


UNION_COPIED = ("metrics", "records", "plots/analysis", "reports/report.html", "params.yaml")


def collect_study(name: str, root: Path) -> dict:
    """``empriv study collect <name>``: :func:`collect` again, without running anything — for a one-at-a-time
    design, every part's results and then the union's (its analysis as last run; the parts' cost summed)."""
    from empriv.study_design import parts, study_section

    root = root.resolve()
    preset = preset_path(name, root)
    raw = read_yaml(preset)
    if not isinstance(raw, dict) or study_section(raw)["design"] == "product":
        return collect(name, root)
    records = []
    for part, _ in parts(resolve_preset(name, root)):
        out = root / RESULTS_DIR / name / PARTS_DIR / part
        collect(f"{name}.{part}", root, work=root / STUDIES_DIR / f"{name}.{part}", out=out)
        timing = out / "cost.jsonl"
        if timing.exists():
            records += [json.loads(line) for line in timing.read_text().splitlines() if line.strip()]
    return collect(name, root, items=UNION_COPIED, cost_records=records, only_written=False)


def collect(name: str, root: Path, *, raw: dict | None = None, commit: str | None = None, exit_code: int | None = None,
            wall_time_s: float | None = None, work: Path | None = None, out: Path | None = None,
            items: tuple[str, ...] = COPIED, cost_records: list[dict] | None = None, only_written: bool = True) -> dict:
    """Copy a study's results from its worktree into ``results/<name>/`` and write ``cost.csv`` and
    ``study.json`` (``empriv study collect``: again, without running anything). Values not given are
    kept from an earlier ``study.json``."""
    root = root.resolve()
    work = work or root / STUDIES_DIR / name
    out = out or root / RESULTS_DIR / name
    if not (work / "params.yaml").exists():
        raise ConfigError(f"study {name!r} has no worktree at {work}: run `empriv study run {name}` first")
    raw = raw if raw is not None else read_yaml(work / "params.yaml")
    out.mkdir(parents=True, exist_ok=True)
    earlier = json.loads((out / "study.json").read_text()) if (out / "study.json").exists() else {}
    timing = out / "cost.jsonl"
    records = (cost_records if cost_records is not None else
               [json.loads(line) for line in timing.read_text().splitlines()] if timing.exists() else [])
    written = study_written_files(work) if only_written else set()

    def stale(directory: str, names: list[str]) -> list[str]:
        """Files the study did not write: the worktree also holds every output committed for the default run."""
        rel = Path(directory).relative_to(work)
        return [n for n in names if only_written and (work / rel / n).is_file() and (rel / n).as_posix() not in written]

    for item in items:
        src, dst = work / item, out / item
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=stale)
        elif src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    cost = summarise_cost(records)
    if cost:
        with open(out / "cost.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(cost[0]))
            writer.writeheader()
            writer.writerows(cost)
    study = {**{k: earlier[k] for k in ("design", "parts") if k in earlier},  # a one-at-a-time design's
             "preset": name,
             "commit": commit or earlier.get("commit"),
             "dvc_repro_exit_code": exit_code if exit_code is not None else earlier.get("dvc_repro_exit_code"),
             "wall_time_s": round(wall_time_s, 1) if wall_time_s is not None else earlier.get("wall_time_s"),
             "stage_processes": sum(c["processes"] for c in cost),
             "stage_wall_s_total": round(sum(c["wall_s_total"] for c in cost), 1),
             "stage_cpu_s_total": round(sum(c["cpu_s_total"] for c in cost), 1), "cost": cost,
             "peak_rss_mb_max": max((c["peak_rss_mb_max"] for c in cost), default=None)}
    (out / "study.json").write_text(json.dumps(study, indent=2) + "\n")
    return study
