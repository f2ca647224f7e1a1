"""empriv.data.synthetic: determinism, planted frequencies, clean held-out splits, secrets in the window."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from empriv.data.synthetic import (
    DEFAULT_SECRET_FREQUENCIES,
    PII_GENERATORS,
    SECRET_KINDS,
    generate_corpus,
    render_email,
)


def _texts(c):
    return [[e.text for e in getattr(c, s)] for s in ("train", "validation", "test", "public")]


def test_same_seed_same_corpus_different_seed_different():
    a = generate_corpus(300, 20, 30, 50, seed=5, secret_frequencies=(0.05, 0.02))
    b = generate_corpus(300, 20, 30, 50, seed=5, secret_frequencies=(0.05, 0.02))
    c = generate_corpus(300, 20, 30, 50, seed=6, secret_frequencies=(0.05, 0.02))
    assert a == b
    assert _texts(a) == _texts(b) and a.secrets == b.secrets
    assert a.secrets != c.secrets
    ta, tc = _texts(a), _texts(c)
    for split_a, split_c in zip(ta, tc):
        assert sum(x != y for x, y in zip(split_a, split_c)) > 0.9 * len(split_a)


def test_sizes_ids_and_secret_kinds(corpus):
    assert [len(corpus.train), len(corpus.validation), len(corpus.test), len(corpus.public)] == [3000, 200, 300, 6000]
    assert corpus.train[0].id == "train-000000" and corpus.public[-1].id == "public-005999"
    assert len({e.id for e in corpus.train + corpus.validation + corpus.test + corpus.public}) == 9500
    assert [s.id for s in corpus.secrets] == [f"secret-{i:02d}" for i in range(9)]
    assert [s.kind for s in corpus.secrets] == [SECRET_KINDS[i % 5] for i in range(9)]
    assert [s.frequency for s in corpus.secrets] == list(DEFAULT_SECRET_FREQUENCIES)
    texts = [s.text for s in corpus.secrets]
    assert len(set(texts)) == 9
    assert not any(a in b for a in texts for b in texts if a is not b)


def test_planted_occurrences_equal_rounded_frequency(corpus):
    n = len(corpus.train)
    for s in corpus.secrets:
        containing = [e for e in corpus.train if s.text in e.text]
        assert len(containing) == max(1, round(s.frequency * n)), s.id
        assert all(e.secret_ids == (s.id,) for e in containing)
    labelled = Counter(sid for e in corpus.train for sid in e.secret_ids)
    assert labelled == {s.id: max(1, round(s.frequency * n)) for s in corpus.secrets}
    # default frequencies at n = 3000: 90, 75, 60, 45, 30, 15, 6, 3, 2 (1.5 rounds to 2)
    assert [labelled[s.id] for s in corpus.secrets] == [90, 75, 60, 45, 30, 15, 6, 3, 2]


def test_tiny_frequency_still_planted_once():
    c = generate_corpus(100, 5, 5, 5, seed=1, secret_frequencies=(0.001, 0.2))
    assert [sum(s.text in e.text for e in c.train) for s in c.secrets] == [1, 20]


def test_no_secret_in_validation_test_public(corpus):
    for split in ("validation", "test", "public"):
        for e in getattr(corpus, split):
            assert e.secret_ids == ()
            for s in corpus.secrets:
                assert s.text not in e.text, (split, e.id, s.id)


def test_non_secret_emails_carry_random_pii_of_the_same_formats(corpus):
    """A secret stands out only by repetition: the same formats appear with other values."""
    other_phones = [e for e in corpus.public if re.search(r"\(phone\) 713-\d{3}-\d{4} \(fax\)", e.text)]
    forwarded = [e for e in corpus.public if "Forwarded by" in e.text]
    assert len(other_phones) > 100 and len(forwarded) > 100


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_train=0), "n_train must be >= 1, got 0"),
        (dict(n_validation=-1), "n_validation must be >= 1, got -1"),
        (dict(n_test=0), "n_test must be >= 1"),
        (dict(n_public=0), "n_public must be >= 1"),
        (dict(secret_frequencies=(0.1, 0.0)), r"secret_frequencies\[1\] must be in \(0, 1\), got 0.0"),
        (dict(secret_frequencies=(1.0,)), r"secret_frequencies\[0\] must be in \(0, 1\)"),
        (dict(secret_frequencies=(-0.1,)), r"secret_frequencies\[0\]"),
        (dict(secret_frequencies=(0.6, 0.5)), "need 110 secret-bearing emails but n_train is 100"),
        (dict(n_train=5, secret_frequencies=(0.01,) * 6), "need 6 secret-bearing emails but n_train is 5"),
    ],
)
def test_invalid_sizes_and_frequencies_raise(kwargs, match):
    args = dict(n_train=100, n_validation=5, n_test=5, n_public=5, seed=0, secret_frequencies=(0.1,))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        generate_corpus(**args)


def test_render_email_unknown_kind():
    with pytest.raises(ValueError, match="unknown PII kind 'ssn'"):
        render_email(random.Random(0), "ssn", "123")


def test_render_email_contains_pii_near_the_top():
    rng = random.Random(3)
    for _ in range(50):
        for kind in SECRET_KINDS:
            pii = PII_GENERATORS[kind](rng)
            text = render_email(rng, kind, pii)
            assert pii in text
            assert text.index(pii) < 200, (kind, text)


def test_secret_sits_within_first_64_bpe_tokens(corpus, public_bpe):
    """Every secret-bearing email ends its secret inside the 64-token window ([EOS] + tokens)."""
    assert public_bpe.vocab_size == 2048
    by_id = {s.id: s.text for s in corpus.secrets}
    bearing = [e for e in corpus.train if e.secret_ids]
    assert len(bearing) == 326
    worst = 0
    for e in bearing:
        secret = by_id[e.secret_ids[0]]
        end = e.text.index(secret) + len(secret)
        n_tokens = 1 + len(public_bpe.encode(e.text[:end]))
        worst = max(worst, n_tokens)
        assert n_tokens <= 64, (e.id, n_tokens)
        # and the training window of the whole email (encode_fixed cuts [EOS] + tokens at 64) holds it
        window = [public_bpe.eos_id, *public_bpe.encode(e.text)][:64]
        assert secret in public_bpe.decode(window[1:]), e.id
    assert 40 < worst <= 64
