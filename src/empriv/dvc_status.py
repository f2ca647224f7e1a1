"""Which stages would ``dvc repro`` run? DVC's own per-stage checks, asked for a whole pipeline at once.

``Stage.changed()`` is what ``dvc repro`` asks of every stage: the stage's definition against its dvc.lock entry
(``changed_stage``), then each dependency's and each output's ``status()``. Asked stage by stage, two costs grow
with the number of stages and have nothing to do with the answer:

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
import os
import sys
from typing import Any, Iterable, Iterator


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
