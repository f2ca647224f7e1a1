"""A value removed from the cube (issue 43; empriv.infra.sweep.removed): its runs' outputs stayed inside the
directories that the stages reading whole directories depend on (the pipeline's ``filter`` on models/runs,
``analyze`` on records/train, records/score …), so those stages counted them and dvc.lock hashed them.

The slow tests use the sweep tests' project (tests/infra/test_sweep.py: up -> train@<x> -> total, which sums every
file of runs/ as ``filter`` reads models/runs -> score@<x>), with ``analyze`` added, which lists every file of out/
(the score outputs) as the pipeline's ``analyze`` reads records/score, and a guard in ``up`` (a negative
base.offset fails, as validation fails on bad params). Real DVC, real sweeps: remove a value, then add it back.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from empriv.infra.sweep.removed import RemovedFinder, find_removed, move_removed, moved_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))
from test_sweep import (DVC_YAML, PARAMS, PY, _assert_clean_and_no_op, _dvc, _sweep, _template,  # noqa: E402,F401
                        _write_params, project)

from test_sweep_killed import COUNTING_TRAIN_PY, _log, _runs  # noqa: E402  (train.py counting its runs)

ANALYZE = f"""\
  analyze:
    cmd: {PY} -c "import pathlib; open('analysis.txt', 'w').write(' '.join(sorted(p.name for p in pathlib.Path('out').glob('*.txt'))))"
    deps:
      - out
    outs:
      - analysis.txt
"""
GUARD = "import yaml; assert yaml.safe_load(open('params.yaml'))['base']['offset'] >= 0, 'base.offset must be >= 0'; "
PIPELINE = DVC_YAML.replace('-c "import yaml; ', f'-c "{GUARD}', 1) + ANALYZE
SWEEP = {**PARAMS["sweep"], "resources": {}}
MOVED = re.compile(r"^moved (\d+) output\(s\) of runs dvc\.yaml no longer has out of (\S+) \(read by (\S+)\) to "
                   r"(\.empriv/removed/[^/]+)/, where they stay \(DVC's run-cache restores them if their values come "
                   r"back\): (.+)$", re.M)


def _setup(project: Path, *, ignored_by_root: bool) -> None:
    (project / "dvc.yaml").write_text(PIPELINE)
    (project / "train.py").write_text(COUNTING_TRAIN_PY)
    (project / "go").touch()  # COUNTING_TRAIN_PY's item 3 waits for it
    if ignored_by_root:  # as the project's own .gitignore (/models/, /records/*): DVC writes none inside them
        (project / ".gitignore").write_text(".empriv/\n.marker-*\n/runs/\n/out/\n")


def _run(project: Path, cube: list[int], offset: int = 1):
    _write_params(project, {**PARAMS, "base": {"offset": offset}, "cube": {"x": cube}, "sweep": SWEEP})
    return _sweep(project, "--engine", "local", "--all", "--jobs", "2", timeout=600)


def _files(project: Path, *dirs: str) -> dict[str, str]:
    return {str(p.relative_to(project)): hashlib.sha256(p.read_bytes()).hexdigest()[:12]
            for d in dirs for p in sorted((project / d).rglob("*")) if p.is_file()}


def _read(project: Path, name: str) -> str:
    return (project / name).read_text()


# ----------------------------------------------------------------------------------------------- fast: finding, moving
MATRIX_YAML = """\
stages:
  train:
    matrix:
      m: [full]
      x: [1]
    cmd: echo
    outs:
      - models/${item.m}/run-${item.x}
      - runs/train-${item.x}.txt
  total:
    cmd: echo
    deps:
      - runs
      - models
      - src
    outs:
      - total.txt
"""


def test_only_outputs_of_matrix_items_or_stale_lock_entries_are_found_and_moved(tmp_path):
    root = tmp_path
    (root / "dvc.yaml").write_text(MATRIX_YAML)
    (root / "dvc.lock").write_text(json.dumps({"schema": "2.0", "stages": {
        "old": {"cmd": "echo", "outs": [{"path": "runs/old.txt", "md5": "x", "size": 1}]}}}))
    for rel in ("runs/train-1.txt", "runs/train-3.txt", "runs/old.txt", "runs/notes.txt", "runs/train-3.txt.tmp",
                "models/full/run-1/w.bin", "models/full/run-2/w.bin", "models/lora/run-1/w.bin",
                "src/runs/train-4.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / "runs" / ".gitignore").write_text("/train-1.txt\n/train-3.txt\n/old.txt\n")
    (root / "models" / "lora" / ".gitignore").write_text("/run-1\n")
    declared = [str(root / "models/full/run-1"), str(root / "runs/train-1.txt"), str(root / "total.txt")]
    finder = RemovedFinder(root, declared, ["old"])
    deps = [str(root / d) for d in ("runs", "models", "src")]
    found = find_removed(finder, deps)
    # a user's file, a temporary and a source tree stay; a declared output and what lies inside it too
    assert [Path(p).relative_to(root).as_posix() for p in found] == \
        ["models/full/run-2", "models/lora/run-1", "runs/old.txt", "runs/train-3.txt"]
    assert find_removed(finder, [str(root / "models/full/run-1"), str(root / "nowhere")]) == []

    dest = root / ".empriv" / "removed" / "s1"
    moved = move_removed(root, found, dest, deps)
    assert moved == ["models/full/run-2", "models/lora/run-1", "runs/old.txt", "runs/train-3.txt"]
    assert (dest / "models/lora/run-1/w.bin").read_text() == "models/lora/run-1/w.bin"
    assert (dest / "runs/train-3.txt").read_text() == "runs/train-3.txt"
    # DVC's ignore_remove: the entries go, the rest of the file stays; a .gitignore left empty goes, and so does the
    # directory left empty (models/lora), never a dependency directory
    assert _read(root, "runs/.gitignore") == "/train-1.txt\n"
    assert not (root / "models" / "lora").exists() and (root / "models" / "full" / "run-1").is_dir()
    assert sorted(p.name for p in (root / "runs").iterdir()) == [".gitignore", "notes.txt", "train-1.txt",
                                                                 "train-3.txt.tmp"]
    assert move_removed(root, found, dest, deps) == []  # gone already: nothing to do
    line = moved_line(moved, ["models", "runs"], "total", ".empriv/removed/s1")
    assert line == ("moved 4 output(s) of runs dvc.yaml no longer has out of models, runs (read by total) to "
                    ".empriv/removed/s1/, where they stay (DVC's run-cache restores them if their values come back): "
                    "models/full/run-2, models/lora/run-1, runs/old.txt, runs/train-3.txt")
    assert moved_line(moved + ["runs/x"], ["runs"], "total", "d").endswith(
        "runs/old.txt, runs/train-3.txt, and 1 more (all of them in the log)")


def test_the_pipeline_s_own_output_paths_are_recognised():
    """dvc.yaml's matrix outputs: a run of a removed value under models/runs and records/* is found, nothing else."""
    from empriv.infra.sweep.removed import output_patterns

    patterns = output_patterns(Path(__file__).resolve().parents[2])
    was = lambda rel: any(p.fullmatch(rel) for p in patterns)  # noqa: E731
    assert was("models/runs/record/full/eps8-b256-T50-lr0.005-s2")
    assert was("records/train/record/full/eps8-b256-T50-lr0.005-s2.json")
    assert was("records/score/record/lora/eps2-b512-T100-lr0.01-s0.json")
    assert was("records/audit/record/full/eps8-b256-T50-lr0.005-s0.json")
    assert not was("records/train/record/full/eps8-b256-T50-lr0.005-s2.json.tmp")
    assert not was("records/adaptation_audit/README.md") and not was("records/runs.csv")


# ----------------------------------------------------------------------------------------------- slow: real sweeps
@pytest.mark.slow
def test_a_removed_value_s_outputs_leave_the_directories_read_and_come_back_from_the_run_cache(project):
    """DVC writes the .gitignore beside the outputs here (runs/.gitignore, out/.gitignore), which the directories'
    hashes include."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    _setup(project, ignored_by_root=False)
    first = _run(project, [1, 2, 3])
    assert first.returncode == 0, first.stdout + first.stderr
    assert _read(project, "total.txt") == "9" and _read(project, "runs/.gitignore") == \
        "/train-1.txt\n/train-2.txt\n/train-3.txt\n"
    before = _files(project, "runs", "out", "counts") | {"total.txt": _read(project, "total.txt"),
                                                         "analysis.txt": _read(project, "analysis.txt")}

    # bad params: the guard fails; nothing is moved, nothing below it runs
    bad = _run(project, [1, 2], offset=-1)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "failed up" in bad.stdout and not MOVED.search(bad.stdout), bad.stdout
    assert _files(project, "runs", "out", "counts") | {"total.txt": _read(project, "total.txt"),
                                                       "analysis.txt": _read(project, "analysis.txt")} == before
    assert not (project / ".empriv" / "removed").exists()

    # a dry run says what would move, and moves nothing
    _write_params(project, {**PARAMS, "cube": {"x": [1, 2]}, "sweep": SWEEP})
    dry = _sweep(project, "--engine", "local", "--all", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    would = [line for line in dry.stdout.splitlines() if line.startswith("would move")]
    assert would == ["would move 1 output(s) of runs dvc.yaml no longer has out of the directories total reads, to "
                     ".empriv/removed/<sweep>/: runs/train-3.txt",
                     "would move 1 output(s) of runs dvc.yaml no longer has out of the directories analyze reads, to "
                     ".empriv/removed/<sweep>/: out/score-3.txt"], dry.stdout
    assert (project / "runs" / "train-3.txt").exists() and not (project / ".empriv" / "removed").exists()

    removed = _run(project, [1, 2])
    assert removed.returncode == 0, removed.stdout + removed.stderr
    lines = MOVED.findall(removed.stdout)
    assert [(n, dirs, reader, listed) for n, dirs, reader, _, listed in lines] == [
        ("1", "runs", "total", "runs/train-3.txt"), ("1", "out", "analyze", "out/score-3.txt")], removed.stdout
    dest = project / lines[0][3]
    assert dest.parent == project / ".empriv" / "removed"
    assert _read(project, f"{lines[0][3]}/runs/train-3.txt") == "4"
    assert _read(project, f"{lines[0][3]}/out/score-3.txt") == "49"
    # only the current runs are read, and the .gitignore files are what DVC leaves after removing the outputs
    assert sorted(p.name for p in (project / "runs").iterdir()) == [".gitignore", "train-1.txt", "train-2.txt"]
    assert _read(project, "runs/.gitignore") == "/train-1.txt\n/train-2.txt\n"
    assert _read(project, "out/.gitignore") == "/score-1.txt\n/score-2.txt\n"
    assert _read(project, "total.txt") == "5"
    assert _read(project, "analysis.txt") == "score-1.txt score-2.txt"
    assert "train@3" not in _read(project, "dvc.lock")
    _assert_clean_and_no_op(project)

    # added back: train@3 and score@3 come from the run-cache, nothing is trained again
    again = _run(project, [1, 2, 3])
    assert again.returncode == 0, again.stdout + again.stderr
    log = _log(again, project)
    assert re.search(r"^restored train@3 from DVC's run-cache", log, re.M), log
    assert re.search(r"^restored score@3 from DVC's run-cache", log, re.M), log
    assert _runs(project) == {"train-1": 1, "train-2": 1, "train-3": 1}
    assert _read(project, "total.txt") == "9"
    assert _read(project, "analysis.txt") == "score-1.txt score-2.txt score-3.txt"
    assert _read(project, "runs/.gitignore") == "/train-1.txt\n/train-2.txt\n/train-3.txt\n"
    # total and analyze run again here: DVC writes a restored output's .gitignore entry at its commit (the sweep
    # commits at its end), so at total's turn runs/.gitignore lacks /train-3.txt and runs/ hashes as no earlier run
    assert re.search(r"^submitted total: ", log, re.M) and re.search(r"^submitted analyze: ", log, re.M), log
    _assert_clean_and_no_op(project)


@pytest.mark.slow
def test_with_the_directories_ignored_from_the_root_the_readers_come_back_from_the_run_cache_too(project):
    """The project's own layout: the root .gitignore ignores the output directories, DVC writes none inside them,
    and a value added back restores every stage from the run-cache."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    _setup(project, ignored_by_root=True)
    assert _run(project, [1, 2, 3]).returncode == 0
    assert not (project / "runs" / ".gitignore").exists()

    removed = _run(project, [1, 2])
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert [(reader, listed) for _, _, reader, _, listed in MOVED.findall(removed.stdout)] == [
        ("total", "runs/train-3.txt"), ("analyze", "out/score-3.txt")], removed.stdout
    assert _read(project, "total.txt") == "5" and _read(project, "analysis.txt") == "score-1.txt score-2.txt"
    _assert_clean_and_no_op(project)

    again = _run(project, [1, 2, 3])
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1] == \
        "sweep: 0 done, 6 restored from the run-cache, 0 failed, 0 blocked, 3 up to date (skipped)", again.stdout
    assert _runs(project) == {"train-1": 1, "train-2": 1, "train-3": 1}
    assert _read(project, "total.txt") == "9"
    assert _read(project, "analysis.txt") == "score-1.txt score-2.txt score-3.txt"
    _assert_clean_and_no_op(project)
    # a dry run with nothing removed says nothing about moving
    dry = _sweep(project, "--engine", "local", "--all", "--dry-run")
    assert dry.returncode == 0 and "would move" not in dry.stdout, dry.stdout
