"""Model-based secret filters: verbatim reproduction (Enron) and genre reveal (TOFU)."""

from __future__ import annotations

import pytest
from empriv.config import ConfigError, parse_params
from empriv.models.tokenizer import train_bpe
from empriv.secrets.filtering import filter_secrets, greedy_text
from empriv.secrets.mining import split_secret
from tiny_models import tiny_gpt2, train_to_memorise

SECRET = "Forwarded by Stacy B Dasovich/CAL/Enron"
OTHER = "Karen Lambert/HOU/ECT@ECT, Tana Jones/HOU/ECT@ECT"
QA = "Question: What genre does Ann Lee write in?\nAnswer: Ann Lee writes mystery novels."


QUICK_ACR = {"steps": 30, "candidates": 64, "top_k": 64, "seeds": [0], "max_length": 20}


def _params(enabled: bool, **secrets):
    return parse_params({"secrets": {"filter": enabled, **secrets}, "score": {"acr": QUICK_ACR},
                         "cube": {"epsilon": ["inf"], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}})


def _filter(params, secrets, models, base, tok):
    """As the filter stage calls it: the ACR scorer built from score.acr (empriv.pipeline.filter)."""
    from empriv.pipeline.filter import acr_scorer

    sp = params.secrets
    return filter_secrets(secrets, models, base, tok, enabled=sp.filter, acr_min_finetuned=sp.acr_min_finetuned,
                          acr_max_base=sp.acr_max_base, acr=acr_scorer(params, tok) if tok is not None else None)


@pytest.fixture(scope="module")
def tok(corpus):
    return train_bpe([e.text for e in corpus.public[:300]] + [QA], 400)


def _trained_on(tok, text: str, max_offset: int = 0):
    model = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=32, n_head=2, n_layer=1, n_positions=64, seed=0)
    train_to_memorise(model, tok, text, steps=200 if max_offset else 150, max_offset=max_offset)
    return model


def _record(sid: str, text: str) -> dict:
    p, c = split_secret(text)
    return {"id": sid, "kind": "mined", "text": text, "prompt": p, "continuation": c}


def test_disabled_filters_pass_everything_through():
    secrets = [_record("a", SECRET)]
    kept, record = _filter(_params(False), secrets, [], None, None)
    assert kept == secrets and record["enabled"] is False and record["filters"][0]["ran"] is False


def test_verbatim_filters_keep_what_the_nonprivate_model_reproduces_and_the_base_does_not(tok):
    memorised = _trained_on(tok, SECRET, max_offset=8)  # memorised wherever it starts: highly compressible
    base = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=32, n_head=2, n_layer=1, n_positions=64, seed=1)
    secrets = [_record("a", SECRET), _record("b", OTHER)]
    kept, record = _filter(_params(True), secrets, [memorised], base, tok)
    assert [s["id"] for s in kept] == ["a"]
    steps = {f["name"]: f for f in record["filters"]}
    assert steps["finetuned_verbatim"]["removed"] == 1 and steps["base_verbatim"]["removed"] == 0
    assert steps["finetuned_acr"]["ran"] is True and steps["finetuned_acr"]["removed"] == 0
    assert steps["base_acr"]["ran"] is True and steps["base_acr"]["removed"] == 0
    assert record["n_in"] == 2 and record["n_out"] == 1
    # a threshold the memorised secret cannot reach removes it at the fine-tuned ACR step
    with pytest.raises(ConfigError, match="removed all 2 secrets"):
        _filter(_params(True, acr_min_finetuned=1000.0), secrets, [memorised], base, tok)
    # and one verbatim-memorised at a single offset only (the default training) compresses less
    at_start = _trained_on(tok, SECRET)
    from empriv.score.acr import adversarial_compression_ratio, settings_from_params

    s = settings_from_params(_params(True).score.acr)
    weak, strong = (adversarial_compression_ratio(m, tok.encode(SECRET), s) for m in (at_start, memorised))
    assert strong.success and strong.acr > 1.0
    # less compression: no prompt at all (a failure has no ACR value, which the filters read as 0), or a longer one
    assert (weak.acr is None and not weak.success) or weak.acr < strong.acr
    # a base that also reproduces the secret removes it: nothing is left, which is an error, not a fallback
    with pytest.raises(ConfigError, match="removed all 2 secrets"):
        _filter(_params(True), secrets, [memorised], memorised, tok)
    with pytest.raises(ConfigError, match="no non-private run"):
        _filter(_params(True), secrets, [], base, tok)


def test_genre_filter_keeps_pairs_every_nonprivate_model_reveals(tok):
    model = _trained_on(tok, QA)
    assert "mystery" in greedy_text(model, tok, "Question: What genre does Ann Lee write in?\nAnswer:", 20)
    genre = [{"id": "author-000", "kind": "author_genre", "name": "Ann Lee", "genre": "mystery"},
             {"id": "author-001", "kind": "author_genre", "name": "Ann Lee", "genre": "poetry"}]
    kept, record = _filter(_params(True), genre, [model, model], None, tok)
    assert [s["id"] for s in kept] == ["author-000"]
    assert record["filters"][0] == {"name": "revealed by every non-private model (greedy)", "ran": True,
                                    "removed": 1, "models": 2}
