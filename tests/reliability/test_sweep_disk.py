"""A sweep and a full disk (issue 43; empriv.infra.sweep.space), with real processes, real DVC and the DVC cache on a
real 1 MiB tmpfs (root only: skipped, saying why, where mounting is not allowed): a sweep that cannot fit is refused
up front in one line (exit 75) with nothing run or removed; outputs intact in the workspace but missing from the
cache are committed, not run again; a full disk that still happens (a job's write, the commit) is one line naming
the disk and its free space, and the next sweep commits what finished without running it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))
from test_sweep import (PARAMS, TRAIN_PY, _assert_clean_and_no_op, _env, _sweep, _template,  # noqa: E402,F401
                        _write_params, project)

PY = sys.executable
OUT_BYTES = 300 * 1024  # each train output: four of them do not fit a 1 MiB cache, two do

# train.py writing a 300 KiB output (the number, then spaces: int() still reads it); FULL=<x> makes item x write to
# /dev/full (ENOSPC); every finished run appends a line to counts/train-<x>
BIG_TRAIN_PY = TRAIN_PY.replace(
    'open(f"runs/train-{x}.txt", "w").write(str(int(x) + offset))',
    f'''if os.environ.get("FULL") == x:
    with open("/dev/full", "w") as fh:
        fh.write("weights")
text = str(int(x) + offset)
open(f"runs/train-{{x}}.txt", "w").write(text + " " * ({OUT_BYTES} - len(text)))
os.makedirs("counts", exist_ok=True)
with open(f"counts/train-{{x}}", "a") as fh:
    fh.write("run\\n")''')


@pytest.fixture
def small_cache(tmp_path):
    """A 1 MiB tmpfs for the DVC cache, unmounted afterwards."""
    mount = tmp_path / "small-cache"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: the full-disk tests need a 1 MiB tmpfs")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root and mount permission needed): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _runs(project: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in sorted((project / "counts").glob("train-*"))}


def _dvc(project: Path, *args: str) -> None:
    done = subprocess.run([PY, "-m", "dvc", *args], cwd=project, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_sweep_that_cannot_fit_is_refused_up_front_and_uncached_outputs_are_committed_not_run(project,
                                                                                                 small_cache):
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    (project / "train.py").write_text(BIG_TRAIN_PY)
    first = _sweep(project, "--engine", "local", "--all")  # cache on the workspace's disk: measured sizes
    assert first.returncode == 0, first.stdout + first.stderr
    assert _runs(project) == {"train-1": 1, "train-2": 1}
    _dvc(project, "cache", "dir", str(small_cache))  # an empty cache on a 1 MiB disk, as a shared cache could be

    # two cube values more: four 300 KiB outputs for the cache (train@3, @4 to run; @1, @2 to commit) > 1 MiB
    _write_params(project, {**PARAMS, "cube": {"x": [1, 2, 3, 4]}})
    lock = (project / "dvc.lock").read_text()
    outputs = {p.name: p.stat().st_mtime_ns for p in (project / "runs").iterdir()}
    refused = _sweep(project, "--engine", "local", "--all")
    assert refused.returncode == 75, refused.stdout + refused.stderr
    assert re.fullmatch(
        r"error: not enough free disk space for this sweep: 4 item\(s\) to run and 6 to commit will write about "
        rf"1\.\d MiB into the DVC cache {re.escape(str(small_cache))}, which has 1\.0 MiB free; free space, or point "
        r"the DVC cache at a larger disk \(`dvc cache dir <path>`\), then run again \(estimated from dvc\.lock's "
        r"output sizes\)\n", refused.stderr), refused.stderr
    assert (project / "dvc.lock").read_text() == lock  # nothing committed, run or removed
    assert {p.name: p.stat().st_mtime_ns for p in (project / "runs").iterdir()} == outputs
    assert _runs(project) == {"train-1": 1, "train-2": 1}

    # back to the committed cube: every output is intact, none is in the (new) cache
    _write_params(project, PARAMS)
    again = _sweep(project, "--engine", "local", "--all")
    assert again.returncode == 0, again.stdout + again.stderr
    assert ("6 item(s) had their outputs intact in the workspace but missing from the DVC cache: committed, not "
            "run again") in again.stdout.splitlines(), again.stdout
    assert again.stdout.splitlines()[-1] == ("sweep: 0 done, 6 committed to the cache as they were, 0 failed, "
                                             "0 blocked, 0 up to date (skipped)")
    assert _runs(project) == {"train-1": 1, "train-2": 1}  # nothing ran again
    assert sum(p.stat().st_size for p in small_cache.rglob("*") if p.is_file()) > 2 * OUT_BYTES
    _assert_clean_and_no_op(project)


@pytest.mark.slow
def test_a_full_disk_during_the_sweep_is_one_line_and_the_next_sweep_commits_what_finished(project, small_cache,
                                                                                           tmp_path):
    """A cold run (nothing measured, so nothing refused up front) with the cache on 1 MiB: train@5 writes to
    /dev/full (a job's ENOSPC), train@1..4 finish, then the commit fills the cache. With a larger cache the next
    sweep commits the four without running them and runs train@5 and what needs it."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    (project / "train.py").write_text(BIG_TRAIN_PY)
    _write_params(project, {**PARAMS, "cube": {"x": [1, 2, 3, 4, 5]}})
    _dvc(project, "cache", "dir", str(small_cache))
    run = _sweep(project, "--engine", "local", "--all", env=_env(FULL="5"))
    assert run.returncode == 75, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    failed = next(i for i, ln in enumerate(lines) if ln.startswith("failed train@5 "))
    assert re.fullmatch(r"failed train@5 \(job \d+, attempt 1, not retried\): no space left on device: OSError: "
                        r"\[Errno 28\] No space left on device; log \S+", lines[failed]), lines[failed]
    assert re.fullmatch(rf"  free now: workspace {re.escape(str(project))} [\d.]+ [KMG]?i?B, DVC cache "
                        rf"{re.escape(str(small_cache))} [\d.]+ [KMG]?i?B", lines[failed + 1]), lines[failed + 1]
    assert re.fullmatch(
        r"error: no space left on device writing \S+ while committing the finished items to the DVC cache \(No space "
        rf"left on device\); free now: workspace {re.escape(str(project))} [\d.]+ \w+, DVC cache "
        rf"{re.escape(str(small_cache))} [\d.]+ \w+; (\d) of 5 item\(s\) committed, the others keep their outputs in "
        r"the workspace and the next sweep commits them without running them: free space \(or `dvc cache dir "
        r"<path>` on a larger disk\), then run again\n", run.stderr), run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert _runs(project) == {"train-1": 1, "train-2": 1, "train-3": 1, "train-4": 1}

    _dvc(project, "cache", "dir", str(tmp_path / "large-cache"))
    again = _sweep(project, "--engine", "local", "--all")
    assert again.returncode == 0, again.stdout + again.stderr
    summary = again.stdout.splitlines()[-1]
    found = re.fullmatch(r"sweep: 7 done(, (\d) recovered from a killed sweep)?(, (\d) committed to the cache as they "
                         r"were)?, 0 failed, 0 blocked, 0 up to date \(skipped\)", summary)
    assert found and int(found.group(2) or 0) + int(found.group(4) or 0) == 5, again.stdout  # up, train@1..4
    assert _runs(project) == {"train-1": 1, "train-2": 1, "train-3": 1, "train-4": 1, "train-5": 1}  # only @5 ran
    _assert_clean_and_no_op(project)
