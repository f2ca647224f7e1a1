"""No-op runs (issue 30): the sweep's staleness check asks DVC's own per-stage questions once for the whole pipeline
(``empriv.dvc_status``), ``make repro`` no longer repeats them through ``dvc repro``, and the ``empriv`` commands of
``make repro`` do not import the libraries of the others.

The DVC tests run in a temporary git + DVC repository holding the small project of tests/test_sweep.py (its
``train@`` items read a params key too, so several stages share the params file).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from empriv.dvc_status import changed_stages, params_parsed_once, stage_changed

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_sweep import DVC_YAML, PARAMS, TRAIN_PY, _write_params  # noqa: E402  (the sweep tests' small project)

# every train item reads base.offset as well: three stages with a params dependency on params.yaml
DVC_YAML_PARAMS = DVC_YAML.replace("    cmd: {PY} train.py ${{item.x}}".format(PY=PY),
                                   "    cmd: {PY} train.py ${{item.x}}\n    params:\n      - base.offset".format(PY=PY))


@pytest.fixture(scope="module")
def _reproduced(tmp_path_factory):
    repo = tmp_path_factory.mktemp("noop") / "project"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([PY, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    assert "params:\n      - base.offset\n    deps:\n      - train.py" in DVC_YAML_PARAMS
    (repo / "dvc.yaml").write_text(DVC_YAML_PARAMS)
    (repo / "train.py").write_text(TRAIN_PY)
    _write_params(repo, PARAMS)
    run = subprocess.run([PY, "-m", "dvc", "repro", "-q"], cwd=repo, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return repo


@pytest.fixture
def project(_reproduced, tmp_path):
    """A reproduced copy of the small project (nothing to do)."""
    repo = tmp_path / "project"
    shutil.copytree(_reproduced, repo, symlinks=True)
    return repo


@contextlib.contextmanager
def _opened(repo: Path):
    from dvc.repo import Repo, lock_repo

    dvc = Repo(str(repo))
    try:
        with contextlib.chdir(repo), lock_repo(dvc):
            yield dvc, list(dvc.index.stages)
    finally:
        dvc.close()


def _both(repo: Path) -> tuple[dict[str, bool], dict[str, bool]]:
    """(changed_stages, DVC's own Stage.changed() stage by stage), by address."""
    with _opened(repo) as (dvc, stages):
        ours = {s.addressing: v for s, v in changed_stages(dvc, stages).items()}
    with _opened(repo) as (dvc, stages):
        theirs = {s.addressing: bool(s.changed()) for s in stages}
    return ours, theirs


def test_changed_stages_answers_as_stage_changed_does(project):
    """Up to date, a changed param, a changed dep, a deleted and an edited output, a frozen stage: the same answer
    as DVC's Stage.changed for every stage."""
    ours, theirs = _both(project)
    assert ours == theirs == {a: False for a in ["up", "train@1", "train@2", "total", "score@1", "score@2"]}

    _write_params(project, {**PARAMS, "base": {"offset": 2}})  # up and the train items read base.offset
    ours, theirs = _both(project)
    assert ours == theirs and {a for a, v in ours.items() if v} == {"up", "train@1", "train@2"}
    _write_params(project, PARAMS)

    (project / "out" / "score-1.txt").unlink()
    ours, theirs = _both(project)
    assert ours == theirs and {a for a, v in ours.items() if v} == {"score@1"}
    (project / "train.py").write_text((project / "train.py").read_text() + "\n# edited\n")
    (project / "total.txt").write_text("6")
    ours, theirs = _both(project)
    assert ours == theirs and {a for a, v in ours.items() if v} == {"train@1", "train@2", "total", "score@1",
                                                                   "score@2"}

    lock = (project / "dvc.yaml").read_text().replace("  total:\n", "  total:\n    frozen: true\n")
    (project / "dvc.yaml").write_text(lock)  # a frozen stage: its deps are not asked, its outputs are
    ours, theirs = _both(project)
    assert ours == theirs and ours["total"] is True  # total.txt is gone


def test_one_read_lock_and_one_parse_of_the_params_file(project, monkeypatch):
    """DVC's rwlock file is edited twice (acquire, release) for the whole check, not six times per stage, and
    params.yaml is parsed once for the three stages that read it."""
    import dvc.rwlock
    from dvc.utils.serialize import _yaml

    edits = []
    edit = dvc.rwlock._edit_rwlock
    monkeypatch.setattr(dvc.rwlock, "_edit_rwlock", lambda *a, **k: edits.append(1) or edit(*a, **k))
    parses = []
    parse = _yaml.parse_yaml
    monkeypatch.setattr(_yaml, "parse_yaml", lambda text, path, **k: parses.append(Path(path).name) or
                        parse(text, path, **k))
    with _opened(project) as (dvc_repo, stages):
        edits.clear(), parses.clear()
        assert not any(changed_stages(dvc_repo, stages).values())
        assert len(edits) == 2 and parses.count("params.yaml") == 1
        edits.clear(), parses.clear()
        assert not any(s.changed() for s in stages)  # DVC stage by stage, for comparison
        assert len(edits) == 6 * len(stages) and parses.count("params.yaml") == 3
    # a params file edited in between is parsed again (keyed by inode, size and mtime)
    with params_parsed_once() as seen:
        from dvc.utils.serialize import load_path
        from dvc.fs import localfs

        first = load_path(str(project / "params.yaml"), localfs)
        first["base"]["offset"] = 99  # a caller's copy: the next one is unaffected
        assert load_path(str(project / "params.yaml"), localfs)["base"]["offset"] == 1
        _write_params(project, {**PARAMS, "base": {"offset": 7, "pad": "x" * 10}})
        assert load_path(str(project / "params.yaml"), localfs)["base"]["offset"] == 7
        assert seen == {str(project / "params.yaml"): 2}
    from dvc.utils.serialize import LOADERS, load_yaml

    assert LOADERS[".yaml"] is load_yaml  # DVC's loaders are back


def test_a_writer_holding_an_output_blocks_the_check_as_it_blocks_dvc(project):
    from dvc.lock import LockError
    from dvc.rwlock import rwlock

    with _opened(project) as (dvc_repo, stages):
        with rwlock(dvc_repo.tmp_dir, dvc_repo.fs, "another dvc repro", [], [str(project / "total.txt")], False):
            with pytest.raises(LockError):
                changed_stages(dvc_repo, stages)
            with pytest.raises(LockError):
                next(s for s in stages if s.addressing == "total").changed()
        assert not any(changed_stages(dvc_repo, stages).values())  # released: the check runs


def test_stage_changed_needs_no_lock_of_its_own(project):
    """stage_changed calls the undecorated checks: with DVC's rwlock made to fail, it still answers."""
    import dvc.rwlock

    with _opened(project) as (dvc_repo, stages):
        original = dvc.rwlock._edit_rwlock
        dvc.rwlock._edit_rwlock = None  # any per-stage lock would now fail
        try:
            assert [stage_changed(s) for s in stages] == [False] * len(stages)
        finally:
            dvc.rwlock._edit_rwlock = original


def test_make_repro_runs_no_dvc_repro_after_the_sweep():
    """The sweep checks every stage with DVC's Stage.changed and commits with a status check: make repro's
    steps are validate, the sweep, the warm worker's stop and the summary."""
    text = (ROOT / "Makefile").read_text()
    recipe = text[text.index("\nrepro: ") + 1:].split("\n\n")[0].splitlines()[1:]
    commands = [re.sub(r"^@?\$\(BIN\)/", "", line.strip().split("  #")[0]) for line in recipe]
    assert commands == ["empriv validate --fill-defaults", "empriv sweep --engine local --all",
                        "python -m empriv.infra.warm --stop", "empriv summary"]


@pytest.mark.parametrize("command, imported", [("summary --help", False), ("validate --help", False),
                                               ("sweep --help", False), ("privacy --help", True),
                                               ("--help", True), ("diff --help", True)])
def test_make_repros_commands_leave_the_other_commands_modules_unimported(command, imported):
    code = ("import sys; from empriv.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m in ('empriv.diff', 'empriv.privacy.cli', "
            "'empriv.audit.cli', 'empriv.analysis.cli'))))")
    run = subprocess.run([PY, "-c", "import json\n" + code, *command.split()], capture_output=True, text=True,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert (loaded == ["empriv.analysis.cli", "empriv.audit.cli", "empriv.diff", "empriv.privacy.cli"]) is imported, \
        loaded
