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


# --------------------------------------------------------------------------- data.public: file (a second file)
def test_a_public_file_is_the_public_split_without_any_record_of_the_corpus(tmp_path):
    from empriv.data.text import drop_private_overlap, overlap_key

    rows = _rows(40)
    path = _write_jsonl(tmp_path / "c.jsonl", rows)
    # the public file: the corpus's format and text field; two of its records are records of the corpus (one
    # re-wrapped and re-spaced): whatever split a record fell in (or none, past n_train), it is not public
    public_rows = [{"body": f"a public-domain sentence number {i}"} for i in range(12)]
    public_rows.insert(2, {"body": "  record number 5 says\nhello to   everyone "})
    public_rows.append({"body": rows[38]["body"]})
    public = _write_jsonl(tmp_path / "p.jsonl", public_rows)
    d = _data(path, text_field="body", public="file", public_path=str(public))
    prepared = text_prepared(d, *load_text_corpus(path, text_field="body"),
                             public=load_text_corpus(public, text_field="body"))
    assert [r["text"] for r in prepared.splits["public"]] == [f"a public-domain sentence number {i}" for i in range(12)]
    assert [r["id"] for r in prepared.splits["public"]][:2] == ["public-000000", "public-000001"]
    assert prepared.metrics()["public"] == {"from": "file", "load": {"format": "jsonl", "n_rows": 14,
                                                                      "n_empty_skipped": 0},
                                            "records": 14, "dropped_private_overlap": 2, "used": 12}
    private = {overlap_key(r["text"]) for s in ("train", "validation", "test") for r in prepared.splits[s]}
    assert not private & {overlap_key(r["text"]) for r in prepared.splits["public"]}
    # n_public caps the split (the first records of the file); the training split is that of the corpus alone
    small = text_prepared(_data(path, text_field="body", public="file", public_path=str(public), n_public=10),
                          *load_text_corpus(path, text_field="body"), public=load_text_corpus(public, text_field="body"))
    assert [r["text"] for r in small.splits["public"]] == [r["text"] for r in prepared.splits["public"][:10]]
    assert small.splits["train"] == prepared.splits["train"]
    assert drop_private_overlap([TextRecord("a  b"), TextRecord("c")], ["a b\n"]) == ([TextRecord("c")], 1)
    # the public file as the corpus itself: nothing is left, an error that shows no text
    with pytest.raises(ConfigError, match=r"data.public_path: .*c.jsonl: every one of its 40 records is also a record "
                                          r"of data.path") as info:
        text_prepared(_data(path, text_field="body", public="file", public_path=str(path)),
                      *load_text_corpus(path, text_field="body"), public=load_text_corpus(path, text_field="body"))
    assert "hello" not in str(info.value)
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"body": "  "}) + "\n")
    with pytest.raises(ConfigError, match=r"data.public_path: .*empty.jsonl: no record with a non-empty text"):
        text_prepared(_data(path, text_field="body", public="file", public_path=str(empty)),
                      *load_text_corpus(path, text_field="body"), public=load_text_corpus(empty, text_field="body"))
    # the built-in public split: no public count, as before
    assert "public" not in text_prepared(_data(path, text_field="body"), *load_text_corpus(path, text_field="body")).counts


def test_public_records_of_the_corpus_that_are_also_private_records_are_dropped(tmp_path):
    rows = _rows(40)
    for r in rows[:5]:
        r["part"] = "public"
    rows[1]["body"] = rows[10]["body"]  # a public record that is also a training record
    path = _write_jsonl(tmp_path / "c.jsonl", rows)
    d = _data(path, text_field="body", split_field="part", public="split")
    prepared = text_prepared(d, *load_text_corpus(path, text_field="body", split_field="part", allow_public=True))
    assert [r["text"] for r in prepared.splits["public"]] == [rows[i]["body"] for i in (0, 2, 3, 4)]
    assert prepared.counts["public"] == {"from": "split", "records": 5, "dropped_private_overlap": 1, "used": 4}


def test_public_file_keys_are_checked(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", _rows(20))
    public = _write_jsonl(tmp_path / "p.jsonl", [{"body": "public"}])
    with pytest.raises(ConfigError, match=r"^data.public: needs data.public_path \(the file of public records\) "
                                          r"\(got 'file'; allowed: builtin, split with data.split_field set, or file "
                                          r"with data.public_path set\)$"):
        _data(path, public="file")
    with pytest.raises(ConfigError, match=r"^data.public_path: applies to data.public: file only, not data.public "
                                          r"'builtin' \(got '.*p.jsonl'; allowed: null, or data.public: file\)$"):
        _data(path, public_path=str(public))
    with pytest.raises(ConfigError, match=r"^data.public_path: file does not exist \(got '.*absent.jsonl'"):
        _data(path, public="file", public_path=str(tmp_path / "absent.jsonl"))
    with pytest.raises(ConfigError, match=r"data.public_path: applies to data.source text only"):
        parse_params({"data": {"public_path": str(public)}, "cube": CUBE})
    d = _data(path, public="file", public_path=str(public))
    assert (d.public, d.public_path) == ("file", str(public))
    params = parse_params({"data": {"source": "text", "path": str(path), "n_train": 10, "public": "file",
                                    "public_path": str(public)}, "cube": CUBE,
                           "inputs": {"corpus": str(path), "public": str(public)}})
    assert params.expected_inputs() == {"corpus": str(path), "public": str(public)} == params.inputs


def test_prepare_stage_reads_the_public_file_and_records_what_it_dropped(tmp_path, monkeypatch, caplog):
    from empriv.pipeline.prepare import main as prepare

    rows = _rows(40)
    path = _write_jsonl(tmp_path / "c.jsonl", rows)
    public = tmp_path / "public.txt"  # another format than the corpus's: each file by its own extension
    public.write_text("".join(f"public line {i}\n" for i in range(12)) + rows[3]["body"] + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    params = parse_params({"data": {"source": "text", "path": "c.jsonl", "text_field": "body", "n_train": 20,
                                    "n_validation": 2, "n_test": 2, "n_public": 30, "public": "file",
                                    "public_path": "public.txt"}, "cube": CUBE}, root=tmp_path)
    with caplog.at_level("WARNING"):
        metrics = prepare(params)
    assert metrics["n_public"] == 12 and metrics["public"]["dropped_private_overlap"] == 1
    assert read_json(tmp_path / "records/prepare.json")["public"] == {
        "from": "file", "load": {"format": "lines", "n_rows": 13, "n_empty_skipped": 0}, "records": 13,
        "dropped_private_overlap": 1, "used": 12}
    assert [r["text"] for r in read_jsonl(tmp_path / "data/prepared/public.jsonl")] == [f"public line {i}"
                                                                                        for i in range(12)]
    assert "1 public record(s) dropped" in caplog.text and rows[3]["body"] not in caplog.text


@pytest.mark.slow
def test_editing_the_public_file_re_runs_prepare(tmp_path):
    """The real DVC pipeline up to prepare in a scratch copy of the repository: the public file is a raw input like
    the corpus (input@public), `dvc status` is clean after the run, an edit in place makes it stale and re-runs
    prepare, which writes the new public split."""
    import shutil
    import subprocess

    from test_pipeline import ROOT, TINY, _env, _ran_stages, _run, write_params

    work = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        if (ROOT / rel).is_file() and not rel.startswith(("metrics/", "records/", "plots/", "dvc.lock", "results/")):
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, work / rel)
    raw = tmp_path / "raw"
    raw.mkdir()
    corpus = _write_jsonl(raw / "corpus.jsonl", _rows(600))
    public = raw / "public.txt"
    public.write_text("".join(f"a public sentence about the river number {i}\n" for i in range(40)), encoding="utf-8")
    data = {**{k: v for k, v in TINY["data"].items() if k != "secret_frequencies"}, "source": "text",
            "path": str(corpus), "text_field": "body", "public": "file", "public_path": str(public)}
    write_params(work, {**TINY, "data": data, "inputs": {"corpus": str(corpus), "public": str(public)}})
    env = _env(tmp_path)
    git = ["git", "-c", "user.name=empriv-test", "-c", "user.email=test@example.invalid"]
    _run(["git", "init", "-q"], work, env)
    _run(git + ["add", "-A"], work, env)
    _run(git + ["commit", "-qm", "fixture"], work, env)
    ran = _ran_stages(_run(["dvc", "repro", "prepare"], work, env))
    assert {"input@corpus", "input@public", "prepare"} <= set(ran)
    fingerprint = read_json(work / "data/inputs/public/fingerprint.json")
    assert fingerprint["param"] == "data.public_path" and fingerprint["files"] == 1
    assert [r["text"] for r in read_jsonl(work / "data/prepared/public.jsonl")][:1] == [
        "a public sentence about the river number 0"]

    def stale() -> set[str]:
        return set(json.loads(_run(["dvc", "status", "--json", "--with-deps", "prepare"], work, env).stdout or "{}"))

    assert stale() == set()
    with open(public, "a", encoding="utf-8") as fh:  # an edit in place: same path, same params
        fh.write("one more public sentence\n" + _rows(600)[7]["body"] + "\n")  # and a record of the corpus
    assert stale() == {"input@public"}  # its dep changed; prepare follows once the new fingerprint is written
    ran = _ran_stages(_run(["dvc", "repro", "prepare"], work, env))
    assert {"input@public", "prepare"} <= set(ran) and "input@corpus" not in ran and stale() == set()
    texts = [r["text"] for r in read_jsonl(work / "data/prepared/public.jsonl")]
    assert len(texts) == 41 and texts[-1] == "one more public sentence"
    assert read_json(work / "records/prepare.json")["public"]["dropped_private_overlap"] == 1
    # a public file that fails its check in place stops input@public before prepare, every output as it was
    before = (work / "data/prepared/public.jsonl").read_bytes()
    public.write_text("")
    proc = _run(["dvc", "repro", "prepare"], work, env, check=False)
    assert proc.returncode != 0 and ("data.public_path: " + str(public) + ": empty file") in proc.stderr
    assert (work / "data/prepared/public.jsonl").read_bytes() == before
