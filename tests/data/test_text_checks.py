"""Your own corpus is validated before anything runs (empriv.pipeline.text_checks): each bad file or secret choice
is one line naming the key, the file and what is allowed — and `empriv validate` stops on it with every output as it
was (the reliability suite's project, in a subprocess)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from empriv.config import parse_params
from empriv.pipeline.input_checks import input_errors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
from reliability_project import Project, snapshot  # noqa: E402

CUBE = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}


def _jsonl(path: Path, n: int, **extra) -> Path:
    path.write_text("".join(json.dumps({"text": f"record {i} is about the weather today", **extra}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return path


def _errors(root: Path, path: Path, overrides: Path | None = None, keys=("corpus",), **data) -> list[str]:
    params = parse_params({"data": {"source": "text", "path": path.name, "n_train": 10, **data}, "cube": CUBE,
                           "secrets": {"overrides": overrides.name if overrides else None}}, root=root)
    return input_errors(params, root, cache_path=None, keys=keys)


def test_each_bad_file_is_one_line(tmp_path):
    where = "data.path: c.jsonl: "
    empty = tmp_path / "c.jsonl"
    empty.write_text("")
    assert _errors(tmp_path, empty) == [where + "empty file (allowed: a jsonl file with at least one record)"]
    empty.write_bytes(gzip.compress(b'{"text": "x"}\n'))
    assert _errors(tmp_path, empty) == [where + "a gzip-compressed file, not jsonl text (allowed: a UTF-8 jsonl file; "
                                        "decompress or convert it first)"]
    empty.write_bytes(b"\x00\x01\x02" * 100)
    assert _errors(tmp_path, empty) == [where + "a binary file, not jsonl text (allowed: a UTF-8 jsonl file; decompress "
                                        "or convert it first)"]
    _jsonl(empty, 30)
    assert _errors(tmp_path, empty, text_field="body") == [
        where + "data.text_field: 'body' is missing from 30 of 30 records (first: line 1; allowed: a field every "
                "record has)"]
    assert _errors(tmp_path, empty, user_field="sender") == [
        where + "data.user_field: 'sender' is missing from 30 of 30 records (first: line 1; allowed: a field every "
                "record has)"]
    assert _errors(tmp_path, empty, n_train=40) == [
        where + "the corpus gives 26 training records (30 records, 90 % of them by the seeded split), fewer than "
                "data.n_train = 40 (allowed: data.n_train <= 26)"]
    _jsonl(empty, 8)
    assert _errors(tmp_path, empty) == [
        where + "the corpus gives 8 training records (8 records, 90 % of them by the seeded split), fewer than "
                "data.n_train = 10 (allowed: a corpus with at least 10 training records)"]
    empty.write_text(empty.read_text() + "{broken\n")
    assert _errors(tmp_path, empty) == [where + "line 9: not valid JSON (allowed: one JSON object per line)"]
    (tmp_path / "docs").mkdir()
    assert _errors(tmp_path, tmp_path / "docs") == [
        "data.path: docs: a directory without any file (allowed: a directory of plain-text files, one record each)"]
    parquet = tmp_path / "c.parquet"
    parquet.write_bytes(b"PAR1 this is not parquet")
    assert _errors(tmp_path, parquet) == [
        "data.path: c.parquet: not a readable Parquet file (allowed: a Parquet file polars can read)"]


def test_records_over_max_tokens_are_dropped_before_counting(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", 30)
    assert _errors(tmp_path, path, max_tokens=4, long_records="truncate") == []
    assert _errors(tmp_path, path, max_tokens=4, long_records="drop") == [
        "data.path: c.jsonl: the corpus gives 0 training records (30 records, 30 dropped as longer than "
        "data.max_tokens = 4, 90 % of them by the seeded split), fewer than data.n_train = 10 (allowed: a corpus with "
        "at least 10 training records)"]


def test_secret_choices_are_checked_against_the_corpus(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", 30)
    assert _errors(tmp_path, path, secret_kind="given") == [
        "data.secret_kind: 'given' needs secrets.overrides, the JSONL of your secrets (got secrets.overrides: null; "
        "allowed: a file of {id, prompt, continuation} lines)"]
    given = tmp_path / "given.jsonl"
    given.write_text(json.dumps({"id": "w", "prompt": "is about the", "continuation": " weather"}) + "\n"
                     + json.dumps({"id": "pin", "prompt": "my PIN is", "continuation": " 0000"}) + "\n")
    assert _errors(tmp_path, path, given, secret_kind="given") == [
        "secrets.overrides: given.jsonl line 2 (id pin): the secret occurs in no training record (the first "
        "data.n_train = 10 of data.path; allowed: a string of the training data)"]
    assert _errors(tmp_path, path, given, secret_kind="canaries") == [
        "secrets.overrides: given.jsonl: data.secret_kind canaries scores no secret (allowed: null)"]


def test_the_public_file_is_checked_as_the_corpus_is_and_against_it(tmp_path):
    corpus = _jsonl(tmp_path / "c.jsonl", 30)
    public = tmp_path / "p.jsonl"

    def errors(**data):
        return _errors(tmp_path, corpus, keys=("public",), **{"public": "file", "public_path": public.name, **data})

    where = "data.public_path: p.jsonl: "
    public.write_text("")
    assert errors() == [where + "empty file (allowed: a jsonl file with at least one record)"]
    public.write_bytes(gzip.compress(b'{"text": "x"}\n'))
    assert errors() == [where + "a gzip-compressed file, not jsonl text (allowed: a UTF-8 jsonl file; decompress or "
                                "convert it first)"]
    public.write_text(json.dumps({"body": "a public text"}) + "\n{broken\n" + json.dumps({"text": " "}) + "\n")
    assert errors() == [where + "line 2: not valid JSON (allowed: one JSON object per line)",
                        where + "data.text_field: 'text' is missing from 1 of 3 records (first: line 1; allowed: a "
                                "field every record has)"]
    public.write_text(json.dumps({"text": " "}) + "\n")
    assert errors() == [where + "no record with a non-empty text (1 read, 1 empty; allowed: a file of public records)"]
    # every public record is a record of the corpus (up to whitespace): nothing would be left
    public.write_text("".join(json.dumps({"text": f"record {i} is about\tthe weather today "}) + "\n" for i in (3, 7)))
    assert errors() == [where + "every one of its 2 records is also a record of data.path (the same text up to "
                                "whitespace), so no public record is left (allowed: public records that are not in "
                                "the corpus)"]
    public.write_text(public.read_text() + json.dumps({"text": "a public text is about the weather"}) + "\n")
    assert errors() == []  # one record left: prepare drops the other two and counts them
    # a given secret that the public split would hold: the secrets stage's leak check would refuse it, validation
    # says so first (its id, never its text)
    given = tmp_path / "given.jsonl"
    given.write_text(json.dumps({"id": "w", "prompt": "is about the", "continuation": " weather"}) + "\n")
    assert _errors(tmp_path, corpus, given, keys=("public",), secret_kind="given", public="file",
                   public_path=public.name) == [
        "secrets.overrides: given.jsonl line 1 (id w): the secret occurs in the public split (records of "
        "data.public_path: p.jsonl; allowed: a string the public file does not hold)"]
    # the check belongs to validation's default keys; the corpus check alone does not read the public file
    params = parse_params({"data": {"source": "text", "path": corpus.name, "n_train": 10, "public": "file",
                                    "public_path": public.name}, "cube": CUBE}, root=tmp_path)
    public.write_text("")
    assert input_errors(params, tmp_path, cache_path=None) == [where + "empty file (allowed: a jsonl file with at "
                                                                       "least one record)"]
    assert input_errors(params, tmp_path, cache_path=None, keys=("corpus",)) == []


@pytest.mark.slow
def test_validate_stops_on_a_bad_text_corpus_with_every_output_untouched(tmp_path):
    (tmp_path / "project").mkdir()
    project = Project(tmp_path / "project")
    path = _jsonl(project.root / "corpus.jsonl", 30)
    project.set("data.source", "text").set("data.path", "corpus.jsonl").set("data.text_field", "body")
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line == ("error: data.path: corpus.jsonl: data.text_field: 'body' is missing from 30 of 30 records (first: "
                    "line 1; allowed: a field every record has)")
    assert path.exists()
