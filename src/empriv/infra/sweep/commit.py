"""The end of a sweep: :func:`collect` commits every finished item in the sweep's own process (dvc.lock, the DVC
cache, the run-cache) and checks ``dvc status``; :func:`prune_lock` drops the dvc.lock entries of stages dvc.yaml no
longer has. See :mod:`empriv.infra.sweep` for the whole story."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from pathlib import Path
from typing import Callable

from empriv.infra.dvc_adapter import commit_stages, remove_lock_entries, stale_lock_entries, status_of
from empriv.infra.sweep.output import SweepResult
from empriv.infra.sweep.plan import Plan
from empriv.infra.sweep.recover import FinishedRecords
from empriv.infra.sweep.space import NO_SPACE, NotEnoughSpace, cache_dir_of, commit_line


@contextlib.contextmanager
def _full_disk_said_once(said: list[str]):
    """While inside, DVC's own log line about a full disk (``ERROR: failed to transfer … No space left on device``)
    is held back, its text kept in ``said``: the sweep says it once, in its own line."""
    def hold(record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None  # DVC: "failed to transfer …" + the OSError
        text = record.getMessage() + (f" - {error}" if error is not None else "")
        if re.search(r"No space left on device|Disk quota exceeded", text):
            said.append(text)
            return False
        return True

    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                      if isinstance(v, logging.Logger))]  # DVC's handlers sit on dvc, dvc_data, …
    handlers = {h for logger in loggers for h in logger.handlers}
    for handler in handlers:
        handler.addFilter(hold)
    try:
        yield said
    finally:
        for handler in handlers:
            handler.removeFilter(hold)


def prune_lock(root: Path, echo: Callable[[str], None], stale: list[str] | None = None) -> list[str]:
    """Remove the stale entries of dvc.lock (:func:`~empriv.infra.dvc_adapter.stale_lock_entries`: stages dvc.yaml no
    longer has); ``stale``: those entries as the plan found them (nothing has been committed since), else read
    again."""
    stale = stale_lock_entries(root) if stale is None else stale
    if stale:
        remove_lock_entries(root, stale)
        shown = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
        echo(f"dvc.lock: removed {len(stale)} entr{'y' if len(stale) == 1 else 'ies'} of stages dvc.yaml no longer "
             f"has ({shown})")
    return stale


def collect(plan: Plan, result: SweepResult, root: Path, echo: Callable[[str], None],
            records: FinishedRecords | None = None) -> None:
    """Commit every finished item in this one process (dvc.lock, cache, run-cache), then check DVC's status. The
    items' records (recover.py) follow their outputs through DVC's re-link and go once the items are committed; a
    full disk stops it in one line (:class:`NotEnoughSpace`), what was committed before kept."""
    order = {i.address: n for n, i in enumerate(plan.items)}  # dependency order, as `dvc repro` commits: DVC adds an
    # output to its directory's .gitignore at its commit, which a directory dep of a later stage hashes
    finished = sorted(result.done + result.restored + result.recovered + result.uncached,
                      key=lambda a: order.get(a, len(order)))
    if not finished:
        return
    if result.recovered:
        echo(f"recovered {len(result.recovered)} finished item(s) of a sweep that was killed: committed, not run again")
    if result.uncached:
        echo(f"{len(result.uncached)} item(s) had their outputs intact in the workspace but missing from the DVC "
             "cache: committed, not run again")
    echo(f"committing {len(finished)} item(s) to dvc.lock and the DVC cache, then dvc status")
    outs = {i.address: i.outs for i in plan.items}
    committed: list[str] = []

    def one_committed(address: str) -> None:
        committed.append(address)
        if records is not None:
            records.refresh_outs(address, outs.get(address, []))

    if records is not None and result.folder is not None:
        records.add([result.folder])  # this sweep's jobs' records
    said: list[str] = []
    try:
        with _full_disk_said_once(said):
            commit_stages(root, finished, committed=one_committed)
    except OSError as err:
        if err.errno not in NO_SPACE:
            raise
        if records is not None:
            records.forget(committed)
        written = next((m.group(1) for m in (re.search(r"-> '([^']+)'", t) for t in said) if m), None)
        if written and not err.filename:  # DVC names the file it was writing in its log line only
            err.filename = written
        raise NotEnoughSpace(commit_line(err, root, cache_dir_of(root), len(committed), len(finished))) from None
    if records is not None:
        records.forget(finished)
    # the whole pipeline's status once, read back from disk, kept for the committed items (each stage is checked once;
    # per target with its deps, the upstream stages they share were checked once per item)
    result.status = status_of(root, finished)
    if result.status:
        echo(f"dvc status after the commit is not clean: {json.dumps(result.status)}")
    else:
        echo(f"committed {len(finished)} item(s) to dvc.lock and the DVC cache; dvc status of them: clean")
    if plan.downstream:
        echo(f"stages below the sweep are now stale: {', '.join(plan.downstream)} (run `dvc repro` to update them)")
