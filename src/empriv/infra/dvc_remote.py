"""The run-cache and a DVC remote: push and pull the run-cache *with* the outputs its entries restore, so another
machine restores those stage runs instead of running them (``tools/pr_report.py run-cache``). Split from
:mod:`empriv.infra.dvc_adapter`, which reads and commits the pipeline."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Transfer:
    """What a run-cache push or pull moved: the run-cache entries, the objects they restore, the objects that failed."""

    entries: int
    transferred: int
    failed: int


def uncached_outputs(root: Path) -> list[str]:
    """The existing outputs declared ``cache: false`` in the project at ``root`` (paths relative to it)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        paths = [Path(out.fs_path).resolve() for stage in repo.index.stages for out in stage.outs if not out.use_cache]
    return sorted(p.relative_to(Path(root).resolve()).as_posix() for p in paths if p.exists())


def _run_cache_objects(repo: Any, entries: Any) -> set:
    """The objects (outputs, cached or not) that the run-cache ``entries`` restore."""
    objs: set = set()
    for hashes in repo.stage_cache.get_used_objs(entries).values():
        objs |= hashes
    return objs


def push_run_cache(root: Path, remote: str | None = None) -> Transfer:
    """Every run-cache entry of ``root``'s DVC cache and every object those entries restore, to the remote
    (``dvc push --run-cache`` of DVC 3.67 sends the entries only: another machine would find the record of a stage
    run but not its outputs, and run the stage again)."""
    from dvc.repo import Repo

    with contextlib.chdir(root), Repo(".") as repo:  # run-cache stages are built relative to the working directory
        entries = repo.stage_cache.push(remote)
        result = repo.cloud.push(_run_cache_objects(repo, entries), remote=remote)
    return Transfer(entries=len(entries), transferred=len(result.transferred), failed=len(result.failed))


def pull_run_cache(root: Path, remote: str | None = None) -> Transfer:
    """The remote's run-cache entries and the objects they restore, into ``root``'s DVC cache: a later ``dvc repro``
    against that cache restores those stage runs instead of running them."""
    from dvc.repo import Repo

    with contextlib.chdir(root), Repo(".") as repo:  # run-cache stages are built relative to the working directory
        entries = repo.stage_cache.pull(remote)
        result = repo.cloud.pull(_run_cache_objects(repo, entries), remote=remote)
    return Transfer(entries=len(entries), transferred=len(result.transferred), failed=len(result.failed))
