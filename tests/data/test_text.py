"""data.source: text — loading JSONL / CSV / Parquet / lines / a folder of files, and the prepared splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from empriv.config import ConfigError, parse_params
from empriv.data.text import TextRecord, limit_length, load_text_corpus, resolve_format, split_records, text_prepared
from empriv.io import read_json, read_jsonl

CUBE = {"epsilon": [8], "batch_size": [4], "steps": [2], "learning_rate": [0.01], "seed": [0]}


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(n: int) -> list[dict]:
    return [{"body": f"record number {i} says hello to everyone", "who": f"u{i % 7}",
             "part": "train" if i % 10 < 8 else ("validation" if i % 10 == 8 else "test")} for i in range(n)]


def _data(path, **keys):
    base = {"source": "text", "path": str(path), "n_train": 10, "n_validation": 2, "n_test": 2, "n_public": 20}
    return parse_params({"data": {**base, **keys}, "cube": CUBE}).data


def test_every_format_gives_the_same_records(tmp_path):
    import polars as pl

    rows = _rows(12)
    jsonl = _write_jsonl(tmp_path / "c.jsonl", rows)
    csv_path = tmp_path / "c.csv"
    pl.DataFrame(rows).write_csv(csv_path)
    parquet = tmp_path / "c.parquet"
    pl.DataFrame(rows).write_parquet(parquet)
    want = [TextRecord(r["body"], r["who"], r["part"]) for r in rows]
    for path, fmt in ((jsonl, "jsonl"), (csv_path, "csv"), (parquet, "parquet")):
        assert resolve_format(path) == fmt
        got, load = load_text_corpus(path, text_field="body", user_field="who", split_field="part")
        assert (got, load.problems, load.n_rows, load.format) == (want, [], 12, fmt)
    lines = tmp_path / "c.txt"
    lines.write_text("first line\n\n  \nsecond line\r\n", encoding="utf-8")
    got, load = load_text_corpus(lines)
    assert [r.text for r in got] == ["first line", "second line"] and load.format == "lines"
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text("two\nlines", encoding="utf-8")
    (folder / "sub" / "a.txt").write_text("one", encoding="utf-8")
    (folder / ".hidden").write_text("never", encoding="utf-8")
    got, load = load_text_corpus(folder)
    assert [r.text for r in got] == ["two\nlines", "one"] and load.format == "files"  # one record per file, sorted


def test_problems_are_one_line_each_and_never_show_text(tmp_path):
    rows = [{"body": "a secret text 1"}, {"other": "x"}, {"body": 3}, {"body": "fine", "part": "holdout"}, {"body": " "}]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n[1, 2]\n", encoding="utf-8")
    records, load = load_text_corpus(path, text_field="body")
    assert [r.text for r in records] == ["a secret text 1", "fine"] and load.n_empty == 1
    assert load.problems == [
        "line 6: not valid JSON (allowed: one JSON object per line)",
        "line 7: a JSON list, not an object (allowed: one JSON object per line)",
        "data.text_field: 'body' is missing from 1 of 7 records (first: line 2; allowed: a field every record has)",
        "line 3: data.text_field 'body' holds a int, not a string (allowed: text)",
    ]
    _, load = load_text_corpus(path, text_field="body", split_field="part")
    assert "data.split_field: 1 records have split 'holdout' (first: line 4; allowed: train, validation, test " \
           "(public only with data.public: split))" in load.problems
    _, load = load_text_corpus(tmp_path / "c.jsonl", text_format="lines", user_field="who")
    assert load.problems == ["data.user_field: 'who' but lines records have a text only (allowed: null, or a "
                             "JSONL/CSV/Parquet corpus with that field)"]
    assert not any("secret" in p for p in load.problems)


def test_seeded_split_field_split_units_and_public(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", _rows(40))
    d = _data(path, text_field="body", user_field="who")
    records, load = load_text_corpus(path, text_field="body", user_field="who")
    prepared = text_prepared(d, records, load)
    train = prepared.splits["train"]
    assert len(train) == 10 and len(prepared.splits["validation"]) == 2 and len(prepared.splits["public"]) == 20
    # a seeded 90/5/5 split: 36 / 2 / 2 of 40, the same for the same seed, another for another
    parts = split_records(records, 0, by_field=False)
    assert [len(parts[s]) for s in ("train", "validation", "test", "public")] == [36, 2, 2, 0]
    assert [r["text"] for r in train] == [r.text for r in parts["train"][:10]]
    assert split_records(records, 1, by_field=False)["train"] != parts["train"]
    # units: the user field under opaque ids, numbered by first appearance; without it, one unit per record
    users = [r.user for r in parts["train"][:10]]
    assert [r["unit"] for r in train] == [f"user{sorted(set(users), key=users.index).index(u)}" for u in users]
    alone = text_prepared(_data(path, text_field="body"), *load_text_corpus(path, text_field="body"))
    assert len({r["unit"] for r in alone.splits["train"]}) == 10
    # by the split field: train records in file order; public records form the public split
    rows = _rows(40)
    for r in rows[:5]:
        r["part"] = "public"
    _write_jsonl(path, rows)
    d = _data(path, text_field="body", split_field="part", public="split")
    prepared = text_prepared(d, *load_text_corpus(path, text_field="body", split_field="part", allow_public=True))
    assert [r["text"] for r in prepared.splits["train"]] == [r["body"] for r in rows if r["part"] == "train"][:10]
    assert [r["text"] for r in prepared.splits["public"]] == [r["body"] for r in rows[:5]]
    assert prepared.metrics()["available"] == {"train": 27, "validation": 4, "test": 4, "public": 5}
    with pytest.raises(ConfigError, match=r"data.n_train = 50 but the corpus has only 27 training records"):
        text_prepared(_data(path, text_field="body", split_field="part", public="split", n_train=50),
                      *load_text_corpus(path, text_field="body", split_field="part", allow_public=True))
    with pytest.raises(ConfigError, match=r"data.split_field: 5 records have split 'public'.*public only with"):
        text_prepared(_data(path, text_field="body", split_field="part"),
                      *load_text_corpus(path, text_field="body", split_field="part"))


def test_long_records_are_counted_then_truncated_or_dropped(gpt2_tokenizer):
    records = [TextRecord("short one"), TextRecord("a much longer record with many more words than four"),
               TextRecord("tiny")]
    kept, n_long = limit_length(records, gpt2_tokenizer, 4, "truncate")
    assert n_long == 1 and [r.text for r in kept] == ["short one", "a much longer record", "tiny"]
    kept, n_long = limit_length(records, gpt2_tokenizer, 4, "drop")
    assert n_long == 1 and [r.text for r in kept] == ["short one", "tiny"]
    assert limit_length(records, gpt2_tokenizer, None, "drop") == (records, 0)


def test_text_keys_are_checked(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", _rows(20))
    with pytest.raises(ConfigError, match=r"data.user_field: applies to data.source text only.*got 'who'"):
        parse_params({"data": {"user_field": "who"}, "cube": CUBE})
    with pytest.raises(ConfigError, match=r"data.public: needs data.split_field"):
        _data(path, public="split")
    with pytest.raises(ConfigError, match=r"data.path: file does not exist"):
        _data(tmp_path / "absent.jsonl")


def test_prepare_stage_writes_the_splits_and_the_secret_choice(tmp_path, monkeypatch):
    from empriv.pipeline.prepare import main as prepare

    path = _write_jsonl(tmp_path / "c.jsonl", _rows(40))
    monkeypatch.chdir(tmp_path)
    params = parse_params({"data": {"source": "text", "path": str(path), "text_field": "body", "n_train": 20,
                                    "n_validation": 2, "n_test": 2, "n_public": 30, "secret_kind": "patterns"},
                           "cube": CUBE})
    metrics = prepare(params)
    assert (metrics["source"], metrics["n_train"], metrics["n_public"], metrics["split"]) == ("text", 20, 30, "seeded")
    assert read_json(tmp_path / "data/prepared/text_corpus.json") == {"secret_kind": "patterns"}
    assert len(read_jsonl(tmp_path / "data/prepared/train.jsonl")) == 20
