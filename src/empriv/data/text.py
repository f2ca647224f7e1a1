"""Your own corpus (``data.source: text``): loading a local file or folder of records and finding what is wrong
with it.

Formats (``data.text_format``; ``auto`` decides by the path):

- ``jsonl`` (``.jsonl``, ``.json`` with one object per line): one JSON object per line;
- ``csv`` (``.csv``): a header row naming the columns, then one record per row (Python's csv dialect);
- ``parquet`` (``.parquet``): one record per row, read with polars;
- ``lines`` (``.txt`` or any other file): one record per non-empty line, the whole line its text;
- ``files`` (a directory): one record per file — every regular file under it whose name does not start with a dot,
  in sorted path order, its whole content (UTF-8) the text.

A record has a text (``data.text_field``), and optionally a user (``data.user_field``: the privacy unit of
user-level DP, as the sender is for Enron) and a split (``data.split_field``: ``train``, ``validation``, ``test``,
or ``public`` when ``data.public: split``). ``lines`` and ``files`` records have a text only.

The public split (what pre-trains the tokenizer and the tiny base, never private) is the built-in English
(``data.public: builtin``), the corpus's records of split ``public`` (``split``) or every record of a second file
``data.public_path`` read in the same format with the same text field (``file``). A public record that is also a
record of the corpus — the same text up to whitespace (:func:`overlap_key`) — is dropped and counted
(:func:`drop_private_overlap`): the base must have seen no training, validation or test record.

:func:`load_text_corpus` gives the records and a :class:`TextLoad` that counts what was skipped (empty texts) and
lists the problems that make the file unusable, one line each, never a record's text: a missing field, a line
that is not JSON, a text that is not a string, an unknown split value. The ``prepare`` stage raises them;
validation (:mod:`empriv.pipeline.input_checks`) reports them before DVC touches any output.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from empriv.io import csv_rows

FORMATS = ("jsonl", "csv", "parquet", "lines", "files")
SPLIT_VALUES = ("train", "validation", "test", "public")
MAX_PROBLEMS = 5  # problems of one kind listed before "… and N more"


@dataclass(frozen=True)
class TextRecord:
    """One record: its text, its user (privacy unit key) and its split, as the file gives them."""

    text: str
    user: str | None = None
    split: str | None = None


@dataclass
class TextLoad:
    """What loading saw: the format, rows read, records kept, empty texts skipped, and the problems (one line each)."""

    format: str
    n_rows: int = 0
    n_empty: int = 0
    fields: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_metrics(self) -> dict:
        return {"format": self.format, "n_rows": self.n_rows, "n_empty_skipped": self.n_empty}


def resolve_format(path: Path, text_format: str = "auto") -> str:
    """The format of ``path`` (``data.text_format``, or by the path when ``auto``)."""
    if text_format != "auto":
        if text_format not in FORMATS:
            raise ValueError(f"data.text_format must be auto or one of {', '.join(FORMATS)}, got {text_format!r}")
        return text_format
    if path.is_dir():
        return "files"
    suffix = path.suffix.lower()
    return {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}.get(
        suffix, "lines")


def _where(fmt: str) -> str:
    return {"jsonl": "line", "csv": "row", "parquet": "row", "lines": "line", "files": "file"}[fmt]


def _rows(path: Path, fmt: str, load: TextLoad):
    """(location, mapping of field → value) of every row; a row that cannot be read adds a problem."""
    if fmt == "jsonl":
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                load.n_rows += 1
                try:
                    row = json.loads(line)
                except ValueError:
                    load.problems.append(f"line {n}: not valid JSON (allowed: one JSON object per line)")
                    continue
                if not isinstance(row, dict):
                    load.problems.append(f"line {n}: a JSON {type(row).__name__}, not an object (allowed: one JSON "
                                         "object per line)")
                    continue
                yield f"line {n}", row
    elif fmt == "csv":
        records = csv_rows(path, errors="replace")
        first = next(records, None)
        if first is None:
            return
        header = first[1]
        load.fields = [h.strip() for h in header]
        for n, values in records:
            load.n_rows += 1
            if len(values) != len(header):
                load.problems.append(f"row {n}: {len(values)} fields, the header has {len(header)} (allowed: one "
                                     "value per column, quoted as Python's csv module writes them)")
                continue
            yield f"row {n}", dict(zip(load.fields, values))
    elif fmt == "parquet":
        import polars as pl

        try:
            frame = pl.read_parquet(path)
        except Exception:  # noqa: BLE001 — any reader failure means one thing to the user
            load.problems.append("not a readable Parquet file (allowed: a Parquet file polars can read)")
            return
        load.fields = list(frame.columns)
        for n, row in enumerate(frame.iter_rows(named=True), 1):
            load.n_rows += 1
            yield f"row {n}", row
    elif fmt == "lines":
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                text = line.rstrip("\r\n")
                if text.strip():
                    load.n_rows += 1
                    yield f"line {n}", {"text": text}
    else:  # files
        for p in sorted(f for f in path.rglob("*") if f.is_file() and not f.name.startswith(".")):
            load.n_rows += 1
            data = p.read_bytes()
            if b"\0" in data[:8192]:
                load.problems.append(f"file {p.relative_to(path).as_posix()}: binary (allowed: plain-text files)")
                continue
            yield f"file {p.relative_to(path).as_posix()}", {"text": data.decode("utf-8", errors="replace")}


def load_text_corpus(path: str | Path, *, text_format: str = "auto", text_field: str = "text",
                     user_field: str | None = None, split_field: str | None = None,
                     allow_public: bool = False) -> tuple[list[TextRecord], TextLoad]:
    """Every record of the corpus at ``path`` with a non-empty text, and what loading saw (see the module
    docstring). ``lines`` and ``files`` records have their text under the field ``text`` whatever ``text_field``
    says, and no user or split field. Problems are collected, not raised: the caller decides."""
    path = Path(path)
    fmt = resolve_format(path, text_format)
    load = TextLoad(fmt)
    if fmt in ("lines", "files"):
        text_field, extra = "text", [(k, v) for k, v in (("data.user_field", user_field),
                                                           ("data.split_field", split_field)) if v is not None]
        for key, value in extra:
            load.problems.append(f"{key}: {value!r} but {fmt} records have a text only (allowed: null, or a "
                                 "JSONL/CSV/Parquet corpus with that field)")
        user_field = split_field = None
    allowed_splits = SPLIT_VALUES if allow_public else SPLIT_VALUES[:3]
    records: list[TextRecord] = []
    missing: Counter = Counter()
    first_missing: dict[str, str] = {}
    bad_split: Counter = Counter()
    first_bad_split: dict[str, str] = {}
    not_text: list[str] = []
    for where, row in _rows(path, fmt, load):
        absent = [(k, f) for k, f in (("data.text_field", text_field), ("data.user_field", user_field),
                                      ("data.split_field", split_field)) if f is not None and row.get(f) is None]
        for key, f in absent:
            missing[(key, f)] += 1
            first_missing.setdefault((key, f), where)
        if absent:
            continue
        text = row[text_field]
        if not isinstance(text, str):
            not_text.append(f"{where}: data.text_field {text_field!r} holds a {type(text).__name__}, not a string "
                            "(allowed: text)")
            continue
        split = None if split_field is None else str(row[split_field]).strip()
        if split is not None and split not in allowed_splits:
            bad_split[split] += 1
            first_bad_split.setdefault(split, where)
            continue
        if not text.strip():
            load.n_empty += 1
            continue
        user = None if user_field is None else str(row[user_field])
        records.append(TextRecord(text, user, split))
    for (key, f), count in missing.items():
        known = f"; fields: {', '.join(map(str, load.fields))}" if load.fields else ""
        load.problems.append(f"{key}: {f!r} is missing from {count} of {load.n_rows} records (first: "
                             f"{first_missing[(key, f)]}{known}; allowed: a field every record has)")
    load.problems += not_text[:MAX_PROBLEMS] + ([f"… and {len(not_text) - MAX_PROBLEMS} more records whose text is "
                                                 "not a string"] if len(not_text) > MAX_PROBLEMS else [])
    public_note = "" if allow_public else " (public only with data.public: split)"
    for value, count in bad_split.items():
        load.problems.append(f"data.split_field: {count} records have split {value!r} (first: {first_bad_split[value]}; "
                             f"allowed: {', '.join(allowed_splits)}{public_note})")
    return records, load


def overlap_key(text: str) -> str:
    """What two records must share to count as the same record: the text with outer whitespace stripped (as
    Enron's de-duplication compares bodies) and every inner run of whitespace read as one space (a record re-wrapped
    or re-indented in another file is still the same record)."""
    return " ".join(text.split())


def drop_private_overlap(public: list[TextRecord], private: list[str]) -> tuple[list[TextRecord], int]:
    """(the ``public`` records that are no ``private`` text under :func:`overlap_key`, how many were dropped)."""
    keys = {overlap_key(t) for t in private}
    kept = [r for r in public if overlap_key(r.text) not in keys]
    return kept, len(public) - len(kept)


# ---------------------------------------------------------------------------------------------- the splits
SPLIT_FRACTIONS = (0.9, 0.05, 0.05)  # train / validation / test of a seeded split: Enron's (empriv.data.enron)


def limit_length(records: list[TextRecord], tokenizer, max_tokens: int | None, how: str) -> tuple[list[TextRecord], int]:
    """(records, how many had more than ``max_tokens`` tokens of ``tokenizer``): those cut to their first
    ``max_tokens`` tokens (``how = "truncate"``) or left out (``"drop"``); unchanged when ``max_tokens`` is None."""
    if max_tokens is None:
        return list(records), 0
    if how not in ("truncate", "drop"):
        raise ValueError(f"data.long_records must be truncate or drop, got {how!r}")
    ids = tokenizer.encode_batch([r.text for r in records])
    out, n_long = [], 0
    for r, toks in zip(records, ids):
        if len(toks) <= max_tokens:
            out.append(r)
            continue
        n_long += 1
        if how == "truncate":
            out.append(TextRecord(tokenizer.decode(toks[:max_tokens]), r.user, r.split))
    return out, n_long


def split_records(records: list[TextRecord], seed: int, by_field: bool) -> dict[str, list[TextRecord]]:
    """train / validation / test / public lists: by each record's split (``by_field``), else a seeded shuffle into
    :data:`SPLIT_FRACTIONS` (:func:`empriv.data.enron.split_samples`, as Enron's cleaning splits) and no public."""
    if by_field:
        return {s: [r for r in records if r.split == s] for s in SPLIT_VALUES}
    from empriv.data.enron import split_samples

    train, validation, test = split_samples(records, SPLIT_FRACTIONS, seed)
    return {"train": train, "validation": validation, "test": test, "public": []}


def text_prepared(data, records: list[TextRecord], load: TextLoad, tokenizer=None,
                  public: tuple[list[TextRecord], TextLoad] | None = None):
    """The :class:`~empriv.data.prepare.PreparedData` of a text corpus: ``data`` is the ``data`` params section,
    ``records`` and ``load`` from :func:`load_text_corpus` (without problems), ``tokenizer`` the GPT-2 BPE when
    ``data.max_tokens`` is set, ``public`` the records and load of ``data.public_path`` (``data.public: file``). The
    first ``data.n_train`` training records are used (fewer is an error naming how many exist); the public split is
    the built-in English text, the corpus's ``public`` records or the public file's, without any that is also a
    record of the corpus (:func:`drop_private_overlap`; the count is in the metrics)."""
    from empriv.data.prepare import PreparedData, _rows, _take, enron_public, opaque_unit_ids, with_units

    from empriv.config import ConfigError

    d = data
    if load.problems:
        raise ConfigError(*(f"data.path: {d.path}: {p}" for p in load.problems))
    limited, n_long = limit_length(records, tokenizer, d.max_tokens, d.long_records)
    parts = split_records(limited, d.seed, d.split_field is not None)
    train = _take(parts["train"], d.n_train, "training records", "data.n_train")
    users = [r.user for r in train] if d.user_field else [str(i) for i in range(len(train))]
    public_rows, public_counts = _public_split(d, records, parts, public)
    splits = {
        # privacy unit: the user, under an opaque id (no user name leaves the raw corpus); without data.user_field
        # each record is its own unit
        "train": with_units(_rows("train", [r.text for r in train]),
                            opaque_unit_ids(users, "user" if d.user_field else "record")),
        "validation": _rows("validation", [r.text for r in parts["validation"][: d.n_validation]]),
        "test": _rows("test", [r.text for r in parts["test"][: d.n_test]]),
        "public": public_rows if public_rows is not None else enron_public(d),
    }
    counts = {"load": load.as_metrics(), "records": len(records),
              "long_records": {"max_tokens": d.max_tokens, "action": d.long_records, "n_over": n_long},
              "split": "field" if d.split_field else "seeded",
              "available": {s: len(parts[s]) for s in SPLIT_VALUES if s != "public" or d.public == "split"},
              "users": len(set(users)) if d.user_field else None, "secret_kind": d.secret_kind,
              **({"public": public_counts} if public_counts is not None else {})}
    return PreparedData("text", splits, [], counts=counts)


def private_texts(records: list[TextRecord], parts: dict[str, list[TextRecord]]) -> list[str]:
    """Every text the public split must not hold: each record of the corpus that is not itself public, as read and
    as prepared (cut to ``data.max_tokens``)."""
    return ([r.text for r in records if r.split != "public"]
            + [r.text for s in ("train", "validation", "test") for r in parts[s]])


def _public_split(d, records: list[TextRecord], parts: dict[str, list[TextRecord]],
                  public: tuple[list[TextRecord], TextLoad] | None) -> tuple[list[dict] | None, dict | None]:
    """(the public rows, their counts for the metrics) of ``data.public`` split or file; (None, None) for builtin."""
    from empriv.data.prepare import _rows

    from empriv.config import ConfigError

    if d.public == "builtin":
        return None, None
    if d.public == "split":
        candidates, where, extra = parts["public"], "the corpus's records of split 'public'", {}
        if not candidates:
            raise ConfigError("data.public: split but no record has split 'public' (allowed: builtin, or a corpus "
                              "with public records)")
    else:
        if public is None:
            raise ValueError("data.public: file needs the records of data.public_path")
        candidates, public_load = public
        where, extra = f"data.public_path: {d.public_path}", {"load": public_load.as_metrics()}
        if public_load.problems:
            raise ConfigError(*(f"{where}: {p}" for p in public_load.problems))
        if not candidates:
            raise ConfigError(f"{where}: no record with a non-empty text ({public_load.n_rows} read, "
                              f"{public_load.n_empty} empty; allowed: a file of public records)")
    kept, n_dropped = drop_private_overlap(candidates, private_texts(records, parts))
    if not kept:
        raise ConfigError(f"{where}: every one of its {len(candidates)} records is also a record of data.path (the "
                          "same text up to whitespace), so no public record is left (allowed: public records that are "
                          "not in the corpus)")
    rows = _rows("public", [r.text for r in kept[: d.n_public]])
    return rows, {"from": d.public, **extra, "records": len(candidates), "dropped_private_overlap": n_dropped,
                  "used": len(rows)}
