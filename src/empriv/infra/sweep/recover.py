"""Finished items of a sweep that was killed: written down by their job, committed by the next sweep, not run again.

A sweep commits what its jobs finished at its end (:func:`~empriv.infra.sweep.schedule._collect`). A sweep killed by
SIGKILL (a lost terminal or session, ``kill -9``, the OOM killer) never gets there: its finished items' outputs sit in
the workspace, uncommitted, and DVC counts those items as changed. So each job, once its command has succeeded,
writes ``<job folder>/finished/<item>.json`` (atomically, :func:`write_record`):

- the item's resolved commands;
- ``deps``: a signature of its deps as they were when the command started — per file under each dep path, its path
  relative to the workspace, size and ``mtime_ns`` (what DVC's own state cache trusts before it re-hashes a file),
  and the MD5 of its content for files up to ``DIGEST_MAX_BYTES``;
- ``params``: the values of the params keys it depends on, read from the params files when the command started;
- ``outs``: the same signature of its outputs after the command ended.

The next sweep (it holds the workspace lock, so no live sweep owns those folders) reads the records of the earlier
job folders of its workspace (:class:`FinishedRecords`). At an item's turn, before its outputs would be removed, a
record counts only when everything still holds now: the same commands and params values, and deps and outputs with
the same signature (outputs complete: every declared output exists). Such an item is committed with the others, not
run; any other record is dropped and the item runs as usual. A dep re-written meanwhile matches only with the same
content: a file with a new ``mtime_ns`` is hashed again and compared with its noted MD5 (the stages above a study's
chunk re-run with the same outputs, DVC re-links a checked-out model, the ``code`` and ``validate`` stages re-write
their small files); a larger file with a new ``mtime_ns``, or another size, does not match. Records are removed once their item is committed. DVC's commit re-links
an output into the workspace (its ``mtime_ns`` changes): the sweep refreshes the record's ``outs`` right after each
item's commit, so a sweep killed during the commit itself leaves records that still match.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from empriv.infra.sweep.leftovers import item_record_path, write_record as _write_json
from empriv.io import file_digest

FINISHED_DIR = "finished"  # in a sweep's job folder
_MISSING = "<missing>"  # a params key the file does not have
#: deps up to this size are noted with the MD5 of their content (a default train item's deps: ~4 MB in all); a larger
#: file (a real model's weights) is read again only if DVC would, so it is noted by size and mtime alone
DIGEST_MAX_BYTES = 64 * 2**20


def _record_path(folder: Path | str, address: str) -> Path:
    return item_record_path(folder, FINISHED_DIR, address)


def _md5(path: str) -> str | None:
    try:
        return file_digest(path, "md5")
    except OSError:
        return None


def signature(paths: list[str], root: str | Path, digests: bool = False) -> dict[str, Any]:
    """``{path relative to root: [size, mtime_ns]}`` of every file under ``paths`` (a directory: ``"dir"`` and its
    files; a path that does not exist: None). With ``digests``, a file entry is ``[size, mtime_ns, md5]``, the MD5
    None above ``DIGEST_MAX_BYTES``. Symbolic links are followed, as DVC hashes their targets."""
    root = str(root)
    sig: dict[str, Any] = {}

    def entry(full: str, st: os.stat_result) -> list:
        if not digests:
            return [st.st_size, st.st_mtime_ns]
        return [st.st_size, st.st_mtime_ns, _md5(full) if st.st_size <= DIGEST_MAX_BYTES else None]

    for path in paths:
        rel = os.path.relpath(path, root)
        if os.path.isdir(path):
            sig[rel] = "dir"
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames.sort()
                for name in sorted(filenames):
                    full = os.path.join(dirpath, name)
                    try:
                        st = os.stat(full)
                    except OSError:
                        sig[os.path.relpath(full, root)] = None
                        continue
                    sig[os.path.relpath(full, root)] = entry(full, st)
        else:
            try:
                st = os.stat(path)
            except OSError:
                sig[rel] = None
                continue
            sig[rel] = entry(path, st)
    return sig


def same_deps(noted: dict[str, Any], deps: list[str], root: str | Path) -> bool:
    """Whether ``deps`` are now as ``noted`` (a :func:`signature`, with or without digests): the same files, each
    with its noted size and mtime, or its noted size and MD5 (the same content written again)."""
    now = signature(deps, root)
    if set(now) != set(noted):
        return False
    for rel, was in noted.items():
        cur = now[rel]
        if not isinstance(was, list) or not isinstance(cur, list):
            if was != cur:
                return False
        elif was[:2] != cur and not (len(was) > 2 and was[2] is not None and was[0] == cur[0]
                                     and _md5(os.path.join(str(root), rel)) == was[2]):
            return False
    return True


def _load_params_file(path: str) -> Any:
    """A params file's data (YAML, JSON, TOML), or raise ``ValueError`` for a kind this module does not read."""
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml", ".json"):
        from empriv.config import read_yaml

        return read_yaml(path)  # JSON is YAML
    if suffix == ".toml":
        import tomllib

        with open(path, "rb") as fh:
            return tomllib.load(fh)
    raise ValueError(f"params file {path}: cannot read a {suffix or 'suffix-less'} file (allowed: yaml, json, toml)")


def _lookup(data: Any, key: str) -> Any:
    node = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def param_values(params: dict[str, list[str]]) -> dict[str, Any] | None:
    """``{params file: {key: value}}`` of the keys an item reads (a file given without keys: its whole data); None
    when a file cannot be read (then no record can match)."""
    values: dict[str, Any] = {}
    for path, keys in sorted(params.items()):
        try:
            data = _load_params_file(path)
        except Exception:  # noqa: BLE001 - missing, unparsable (ruamel's errors are no ValueError), unknown kind
            return None
        values[path] = data if not keys else {k: _lookup(data, k) for k in keys}
    # one JSON round trip: what the record holds and what is compared against it are the same kind of value
    return json.loads(json.dumps(values, default=str, sort_keys=True))


def started_state(deps: list[str], params: dict[str, list[str]], root: str | Path) -> dict[str, Any]:
    """What a job notes when its command starts: the deps' signature and the params values."""
    return {"deps": signature(deps, root, digests=True), "params": param_values(params)}


def write_record(folder: Path | str, address: str, root: str | Path, commands: list[str], started: dict[str, Any],
                 outs: list[str]) -> Path | None:
    """Write ``<folder>/finished/<address>.json`` for an item whose commands succeeded (atomically); None where that
    cannot be done (the record is a safety net: the job's result stands without it)."""
    record = {"address": address, "root": str(Path(root).resolve()), "commands": list(commands),
              "deps": started["deps"], "params": started["params"], "outs": signature(outs, root),
              "finished": time.time()}
    return _write(_record_path(folder, address), record)


_write = _write_json


def _noted(entry: Any) -> Any:
    """A signature entry without its digest (``[size, mtime_ns]``; markers as they are)."""
    return entry[:2] if isinstance(entry, list) else entry


def mismatch(record: dict, address: str, commands: list[str], deps: list[str], outs: list[str],
             params: dict[str, list[str]], root: str | Path) -> str | None:
    """Why ``record`` does not stand for the item now (a few words), None when it does: the same commands and params
    values, deps and outputs with the signature the job left, every output present."""
    if record.get("address") != address or record.get("commands") != list(commands):
        return "its command changed"
    if not outs or not all(os.path.exists(out) for out in outs):
        return "an output is missing"
    if record.get("outs") != signature(outs, root):
        return "its outputs changed since its job ended"
    if record.get("params") is None or record.get("params") != param_values(params):
        return "a params value it reads changed"
    if not isinstance(record.get("deps"), dict) or not same_deps(record["deps"], deps, root):
        return "a dependency changed since its command started"
    return None


class FinishedRecords:
    """The records of finished items in job folders of the workspace ``root`` (a ``sweep.folder`` shared by two
    workspaces holds records of both: only this one's are read). A later folder's record of an item replaces an
    earlier one's."""

    def __init__(self, folders: list[Path], root: str | Path):
        self.root = str(Path(root).resolve())
        self._paths: dict[str, list[Path]] = {}  # address -> its record files, oldest first
        self._records: dict[str, dict] = {}
        self.add(folders)

    def add(self, folders: list[Path]) -> None:
        for folder in folders:
            for path in sorted((Path(folder) / FINISHED_DIR).glob("*.json")):
                try:
                    record = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue  # an unreadable record cannot vouch for anything
                if not isinstance(record, dict) or record.get("root") != self.root or "address" not in record:
                    continue
                self._paths.setdefault(record["address"], []).append(path)
                self._records[record["address"]] = record

    def __contains__(self, address: str) -> bool:
        return address in self._records

    def __len__(self) -> int:
        return len(self._records)

    def check(self, item: Any) -> str | None:
        """Why the record of ``item`` (a plan :class:`~empriv.infra.sweep.plan.Item` that has one) does not stand for
        it now; None when it does."""
        if item.always_runs:
            return "its stage always runs"
        return mismatch(self._records[item.address], item.address, item.commands, item.deps, item.outs, item.params,
                        self.root)

    def refresh_outs(self, address: str, outs: list[str]) -> None:
        """The outputs of ``address`` were just committed (DVC re-linked them, same content): the record's ``outs`` say
        how they are now, and so do the ``deps`` of the other records that noted those files as they were, so that a
        sweep killed (or out of space) before the end of its commit leaves records that still match."""
        record = self._records.get(address)
        if record is None or not self._paths.get(address):
            return
        before, after = record["outs"], signature(outs, self.root)
        record["outs"] = after
        _write(self._paths[address][-1], record)
        # the same content under a new mtime: a record that noted these files as its deps, as they were, follows too
        for other, data in self._records.items():
            deps = data.get("deps") or {}
            moved = [k for k, v in after.items()
                     if k in deps and _noted(deps[k]) == before.get(k) and v != before.get(k)]
            if other != address and moved and self._paths.get(other):
                deps.update({k: after[k] + deps[k][2:] for k in moved})
                _write(self._paths[other][-1], data)

    def forget(self, addresses: list[str]) -> None:
        """Remove the records of ``addresses`` (committed, or run again)."""
        for address in addresses:
            self._records.pop(address, None)
            for path in self._paths.pop(address, []):
                try:
                    path.unlink()
                except OSError:
                    pass
