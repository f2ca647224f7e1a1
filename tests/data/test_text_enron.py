"""The Enron sample as your own corpus: exported to JSONL and run as ``data.source: text`` with mined secrets, it gives
the same training records, units, held-out and public splits and the same secrets as ``data.source: enron``.

The export is Enron's cleaning matched: the e-mails its cleaning keeps (de-duplicated, top senders and receivers,
boilerplate, tabs, >= 30 GPT-2 tokens), in the order they had before the seeded 90/5/5 split, with the sender as the
user field; the text source's own seeded split (the same function, data.seed) must then give back the same splits.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from empriv.config import parse_params
from empriv.io import read_jsonl
from empriv.pipeline.prepare import main as prepare
from empriv.pipeline.secrets import main as make_secrets
from empriv.pipeline.tokenizer import main as make_tokenizer

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CUBE = {"epsilon": [8, "inf"], "batch_size": [16], "steps": [2], "learning_rate": [0.01], "seed": [0]}
SIZES = {"n_train": 600, "n_validation": 100, "n_test": 100, "n_public": 300, "seed": 3}


def _params(**data):
    return parse_params({"data": {**data, **SIZES}, "cube": CUBE, "tokenizer": {"vocab_size": 512},
                         "secrets": {"ngram": 10, "top_k": 60, "min_count": 5}})


def export_cleaned_enron(csv_path: Path, out: Path, seed: int) -> int:
    """Write the e-mails Enron's cleaning keeps, in their order before its seeded split, as JSONL {text, from}."""
    from empriv.data.enron import clean_enron, load_enron
    from empriv.models.tokenizer import load_gpt2

    gpt2 = load_gpt2()
    emails, _ = load_enron(csv_path)
    cleaned = clean_enron(emails, lambda t: len(gpt2.encode(t)), top_n=100, seed=seed)
    # split_samples put order[:n_val] in validation, the next n_test in test, the rest in train: invert it
    shuffled = list(cleaned.validation) + list(cleaned.test) + list(cleaned.train)
    order = list(range(len(shuffled)))
    random.Random(seed).shuffle(order)
    kept = [None] * len(shuffled)
    for i, j in enumerate(order):
        kept[j] = shuffled[i]
    with open(out, "w", encoding="utf-8") as fh:
        for e in kept:
            fh.write(json.dumps({"text": e.body, "from": e.sender}) + "\n")
    return len(kept)


@pytest.mark.slow
def test_enron_exported_to_jsonl_gives_the_same_records_and_secrets(tmp_path, monkeypatch):
    csv_path = SHARED / "enron" / "emails.csv"
    if not csv_path.exists():
        pytest.skip(f"real Enron sample not found at {csv_path} (../shared/data is only beside the repo in development/CI)")
    enron, text = tmp_path / "enron", tmp_path / "text"
    enron.mkdir()
    text.mkdir()
    monkeypatch.chdir(enron)
    as_enron = _params(source="enron", path=str(csv_path))
    prep_enron = prepare(as_enron)
    make_tokenizer(as_enron)
    secrets_enron = make_secrets(as_enron)

    jsonl = tmp_path / "enron.jsonl"
    assert export_cleaned_enron(csv_path, jsonl, SIZES["seed"]) == prep_enron["cleaning"]["min_tokens"] == 2384
    monkeypatch.chdir(text)
    as_text = _params(source="text", path=str(jsonl), user_field="from", secret_kind="mined")
    prep_text = prepare(as_text)
    for split in ("train", "validation", "test", "public"):  # ids, texts and (train) opaque sender units, in order
        assert read_jsonl(text / f"data/prepared/{split}.jsonl") == read_jsonl(enron / f"data/prepared/{split}.jsonl"), split
    assert prep_text["train_units"] == prep_enron["train_units"] and prep_text["n_train"] == 600
    # the same public split trains the same tokenizer (tested elsewhere): reuse it rather than train it twice
    shutil.copytree(enron / "models", text / "models")
    secrets_text = make_secrets(as_text)

    assert len(secrets_text) == len(secrets_enron) >= 2
    assert [s["id"] for s in secrets_text] == [s["id"].replace("enron-", "text-") for s in secrets_enron]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "id"} for r in rows]  # noqa: E731
    assert strip(secrets_text) == strip(secrets_enron)  # text, prompt, continuation, occurrences, window, token ids
    for split in ("validation", "test"):
        assert read_jsonl(text / f"data/heldout/{split}.jsonl") == read_jsonl(enron / f"data/heldout/{split}.jsonl")
    rec_enron = json.loads((enron / "records/secrets.json").read_text())
    rec_text = json.loads((text / "records/secrets.json").read_text())
    assert rec_text["secret_kind"] == "mined" and rec_text["mined"] == rec_enron["mined"]
    assert rec_text["held_out_samples_with_a_secret"] == rec_enron["held_out_samples_with_a_secret"]
