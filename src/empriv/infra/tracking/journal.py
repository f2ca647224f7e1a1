"""The journal of a run: each stage's part, already scrubbed, kept under ``<root>/wandb/empriv-journal/`` (one
JSON file and one lock per run), from which every stage writes the whole run again; and the run's local copies: an
older copy is deleted only once the new one is finished (:func:`retire_older_copies`), so the last complete copy of a
run is never deleted."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from empriv.infra.tracking import transaction_log
from empriv.infra.tracking.transaction_log import CorruptTransactionLog, LogNotFinished, wait_for_finished_log

log = logging.getLogger("empriv.tracking")

#: the parts of a configuration's run, in the order a full rewrite replays them
SECTIONS = ("train", "audit", "score", "analysis")
#: subdirectory of the W&B directory holding the journals (and their locks)
JOURNAL_DIR = "empriv-journal"


def journal_dir(root: Path) -> Path:
    return Path(root) / "wandb" / JOURNAL_DIR


def read_journal(root: str | Path, rid: str) -> dict:
    """The journal of run ``rid`` under ``root`` (empty if there is none)."""
    path = journal_dir(Path(root)) / f"{rid}.json"
    if not path.exists():
        return {"sections": {}}
    return json.loads(path.read_text(encoding="utf-8"))


@contextlib.contextmanager
def journal_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            import fcntl
        except ImportError:  # not POSIX: no concurrent stages to serialise
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def journal_lock_if_free(path: Path) -> Iterator[bool]:
    """The journal's lock if no other process holds it: yields True while held, False (not waiting) when another
    process has it — a stage's tracker holds its run's lock from start to finish, minutes of training."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            import fcntl
        except ImportError:  # not POSIX: no concurrent stages to serialise
            yield True
            return
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(?P<rest>.+)$")


def local_copies(root: str | Path, rid: str) -> list[Path]:
    """The run directories of run ``rid`` under ``<root>/wandb`` (offline or online copies; W&B appends ``-1``,
    ``-2`` … to a directory name that exists already, as for two copies started in the same second)."""
    wandb_dir = Path(root) / "wandb"
    if not wandb_dir.is_dir():
        return []
    same = re.compile(re.escape(rid) + r"(?:-\d+)?")
    return sorted(p for p in wandb_dir.iterdir()
                  if p.is_dir() and (m := _RUN_DIR.match(p.name)) and same.fullmatch(m.group("rest")))


def retire_older_copies(rid: str, new: Path, older: Iterable[Path], *, timeout: float | None = None) -> bool:
    """Delete the ``older`` local copies of run ``rid`` once its new copy ``new`` is finished: W&B's
    ``run.finish()`` returns before the new copy's transaction log is written (:mod:`~empriv.infra.tracking.
    transaction_log`), so wait up to ``timeout`` seconds for it (default: ``FINISH_TIMEOUT_S`` there). A new copy
    that does not finish in time, or whose log is corrupt, keeps the older copies (one warning line): the last
    complete copy is never deleted. True when the new copy is finished (and the older ones are gone)."""
    older = [p for p in older if Path(p).resolve() != Path(new).resolve()]
    timeout = transaction_log.FINISH_TIMEOUT_S if timeout is None else timeout
    try:
        wait_for_finished_log(new, timeout=timeout)
    except (LogNotFinished, CorruptTransactionLog) as err:
        if older:
            log.warning("W&B: the new local copy of run %s is not finished, the %d older one(s) are kept: %s", rid,
                        len(older), err)
        else:
            log.warning("W&B: the new local copy of run %s is not finished: %s", rid, err)
        return False
    for old in older:
        shutil.rmtree(old, ignore_errors=True)
    return True


def discard_copy(run_dir: Path, *, timeout: float | None = None) -> None:
    """Delete the local copy ``run_dir`` of a run that failed (finished with a non-zero exit code), once W&B has
    stopped writing it (or after ``timeout`` seconds): deleted while W&B's service still writes the log, the
    directory could come back with files in it, and count as a copy of the run."""
    timeout = transaction_log.FINISH_TIMEOUT_S if timeout is None else timeout
    try:
        wait_for_finished_log(run_dir, timeout=timeout)
    except (LogNotFinished, CorruptTransactionLog):
        pass
    shutil.rmtree(run_dir, ignore_errors=True)


def empty_section() -> dict:
    return {"config": {}, "tags": [], "axes": {}, "rows": [], "summary": {}, "tables": {}, "images": {}}


def ordered_sections(sections: dict) -> list[str]:
    return [s for s in SECTIONS if s in sections] + sorted(s for s in sections if s not in SECTIONS)


def merged_sections(sections: dict, key: str) -> dict:
    out: dict = {}
    for s in ordered_sections(sections):
        out.update(sections[s].get(key) or {})
    return out


def journal_digest(journal: dict) -> str:
    """What an offline copy is written from: the run's identity and its sections."""
    keep = {k: journal.get(k) for k in ("project", "group", "name", "job_type", "run_id", "sections")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, allow_nan=False).encode()).hexdigest()


def dump_journal(root: Path, rid: str, journal: dict) -> None:
    from empriv.io import atomic_path

    path = journal_dir(root) / f"{rid}.json"
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(journal, indent=1, allow_nan=False) + "\n", encoding="utf-8")
