"""The DVC adapter's contract with the pinned DVC: every function of :mod:`empriv.infra.dvc_adapter` run against real
tiny DVC projects in tmp_path, with the installed DVC, which must be the version requirements.lock pins (so that a
DVC upgrade makes this file the first to fail, saying so). And no module under src/, tools/ or stages/ but the
adapter imports DVC (running ``dvc`` as a subprocess is fine).

The projects: the small one of tests/infra/test_sweep.py (``up`` → ``train@1``, ``train@2`` → ``total`` →
``score@1``, ``score@2``), reproduced, with its ``train@`` items reading a params key too (so several stages share
the params file); and for the run-cache with a remote, a one-stage project with a cached output and an uncached
metrics file. The tests of :func:`changed_stages` compare it with DVC's own ``Stage.changed``, stage by stage.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from empriv.infra import dvc_adapter
from empriv.infra.dvc_adapter import (RunCacheRestorer, changed_stages, commit_stages, dvc_version, interpolated_str,
                                      open_pipeline, params_parsed_once, quiet_logging, read_at_revision, read_locked,
                                      remove_lock_entries, stage_changed, stale_lock_entries, status_of)
from empriv.infra.dvc_remote import pull_run_cache, push_run_cache, uncached_outputs

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
ADAPTER = "src/empriv/infra/dvc_adapter.py"
REMOTE = "src/empriv/infra/dvc_remote.py"  # the adapter's run-cache push and pull, split off for size
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_sweep import DVC_YAML, PARAMS, TRAIN_PY, _write_params  # noqa: E402  (the sweep tests' small project)

# every train item reads base.offset as well: three stages with a params dependency on params.yaml
DVC_YAML_PARAMS = DVC_YAML.replace("    cmd: {PY} train.py ${{item.x}}".format(PY=PY),
                                   "    cmd: {PY} train.py ${{item.x}}\n    params:\n      - base.offset".format(PY=PY))
ADDRESSES = ["up", "train@1", "train@2", "total", "score@1", "score@2"]
GIT = ["git", "-c", "user.name=empriv-test", "-c", "user.email=test@empriv.invalid"]


# ----------------------------------------------------------------------------- the pin, and the adapter alone
def _pin(text: str) -> str | None:
    found = re.search(r"""^\s*["']?dvc==([^\s"',;#]+)""", text, re.M)
    return found[1] if found else None


def test_the_installed_dvc_is_the_version_requirements_lock_pins():
    pinned = _pin((ROOT / "requirements.lock").read_text())
    assert pinned, "requirements.lock pins no dvc==<version>"
    assert _pin((ROOT / "pyproject.toml").read_text()) == pinned, "pyproject.toml and requirements.lock pin other DVCs"
    installed = dvc_version()
    assert installed == pinned, (
        f"DVC {installed} is installed, requirements.lock pins dvc=={pinned}: {ADAPTER} is written against the pin "
        f"(it calls DVC's internal API). Upgrading DVC? Run this file against the new version, fix the adapter "
        f"where its contract broke, then move the pin in requirements.lock and pyproject.toml.")


def dvc_imports(path: Path) -> list[str]:
    """The DVC modules a Python file imports (``import dvc…``, ``from dvc… import``, ``importlib.import_module`` or
    ``__import__`` of a literal ``dvc…``), anywhere in it (lazy imports inside functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, str) and \
                (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) == "__import__"):
            found.append(node.args[0].value)
    return [m for m in found if m == "dvc" or m.startswith("dvc.")]


def test_no_module_but_the_adapter_imports_dvc(tmp_path):
    offenders = {}
    for folder in ("src", "tools", "stages"):
        for path in sorted((ROOT / folder).rglob("*.py")) if (ROOT / folder).is_dir() else []:
            rel = path.relative_to(ROOT).as_posix()
            if rel not in (ADAPTER, REMOTE) and (mods := dvc_imports(path)):
                offenders[rel] = sorted(set(mods))
    assert not offenders, f"modules that import DVC beside {ADAPTER} and {REMOTE} (call a function of the adapter " \
                          "instead): " \
                          f"{offenders}"
    # the check sees every way of importing, and not a subprocess or a name that merely starts with dvc
    assert {"dvc.repo", "dvc.rwlock", "dvc.api"} <= set(dvc_imports(ROOT / ADAPTER))
    probe = tmp_path / "probe.py"
    probe.write_text("import importlib, subprocess\nimport dvc_data\nfrom dvc import api\n"
                     "def f():\n    import dvc.stage.cache as c\n    importlib.import_module('dvc.lock')\n"
                     "    __import__('dvc')\n    subprocess.run(['dvc', 'repro'])\n")
    assert dvc_imports(probe) == ["dvc", "dvc.stage.cache", "dvc.lock", "dvc"]


# ----------------------------------------------------------------------------- small readers
def test_interpolated_str_spells_values_as_dvc_does_in_stage_names():
    assert [interpolated_str(v) for v in (1e-05, 0.001, 64, True, False, "lr", 0.5)] == \
        ["1e-05", "0.001", "64", "true", "false", "lr", "0.5"]


def test_quiet_logging_raises_dvcs_loggers_and_puts_them_back():
    logging.getLogger("dvc").setLevel(logging.DEBUG)
    try:
        with quiet_logging():
            assert logging.getLogger("dvc").level == logging.WARNING
            assert logging.getLogger("dvc.progress").level == logging.CRITICAL
            assert logging.getLogger("dvc_data.callbacks").level == logging.CRITICAL
        assert logging.getLogger("dvc").level == logging.DEBUG
    finally:
        logging.getLogger("dvc").setLevel(logging.NOTSET)


# ----------------------------------------------------------------------------- the small project
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


def test_open_pipeline_gives_the_stages_their_graph_and_what_changed(project):
    with open_pipeline(project) as pipeline:
        assert [s.address for s in pipeline.stages] == ADDRESSES
        train = pipeline.stages[1]
        assert train.dvcfile == str((project / "dvc.yaml").resolve()) and train.wdir == str(project)
        assert train.commands == [f"{PY} train.py 1"]
        assert list(pipeline.graph.successors("score@1")) == ["train@1", "total"]  # DVC's order: deps as listed
        assert set(pipeline.graph.successors("total")) == {"train@1", "train@2"}
        assert set(pipeline.graph.nodes) == set(ADDRESSES) and pipeline.graph.number_of_edges() == 8
        assert pipeline.changed(ADDRESSES) == {a: False for a in ADDRESSES}
        assert pipeline.lock_entries_not_in(str((project / "dvc.yaml").resolve())) == []
    _write_params(project, {**PARAMS, "base": {"offset": 2}})
    with open_pipeline(project) as pipeline:
        assert {a for a, v in pipeline.changed(ADDRESSES).items() if v} == {"up", "train@1", "train@2"}


def test_stale_lock_entries_are_found_and_removed(project):
    assert stale_lock_entries(project) == []
    lock = project / "dvc.lock"
    _write_params(project, {**PARAMS, "cube": {"x": [1]}})  # train@2, score@2 leave dvc.yaml, not dvc.lock
    assert stale_lock_entries(project) == ["score@2", "train@2"]
    with open_pipeline(project) as pipeline:
        assert pipeline.lock_entries_not_in(str((project / "dvc.yaml").resolve())) == ["score@2", "train@2"]
    before = lock.read_text()
    remove_lock_entries(project, ["score@2", "train@2"])
    after = lock.read_text()
    assert "train@2:" in before and "train@2:" not in after and "score@2:" not in after
    assert after.startswith("schema: '2.0'\nstages:\n") and "train@1:" in after  # the rest kept, as DVC writes it
    assert stale_lock_entries(project) == []
    assert stale_lock_entries(project / "runs") == []  # no dvc.lock: nothing stale


def test_restore_from_the_run_cache_commit_and_status(project):
    restorer = RunCacheRestorer(project)
    try:
        assert restorer.unchanged("score@1")
        (project / "out" / "score-1.txt").unlink()
        assert not restorer.unchanged("score@1")
        assert restorer.restore("score@1")  # dvc repro ran it with these deps: the run-cache has its outputs
        assert (project / "out" / "score-1.txt").read_text() == "25"  # 10 * (1 + 1) + (2 + 3)
        assert restorer.unchanged("score@1")
        (project / "train.py").write_text(TRAIN_PY.replace("int(x) + offset", "int(x) + offset + 100"))
        assert not restorer.unchanged("train@1")
        assert not restorer.restore("train@1")  # never run with this train.py: outputs removed, nothing restored
        assert not (project / "runs" / "train-1.txt").exists()
    finally:
        restorer.close()
    subprocess.run([PY, "train.py", "1"], cwd=project, check=True)  # the item's command, as a sweep job runs it
    assert (project / "runs" / "train-1.txt").read_text() == "102"
    assert set(status_of(project, ["train@1", "train@2"])) == {"train@1", "train@2"}
    commit_stages(project, ["train@1"])
    lock = (project / "dvc.lock").read_text()
    assert status_of(project, ["train@1"]) == {}  # committed: its lock entry holds what it ran with
    assert set(status_of(project, ["train@1", "train@2"])) == {"train@2"}  # train.py changed under it too
    assert "train@1:" in lock
    again = RunCacheRestorer(project)
    try:
        assert again.restore("train@1")  # the commit stored the run in the run-cache
    finally:
        again.close()
    (project / "train.py").write_text(TRAIN_PY)
    with open_pipeline(project) as pipeline:
        assert pipeline.changed(["train@1", "train@2"]) == {"train@1": True, "train@2": False}


# ----------------------------------------------------------------------------- which stages changed (issue 30)
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
    assert ours == theirs == {a: False for a in ADDRESSES}

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
        edits.clear()
        with read_locked(dvc_repo, stages):  # the lock alone: one acquire
            assert len(edits) == 1
        assert len(edits) == 2
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


# ----------------------------------------------------------------------------- the run-cache and a remote, git
MAKE_PY = """\
import json, sys
open("model.txt", "w").write("weights " + sys.argv[1])
json.dump({"acc": 0.5}, open("metrics.json", "w"))
"""


@pytest.mark.slow
def test_uncached_outputs_run_cache_push_and_pull_and_a_file_at_a_revision(tmp_path):
    """A project with a cached output and an uncached metrics file (the latter keeps the stage in the run-cache):
    the run-cache pushed with its objects to a local remote, the local cache emptied, pulled back and restored; the
    cached output read at a git revision through DVC."""
    repo = tmp_path / "one"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([PY, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    (repo / "make.py").write_text(MAKE_PY)
    (repo / "dvc.yaml").write_text(f"stages:\n  make:\n    cmd: {PY} make.py 1\n    deps:\n      - make.py\n"
                                   "    outs:\n      - model.txt\n    metrics:\n      - metrics.json:\n"
                                   "          cache: false\n")
    subprocess.run([PY, "-m", "dvc", "repro", "-q"], cwd=repo, check=True)
    assert uncached_outputs(repo) == ["metrics.json"]
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "one"], cwd=repo, check=True)
    assert read_at_revision(repo, "model.txt", "HEAD") == "weights 1"  # gitignored: from DVC's cache
    assert json.loads(read_at_revision(repo, "metrics.json", "HEAD")) == {"acc": 0.5}
    with pytest.raises(Exception):
        read_at_revision(repo, "absent.json", "HEAD")
    # the metrics files declared at a revision (here a stage's), each readable there or why not
    assert dvc_adapter.metrics_files(repo, "HEAD") == dvc_adapter.metrics_files(repo, None) == {"metrics.json": None}
    (repo / "metrics.json").write_text("{broken")
    assert dvc_adapter.metrics_files(repo, None) == {"metrics.json": "JSON file structure is corrupted"}
    with pytest.raises(ValueError, match="unknown Git revision 'no-such-rev'"):
        dvc_adapter.metrics_files(repo, "no-such-rev")

    remote = tmp_path / "remote"
    subprocess.run([PY, "-m", "dvc", "remote", "add", "-q", "--local", "-d", "r", str(remote)], cwd=repo, check=True)
    pushed = push_run_cache(repo)
    assert (pushed.entries, pushed.failed) == (1, 0) and pushed.transferred >= 1
    shutil.rmtree(repo / ".dvc" / "cache")
    (repo / "model.txt").unlink()
    (repo / "metrics.json").unlink()
    assert dvc_adapter.metrics_files(repo, None) == {"metrics.json": "does not exist"}
    assert not RunCacheRestorer(repo).restore("make")  # an empty cache: nothing to restore
    pulled = pull_run_cache(repo)
    assert (pulled.entries, pulled.failed) == (1, 0) and pulled.transferred == pushed.transferred
    restorer = RunCacheRestorer(repo)
    try:
        assert restorer.restore("make") and restorer.unchanged("make")
    finally:
        restorer.close()
    assert (repo / "model.txt").read_text() == "weights 1"
    assert dvc_adapter.status_of(repo, ["make"]) == {}
