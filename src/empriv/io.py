"""Atomic file output: a stage that fails leaves either the old file or nothing, never half a file; JSON(L) reading
and writing; CSV rows of any size; a file's content digest."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return "inf" if obj > 0 else ("-inf" if obj < 0 else None)
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return _jsonable(obj.item())
    return obj


def unwritable_reason(directory: str | Path) -> str | None:
    """Why nothing can be written in ``directory`` (created if missing; a temporary file written and removed), or
    None when it can."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


def ensure_writable(*targets: str | Path) -> None:
    """Fail now, in one line, when a stage could not write one of its outputs later (after minutes of training):
    each target's directory (a file's or an atomic output directory's parent) is created if missing and a
    temporary file is written there and removed. Raises :class:`empriv.config.ConfigError`."""
    from empriv.config import ConfigError

    problems = []
    for target in targets:
        where = Path(target).parent
        reason = unwritable_reason(where)
        if reason is not None:
            problems.append(f"{where}: cannot write {Path(target).name} there ({reason}), so nothing was run (allowed: "
                            f"a writable directory; fix its permissions, e.g. chmod u+w {where}, or remove what is in "
                            f"the way)")
    if problems:
        raise ConfigError(*problems)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``, on error delete it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o644)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        if tmp_path.is_dir():
            shutil.rmtree(tmp_path, ignore_errors=True)
        else:
            tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``path``; on success it replaces ``path`` whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o755)
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_jsonable(obj), indent=2, sort_keys=False, allow_nan=False) + "\n", encoding="utf-8")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(_jsonable(row), ensure_ascii=False) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def parse_float(value: Any) -> float:
    """Inverse of the JSON encoding above for numbers (``"inf"`` → ``math.inf``)."""
    return float(value)


def file_digest(path: str | Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes (read in blocks, never whole into memory) by ``algorithm`` (a :mod:`hashlib`
    name: ``"sha256"``, ``"md5"`` as DVC records its outputs, …)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, algorithm).hexdigest()


def csv_rows(path: str | Path, *, errors: str) -> Iterator[tuple[int, list[str]]]:
    """(record number, fields) of every CSV record, the header being record 1; fields of any size (e-mail bodies
    exceed the csv module's 128 KiB default). ``errors``: how undecodable UTF-8 is read (``open``'s argument)."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with open(path, newline="", encoding="utf-8", errors=errors) as fh:
        yield from enumerate(csv.reader(fh), 1)
