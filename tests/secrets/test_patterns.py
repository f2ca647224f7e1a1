"""PII-like secrets found by patterns (data.secret_kind: patterns), and the secrets stage's choices for a text corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from empriv.config import ConfigError, parse_params
from empriv.secrets.patterns import count_pii, find_pii, pattern_candidates, with_context


def test_each_kind_is_found_once_where_kinds_overlap():
    text = ("Mail jane.doe@example.org or see https://example.org/a?b=1, call (713) 853-3989 or +1 713.853.3989; "
            "account 123456789012, not 1234567 nor 2001-05-14, www.test.com.")
    found = [(m.kind, m.text) for m in find_pii(text)]
    assert found == [("email", "jane.doe@example.org"), ("url", "https://example.org/a?b=1"),
                     ("phone", "(713) 853-3989"), ("phone", "+1 713.853.3989"), ("digits", "123456789012"),
                     ("url", "www.test.com")]
    assert [m.kind for m in find_pii("see http://a.com/x@y.com/1234567890 now")] == ["url"]  # one span, one kind
    for m in find_pii(text):
        assert text[m.start:m.end] == m.text


def test_counts_are_per_record_and_context_is_the_shared_words():
    texts = ["Please call me at 713-853-3989 today", "Please call me at 713-853-3989. Or 713-853-3989",
             "so please call me at 713-853-3989", "write to a@b.com", "a@b.com"]
    assert count_pii(texts) == [("phone", "713-853-3989", 3), ("email", "a@b.com", 2)]
    # 5-6 words before it are not shared by a majority of the three records; "Please call me at" is, by two
    assert with_context("713-853-3989", texts) == "Please call me at 713-853-3989"
    assert with_context("713-853-3989", texts[1:3]) == "call me at 713-853-3989"  # case differs before "call"
    assert with_context("a@b.com", texts) == "a@b.com"  # 1 of 2 records has "to" before it: not a majority
    assert with_context("a@b.com", texts[4:]) == "a@b.com"  # no context at all
    rows, info = pattern_candidates(texts, top_k=5, min_count=3)
    assert rows == [{"id": "pii-000", "kind": "phone", "text": "Please call me at 713-853-3989", "pii_chars": 12}]
    assert info == {"found": {"url": 0, "email": 1, "phone": 1, "digits": 0},
                    "frequent": {"url": 0, "email": 0, "phone": 1, "digits": 0}}


CUBE = {"epsilon": [8], "batch_size": [8], "steps": [2], "learning_rate": [0.01], "seed": [0]}


def _corpus(path: Path) -> Path:
    rows = []
    for i in range(120):
        body = f"Note {i}: the meeting moved to room {i % 9} and the agenda is unchanged for everyone."
        if i % 4 == 0:
            body += " Reach the desk at 713-555-0142 any time."
        if i % 6 == 0:
            body += " Questions to help.desk@example.com please."
        rows.append({"text": body, "user": f"u{i % 11}"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(tmp_path, monkeypatch, kind: str, overrides: str | None = None):
    from empriv.pipeline.prepare import main as prepare
    from empriv.pipeline.secrets import main as make_secrets
    from empriv.pipeline.tokenizer import main as make_tokenizer

    corpus = _corpus(tmp_path / "corpus.jsonl")
    monkeypatch.chdir(tmp_path)
    params = parse_params({"data": {"source": "text", "path": str(corpus), "user_field": "user", "n_train": 100,
                                    "n_validation": 4, "n_test": 4, "n_public": 300, "secret_kind": kind},
                           "tokenizer": {"vocab_size": 512}, "cube": CUBE,
                           "secrets": {"overrides": overrides, "min_count": 5}})
    prepare(params)
    if not Path("models/tokenizer").exists():
        make_tokenizer(params)
    return make_secrets(params), json.loads(Path("records/secrets.json").read_text())


def test_text_corpus_secret_choices(tmp_path, monkeypatch):
    secrets, record = _run(tmp_path, monkeypatch, "patterns")
    assert [(s["id"], s["kind"]) for s in secrets] == [("pii-000", "phone"), ("pii-001", "email")]
    phone, email = secrets
    assert phone["continuation"] == "-555-0142" and phone["prompt"].endswith("Reach the desk at 713")
    assert email["continuation"] == " help.desk@example.com"
    train = [json.loads(line)["text"] for line in open("data/prepared/train.jsonl")]
    assert phone["occurrences"] == sum(phone["text"] in t for t in train) > 20
    assert record["found"]["phone"] == 1 and record["secret_kind"] == "patterns"
    logged = json.dumps(record)  # ids and numbers only: no secret string in the record
    assert "555" not in logged and "example.com" not in logged

    given = tmp_path / "given.jsonl"
    given.write_text(json.dumps({"id": "desk", "prompt": "Reach the desk at", "continuation": " 713-555-0142"}) + "\n"
                     + json.dumps({"id": "ghost", "prompt": "The vault code is", "continuation": " 4711"}) + "\n")
    with pytest.raises(ConfigError) as err:
        _run(tmp_path, monkeypatch, "given", str(given))
    assert err.value.lines == ["secrets.overrides: secret ghost occurs in no record of the training split (allowed: "
                               "a string of the training data)"]
    given.write_text(json.dumps({"id": "desk", "prompt": "Reach the desk at", "continuation": " 713-555-0142"}) + "\n")
    secrets, record = _run(tmp_path, monkeypatch, "given", str(given))
    assert [(s["id"], s["kind"], s["split_by"], s["occurrences"]) for s in secrets] == [("desk", "given", "override",
                                                                                           phone["occurrences"])]
    secrets, record = _run(tmp_path, monkeypatch, "canaries")
    assert secrets == [] and record["n_secrets"] == 0 and record["secret_kind"] == "canaries"
    assert Path("data/secrets.jsonl").read_text() == ""
