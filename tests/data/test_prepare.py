"""empriv.data.prepare and empriv.data.splits: the prepared splits on disk."""

from __future__ import annotations

import pytest

from empriv.config import ConfigError, parse_params
from empriv.data.prepare import PLANTED_SECRETS, prepare
from empriv.data.splits import load_texts, split_path
from empriv.io import read_json, read_jsonl

CUBE = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0]}


def _params(**data):
    return parse_params({"data": {"n_train": 200, "n_validation": 10, "n_test": 12, "n_public": 30,
                                  "secret_frequencies": [0.05, 0.01], **data}, "cube": CUBE})


def test_prepare_writes_splits_secrets_and_metrics(tmp_path):
    out, metrics_path = tmp_path / "prepared", tmp_path / "metrics" / "prepare.json"
    m = prepare(_params(), out, metrics_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["train.jsonl", "validation.jsonl", "test.jsonl", "public.jsonl", PLANTED_SECRETS]
    )
    assert m == read_json(metrics_path)
    assert m == {"source": "synthetic-enron", "n_train": 200, "n_validation": 10, "n_test": 12, "n_public": 30,
                 "n_secrets": 2, "train_emails_with_secret": 12}
    secrets = read_jsonl(out / PLANTED_SECRETS)
    assert [s["planned_frequency"] for s in secrets] == [0.05, 0.01]
    train = load_texts("train", out)
    assert len(train) == 200 and [sum(s["text"] in t for t in train) for s in secrets] == [10, 2]
    for split in ("validation", "test", "public"):
        assert not any(s["text"] in t for s in secrets for t in load_texts(split, out))
    rows = read_jsonl(split_path("test", out))
    assert set(rows[0]) == {"id", "text"} and rows[0]["id"] == "test-000000"
    # no secret text in the metrics
    assert not any(s["text"] in metrics_path.read_text() for s in secrets)


def test_prepare_is_deterministic_and_replaces_the_directory(tmp_path):
    out = tmp_path / "prepared"
    prepare(_params(), out, tmp_path / "m.json")
    first = (out / "train.jsonl").read_bytes()
    (out / "stale.jsonl").write_text("x")
    prepare(_params(), out, tmp_path / "m.json")
    assert (out / "train.jsonl").read_bytes() == first
    assert not (out / "stale.jsonl").exists()
    prepare(_params(seed=1), out, tmp_path / "m.json")
    assert (out / "train.jsonl").read_bytes() != first


def test_prepare_empty_real_corpus_fails_clearly_and_writes_nothing(tmp_path):
    corpus = tmp_path / "emails.csv"
    corpus.write_text("file,message\n")
    with pytest.raises(ConfigError, match="data.n_train = 200 but the corpus has only 0 cleaned training emails"):
        prepare(_params(source="enron", path=str(corpus)), tmp_path / "prepared", tmp_path / "m.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emails.csv"]


def test_splits_errors(tmp_path):
    with pytest.raises(ValueError, match="split must be one of train, validation, test, public, got 'dev'"):
        split_path("dev", tmp_path)
    with pytest.raises(ConfigError, match="run the prepare stage first"):
        load_texts("train", tmp_path)


def test_public_split_is_general_english_for_enron_sources(tmp_path):
    """synthetic-enron's public split is the general-English generator, not the e-mails of training;
    real Enron runs get the same generator (another seed)."""
    from empriv.data.prepare import _synthetic_enron_public
    from empriv.data.synthetic import generate_public, secret_values

    out = tmp_path / "prepared"
    prepare(_params(), out, tmp_path / "m.json")
    public = load_texts("public", out)
    secrets = [s["text"] for s in read_jsonl(out / PLANTED_SECRETS)]
    assert public == [e.text for e in generate_public(30, 0, secret_values(secrets))]
    assert not any("enron" in t.lower() for t in public)
    rows = _synthetic_enron_public(_params())
    assert [r["id"] for r in rows] == [f"public-{i:06d}" for i in range(30)]
    assert [r["text"] for r in rows] == [e.text for e in generate_public(30, 1)]
    assert not any("enron" in r["text"].lower() for r in rows)
