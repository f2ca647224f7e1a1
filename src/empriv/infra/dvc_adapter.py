"""The one module that imports DVC: every question the project asks of DVC's Python API goes through a small
named function here, so that a DVC upgrade breaks this file (and its contract test, tests/infra/test_dvc_adapter.py,
which runs each function against a real tiny DVC project with the pinned DVC) and nothing else. Running ``dvc`` as a
subprocess (``dvc repro``, ``dvc metrics diff``, ``dvc exp show``) needs no adapter: the command line is DVC's stable
interface. DVC is imported inside the functions: importing this module costs nothing, and works without DVC.

What it offers:

- **the pipeline as data** (:func:`open_pipeline`): the stages of a project (address, DVC file, command, working
  directory), the dependency graph over addresses, which stages changed (:func:`changed_stages`), which dvc.lock
  entries dvc.yaml no longer has — all from one repository object under DVC's repository lock;
- **running and committing stages** as ``dvc repro`` does: :class:`RunCacheRestorer` (outputs removed, then DVC's
  run-cache asked; or outputs intact but missing from the cache: :func:`only_missing_from_cache`),
  :func:`commit_stages` (``dvc commit -f`` of many stages, one lock-file dump per DVC file), :func:`status_of`,
  :func:`stale_lock_entries` / :func:`remove_lock_entries`;
- **sizes and places**: :func:`lock_out_sizes` (what dvc.lock records of each output), :func:`cache_settings`
  (the cache directory and link types);
- **the run-cache with a remote**: :func:`uncached_outputs`, :func:`push_run_cache`, :func:`pull_run_cache`;
- **small readers**: :func:`read_at_revision` (a DVC-tracked file at a git revision), :func:`metrics_files` (the
  metrics files declared at a revision, and which of them cannot be read), :func:`interpolated_str`
  (a value as DVC interpolates it into a stage name), :func:`dvc_version`, :func:`quiet_logging`.

**Which stages would ``dvc repro`` run?** ``Stage.changed()`` is what ``dvc repro`` asks of every stage: the stage's
definition against its dvc.lock entry (``changed_stage``), then each dependency's and each output's ``status()``.
Asked stage by stage, two costs grow with the number of stages and have nothing to do with the answer:

- **DVC's read/write lock.** ``changed()``, and the two checks inside it, each take DVC's rwlock
  (``.dvc/tmp/rwlock``, a JSON file read and rewritten on every acquire and every release): six rewrites per stage.
  Rewriting truncates a file that holds data, and on ext4 (this machine) each such truncation waits for the disk,
  ≈ 4 ms: ≈ 2.8 s for the 115 stages of the default pipeline, whatever the CPU does (docs/timing.md).
- **The params file.** Each stage's params dependency parses params.yaml again (``load_path`` has no cache):
  115 parses of the same 15 KB, ≈ 1 s of CPU.

:func:`changed_stages` asks exactly the same questions of DVC — the undecorated ``_changed_deps`` and
``changed_outs`` behind ``Stage.changed`` — once per stage, while holding one read lock over the deps and outputs
of every stage asked about (what the per-stage locks held, taken together), and with each params file parsed
once while it keeps its inode, size and modification time (the test DVC's own state database applies to data
files). The caller holds DVC's repository lock, as ``dvc repro`` does.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator


# ----------------------------------------------------------------------------- small readers
def dvc_version() -> str:
    """The installed DVC's version (the contract test compares it with the pin of requirements.lock)."""
    from dvc import __version__

    return __version__


def interpolated_str(value: Any) -> str:
    """A matrix value as DVC interpolates it into a command line and a stage name (``1e-05``, ``true``, …). Without
    DVC (validating outside the pipeline) ``str()``, which is what DVC's ``to_str`` does for numbers and strings."""
    try:
        from dvc.parsing.interpolate import to_str
    except ImportError:
        return str(value)
    return to_str(value)


def read_at_revision(root: str | Path, path: str, rev: str | None) -> str:
    """The text of ``path`` (relative to the project ``root``) at git revision ``rev``, through DVC: a file DVC tracks
    is read from its cache. Raises when the file is absent at that revision."""
    import dvc.api

    return dvc.api.read(path, repo=str(root), rev=rev)


def metrics_files(root: str | Path, rev: str | None) -> dict[str, str | None]:
    """The metrics files the pipeline declares at git revision ``rev`` (None: the working tree), repository-relative,
    each with None when DVC can read it there, else why not in a few words (``does not exist``, ``JSON file structure
    is corrupted``). A ValueError names a revision git does not know."""
    from dvc.repo import Repo
    from dvc.scm import RevError

    with Repo(str(root)) as repo:
        try:
            found = repo.metrics.show(revs=None if rev is None else [rev], hide_workspace=False, on_error="return")
        except RevError as err:
            raise ValueError(f"{err} (in {root})") from None
    # the working tree is "" when it is the only revision asked, "workspace" beside others (DVC's brancher)
    result = next((r for k, r in found.items() if (k in ("", "workspace")) == (rev is None)), {})
    if "error" in result:
        raise ValueError(f"the metrics of {rev or 'the working tree'} cannot be listed: {_unreadable(result['error'])}")
    return {path: None if "error" not in f else _unreadable(f["error"]) for path, f in result.get("data", {}).items()}


def _unreadable(err: BaseException) -> str:
    """Why DVC could not read a file, in a few words (its parse errors without the path they repeat)."""
    from dvc.utils.serialize import ParseError

    if isinstance(err, FileNotFoundError):
        return "does not exist"
    if isinstance(err, ParseError) and ", " in str(err):
        return str(err).split(", ", 1)[1]
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


@contextlib.contextmanager
def quiet_logging() -> Iterator[None]:
    """While inside, DVC (in this process) says warnings and errors only: its progress bars (hashing, lock waits,
    the cache check of ``dvc status``: drawn unless the ``dvc.progress`` / ``dvc_data.callbacks`` logger is above
    ERROR) and info lines ("Updating lock file") would break through a progress bar of ours."""
    quiet = {"dvc": logging.WARNING, "dvc.progress": logging.CRITICAL, "dvc_data": logging.WARNING,
             "dvc_data.callbacks": logging.CRITICAL}
    levels = {name: logging.getLogger(name).level for name in quiet}
    for name, level in quiet.items():
        logging.getLogger(name).setLevel(max(level, logging.getLogger(name).getEffectiveLevel()))
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


# ----------------------------------------------------------------------------- which stages changed
def _unlocked(stage: Any, name: str):
    """The method ``name`` of the stage without DVC's ``@rwlocked`` wrapper (funcy keeps it as ``__wrapped__``)."""
    method = getattr(type(stage), name)
    return getattr(method, "__wrapped__", method).__get__(stage)


def stage_changed(stage: Any) -> bool:
    """``Stage.changed()`` (no ``allow_missing``, no ``upstream``) without taking DVC's rwlock: the caller holds a read
    lock over the stage's deps and outputs. Same order and short-circuits as DVC: the definition, then (unless the
    stage is frozen) a callback or always-changed stage, then the deps, then the outputs."""
    if stage.changed_stage():
        return True
    if not stage.frozen and (stage.is_callback or stage.always_changed):
        return True
    if not stage.frozen and _unlocked(stage, "_changed_deps")():
        return True
    return bool(_unlocked(stage, "changed_outs")())


def only_missing_from_cache(stage: Any) -> bool:
    """True when DVC's ``Stage.changed()`` holds for ``stage`` only because some of its cached outputs are not in the
    DVC cache (a cache on a full disk, a cache emptied or moved): the definition and the deps are as dvc.lock has
    them, and every output exists in the workspace with the hash dvc.lock records (DVC's ``Output.status`` answers
    "not in cache" before it looks at the workspace, so that is checked here). Such outputs are intact: committing
    them (what ``dvc commit`` does) is all a run would achieve. The caller holds a read lock, as for
    :func:`stage_changed`."""
    if stage.changed_stage() or (not stage.frozen and (stage.is_callback or stage.always_changed)):
        return False
    if not stage.frozen and _unlocked(stage, "_changed_deps")():
        return False
    missing = False
    for out in stage.outs:
        if not out.use_cache or not out.hash_info:
            if out.status():
                return False
            continue
        if out.workspace_status():  # deleted, modified, new
            return False
        missing = missing or out.changed_cache()
    return missing


def _lockable_paths(stages: Iterable[Any]) -> list[str]:
    """The paths DVC's ``@rwlocked(read=["deps", "outs"])`` would lock for these stages (repo and database deps have
    nothing to lock), each once."""
    from dvc.dependency.db import AbstractDependency
    from dvc.dependency.repo import RepoDependency

    paths = (item.fs_path for stage in stages for attr in ("deps", "outs") for item in getattr(stage, attr)
             if not isinstance(item, (RepoDependency, AbstractDependency)))
    return list(dict.fromkeys(paths))


@contextlib.contextmanager
def read_locked(repo: Any, stages: Iterable[Any]) -> Iterator[None]:
    """DVC's rwlock, taken once for reading over the deps and outputs of all ``stages`` (a LockError, as from
    ``dvc repro``, when another DVC process writes one of them)."""
    from dvc.rwlock import rwlock

    with rwlock(repo.tmp_dir, repo.fs, " ".join(sys.argv), _lockable_paths(stages), [],
                repo.config["core"].get("hardlink_lock", False)):
        yield


@contextlib.contextmanager
def params_parsed_once() -> Iterator[dict]:
    """While inside: DVC's loaders of params files (``dvc.utils.serialize.LOADERS``, what ``load_path`` uses for a
    params dependency and for dvc.yaml's ``vars``) parse a local file once while its inode, size and mtime stay the
    same; every caller gets its own copy of the parsed data. Yields the cache (path → parses), for tests."""
    from dvc.utils import serialize

    loaders = serialize.LOADERS
    saved = dict(loaders)
    cache: dict[tuple, Any] = {}
    parses: dict[str, int] = {}

    def once(load):
        def load_once(path, fs=None, **kwargs):
            if fs is not None and getattr(fs, "protocol", None) != "local":
                return load(path, fs=fs, **kwargs)
            try:
                st = os.stat(path)
            except (OSError, TypeError, ValueError):
                return load(path, fs=fs, **kwargs)
            key = (os.fspath(path), st.st_ino, st.st_size, st.st_mtime_ns, tuple(sorted(kwargs.items())))
            if key not in cache:
                cache[key] = load(path, fs=fs, **kwargs)
                parses[os.fspath(path)] = parses.get(os.fspath(path), 0) + 1
            return copy.deepcopy(cache[key])

        return load_once

    for suffix in (".yaml", ".yml", ".json", ".toml", ".py"):
        loaders[suffix] = once(loaders[suffix])  # the defaultdict's default (load_yaml) for a missing suffix
    try:
        yield parses
    finally:
        loaders.clear()
        loaders.update(saved)


def changed_stages(repo: Any, stages: Iterable[Any]) -> dict[Any, bool]:
    """``{stage: Stage.changed()}`` for every stage, under one read lock and one parse per params file. The caller
    holds DVC's repository lock (``dvc.repo.lock_repo``) and works from the repository's root, as for
    ``Stage.changed``."""
    stages = list(stages)
    with params_parsed_once(), read_locked(repo, stages):
        return {stage: stage_changed(stage) for stage in stages}


# ----------------------------------------------------------------------------- the pipeline as data
@dataclass(frozen=True)
class StageInfo:
    """One stage of a project as DVC resolved it (a matrix item is a stage of its own)."""

    address: str  # DVC's name: train@eps8-b128-… (``sub/dvc.yaml:name`` for another DVC file)
    dvcfile: str  # the absolute, resolved path of its DVC file
    commands: list[str]  # the resolved cmd (one entry per line of a list cmd)
    wdir: str  # absolute working directory of the command
    deps: tuple[str, ...] = ()  # absolute paths of its file and directory deps (params files apart)
    outs: tuple[str, ...] = ()  # absolute paths of its outputs
    params: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (absolute params file, its keys; () = the whole file)
    always_runs: bool = False  # DVC runs it every time (``always_changed``, or a callback stage: no deps)


def _stage_paths(stage: Any) -> dict:
    """The deps, outputs and params of a DVC stage as plain paths (for :class:`StageInfo`)."""
    from dvc.dependency.db import AbstractDependency
    from dvc.dependency.param import ParamsDependency
    from dvc.dependency.repo import RepoDependency

    deps, params = [], []
    for dep in stage.deps:
        if isinstance(dep, ParamsDependency):
            params.append((str(Path(dep.fs_path).resolve()), tuple(dep.params)))
        elif not isinstance(dep, (RepoDependency, AbstractDependency)) and getattr(dep.fs, "protocol", "") == "local":
            deps.append(str(Path(dep.fs_path).resolve()))
    return {"deps": tuple(deps), "outs": tuple(str(Path(out.fs_path).resolve()) for out in stage.outs),
            "params": tuple(params), "always_runs": bool(stage.is_callback or stage.always_changed)}


class Pipeline:
    """The stages of a project and their graph, from one repository object (see :func:`open_pipeline`).

    ``stages``: every stage of the project in DVC's index order; ``graph``: a networkx ``DiGraph`` over their
    addresses, an edge from a stage to each stage it depends on (DVC's own graph, nodes and edges in its order)."""

    def __init__(self, repo: Any):
        import networkx as nx

        self._repo = repo
        index = repo.index
        self._index = index
        self._by_address = {s.addressing: s for s in index.stages}
        self.stages = [StageInfo(address=s.addressing, dvcfile=str(Path(s.dvcfile.path).resolve()),
                                 commands=list(s.cmd if isinstance(s.cmd, list) else [s.cmd]), wdir=str(s.wdir),
                                 **_stage_paths(s))
                       for s in index.stages]
        self.graph = nx.relabel_nodes(index.graph, {s: s.addressing for s in index.graph}, copy=True)

    def changed(self, addresses: Iterable[str]) -> dict[str, bool]:
        """``{address: Stage.changed()}`` of these stages (:func:`changed_stages`: one read lock, one parse per
        params file)."""
        answers = changed_stages(self._repo, [self._by_address[a] for a in addresses])
        return {stage.addressing: changed for stage, changed in answers.items()}

    def missing_from_cache(self, addresses: Iterable[str]) -> set[str]:
        """Of these stages, those whose only change is outputs missing from the DVC cache while the workspace holds
        them intact (:func:`only_missing_from_cache`): to commit, not to run again."""
        stages = [self._by_address[a] for a in addresses]
        if not stages:
            return set()
        with params_parsed_once(), read_locked(self._repo, stages):
            return {s.addressing for s in stages if only_missing_from_cache(s)}

    def lock_entries_not_in(self, dvc_yaml: str | Path) -> list[str]:
        """:func:`stale_lock_entries` of the DVC file ``dvc_yaml`` (an absolute, resolved path) against this index."""
        return _lock_entries_not_in(self._index, str(dvc_yaml))


@contextlib.contextmanager
def open_pipeline(root: str | Path) -> Iterator[Pipeline]:
    """The :class:`Pipeline` of the project at ``root``, read under DVC's repository lock (as ``dvc repro`` holds it),
    from ``root`` (DVC names stages relative to the working directory) and with each params file parsed once (for
    dvc.yaml's ``vars`` and every stage's params). Reads, never writes (but for DVC's hash cache in .dvc/tmp)."""
    from dvc.repo import Repo, lock_repo

    repo = Repo(str(root))
    try:
        with contextlib.chdir(root), lock_repo(repo), params_parsed_once():
            yield Pipeline(repo)
    finally:
        repo.close()


# ----------------------------------------------------------------------------- dvc.lock entries
def _lock_entry_names(lock: Path) -> list[str]:
    """The stage names of a dvc.lock ([] when there is none), read as plain YAML (libyaml when available)."""
    import yaml

    if not lock.exists():
        return []
    with open(lock, encoding="utf-8") as fh:
        return list((yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}).get("stages") or {})


def _lock_entries_not_in(index: Any, dvc_yaml: str) -> list[str]:
    """:func:`stale_lock_entries` against an index DVC has already built (no second repository)."""
    known = {s.name for s in index.stages if str(Path(s.dvcfile.path).resolve()) == dvc_yaml}
    return sorted(name for name in _lock_entry_names(Path(dvc_yaml).with_suffix(".lock")) if name not in known)


def stale_lock_entries(root: Path) -> list[str]:
    """Entries of ``root/dvc.lock`` whose stage no longer exists in ``root/dvc.yaml`` (a matrix item of a value
    dropped from the cube, a renamed stage). DVC never removes them, and it re-reads and rewrites the whole lock
    file after every stage, so they slow down every later run (the default lock had grown to twice its size)."""
    from dvc.repo import Repo

    if not (root / "dvc.lock").exists():
        return []
    repo = Repo(str(root))
    try:
        with contextlib.chdir(root):
            return _lock_entries_not_in(repo.index, str(root / "dvc.yaml"))
    finally:
        repo.close()


def remove_lock_entries(root: Path, names: list[str]) -> None:
    """Remove the entries ``names`` from ``root/dvc.lock``, under DVC's repository lock, the file's formatting kept."""
    from dvc.repo import Repo, lock_repo
    from dvc.utils.serialize import modify_yaml

    repo = Repo(str(root))
    try:
        with contextlib.chdir(root), lock_repo(repo), modify_yaml(root / "dvc.lock") as data:
            for name in names:
                data["stages"].pop(name, None)
    finally:
        repo.close()


# ----------------------------------------------------------------------------- running and committing stages
class RunCacheRestorer:
    """As ``dvc repro`` does before a stage runs: remove its outputs, then try DVC's run-cache (an identical earlier
    run's outputs are checked out). One DVC repository object for all the stages asked about, opened at the first
    (opening one and building its index takes ~1 s with the default pipeline: per stage it would hold up every job
    launch of a sweep)."""

    def __init__(self, root: Path):
        self.root = root
        self._repo = None
        self._stages: dict = {}

    def _stage(self, address: str) -> Any:
        from dvc.repo import Repo

        if self._repo is None:
            self._repo = Repo(str(self.root))
            self._stages = {s.addressing: s for s in self._repo.index.stages}
        return self._stages[address]

    def unchanged(self, address: str) -> bool:
        """DVC's ``Stage.changed`` now, against the stage's dvc.lock entry: False when a dependency or an output
        differs (a sweep commits at the end, so the lock still holds what the stage last ran with)."""
        from dvc.repo import lock_repo

        with contextlib.chdir(self.root):
            stage = self._stage(address)
            with lock_repo(self._repo), read_locked(self._repo, [stage]):  # one read lock, not three
                return not stage_changed(stage)

    def missing_from_cache(self, address: str) -> bool:
        """:func:`only_missing_from_cache` of the stage now, against its dvc.lock entry."""
        from dvc.repo import lock_repo

        with contextlib.chdir(self.root):
            stage = self._stage(address)
            with lock_repo(self._repo), read_locked(self._repo, [stage]):
                return only_missing_from_cache(stage)

    def restore(self, address: str) -> bool:
        """The stage's outputs removed; True when the run-cache had them (they are then checked out)."""
        from dvc.repo import lock_repo
        from dvc.stage.cache import RunCacheNotFoundError

        with contextlib.chdir(self.root):
            stage = self._stage(address)
            with lock_repo(self._repo):
                stage.remove_outs(ignore_remove=False, force=False)
                try:
                    self._repo.stage_cache.restore(stage)
                except RunCacheNotFoundError:
                    return False
                return True

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None


def commit_stages(root: Path, addresses: list[str], committed: Callable[[str], None] | None = None) -> None:
    """What ``dvc commit -f <address>`` does for each stage (hash deps and outputs, store the outputs in the cache and
    the run-cache), under DVC's repository lock, but each DVC file's lock entries written in one go: DVC re-reads and
    rewrites the whole lock file per dump, so committing stages one by one costs time quadratic in their number
    (``Repo.commit`` takes a single target). ``committed(address)`` is called after each stage's outputs are in the
    cache (DVC has re-linked them into the workspace by then). When a stage fails (a full cache disk: ``OSError``
    ENOSPC), the stages committed before it still get their lock entries, then the error is raised."""
    from dvc.repo import Repo, lock_repo

    repo = Repo(str(root))
    try:
        with contextlib.chdir(root), lock_repo(repo):
            stages_by_address = {s.addressing: s for s in repo.index.stages}  # one index (collect_granular re-reads)
            by_file: dict[str, tuple[Any, list[Any]]] = {}
            try:
                for address in addresses:
                    stage = stages_by_address[address]
                    stage.save(allow_missing=False)
                    stage.commit(allow_missing=False, relink=True)
                    by_file.setdefault(stage.dvcfile.path, (stage.dvcfile, []))[1].append(stage)
                    if committed is not None:
                        committed(address)
            finally:
                for dvcfile, stages in by_file.values():
                    dvcfile.dump_stages(stages, update_pipeline=False)
    finally:
        repo.close()


def lock_out_sizes(root: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """Per stage entry of ``root/dvc.lock``, its outputs as dvc.lock records them: ``{path: (bytes, files)}`` (paths
    relative to ``root``, a file counting 1). Read as plain YAML; {} without a lock file."""
    import yaml

    lock = Path(root) / "dvc.lock"
    if not lock.exists():
        return {}
    with open(lock, encoding="utf-8") as fh:
        stages = (yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}).get("stages") or {}
    sizes: dict[str, dict[str, tuple[int, int]]] = {}
    for name, entry in stages.items():
        for out in (entry or {}).get("outs") or []:
            if isinstance(out, dict) and isinstance(out.get("size"), int):
                sizes.setdefault(name, {})[str(out.get("path"))] = (out["size"], int(out.get("nfiles") or 1))
    return sizes


def cache_settings(root: Path) -> tuple[Path, list[str]]:
    """The project's local DVC cache directory (``cache.dir``, else .dvc/cache) and the link types DVC tries, in its
    order (``cache.type``; DVC's default ``reflink, copy``)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        types = repo.config["cache"].get("type") or ["reflink", "copy"]
        return Path(repo.cache.local_cache_dir), [types] if isinstance(types, str) else list(types)


def status_of(root: Path, addresses: Iterable[str]) -> dict:
    """``dvc status`` of the whole project, read afresh from disk (a new repository object, as a new ``dvc status``
    would), kept for ``addresses`` ({}: all of them up to date). Each stage is checked once; per target with its
    deps, the upstream stages they share would be checked once per target."""
    from dvc.repo import Repo

    wanted = set(addresses)
    repo = Repo(str(root))
    try:
        with contextlib.chdir(root):
            return {k: v for k, v in repo.status().items() if k in wanted}
    finally:
        repo.close()
