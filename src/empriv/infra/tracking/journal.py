"""The journal of a run: each stage's part, already scrubbed, kept under ``<root>/wandb/empriv-journal/`` (one
JSON file and one lock per run), from which every stage writes the whole run again; and the run's local copies."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

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
