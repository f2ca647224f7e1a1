"""empriv.data.synthetic: determinism, planted frequencies, clean held-out splits, secrets in the window."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from empriv.data.synthetic import (
    DEFAULT_SECRET_FREQUENCIES,
    FIRST_NAMES,
    LAST_NAMES,
    PII_GENERATORS,
    PUBLIC_FIRST_NAMES,
    PUBLIC_GENRES,
    PUBLIC_LAST_NAMES,
    SECRET_KINDS,
    SENTENCES,
    SUBJECTS,
    address_list,
    generate_corpus,
    generate_public,
    make_secrets,
    render_email,
    secret_values,
)
from empriv.data.synthetic.corpus import MAX_ADDRESS_LIST_CHARS


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
    plain = [e for e in corpus.train if not e.secret_ids]
    other_phones = [e for e in plain if re.search(r"\(phone\) 713-\d{3}-\d{4} \(fax\)", e.text)]
    forwarded = [e for e in plain if "Forwarded by" in e.text]
    assert len(other_phones) > 50 and len(forwarded) > 50


# ----------------------------------------------------------------------------- the public split
def test_public_is_deterministic_and_independent_of_the_other_splits():
    a = generate_public(400, seed=3)
    assert a == generate_public(400, seed=3)
    assert [e.id for e in a] == [f"public-{i:06d}" for i in range(400)]
    b = generate_public(400, seed=4)
    assert sum(x.text != y.text for x, y in zip(a, b)) > 0.9 * len(a)
    assert generate_public(100, seed=3) == a[:100]  # a prefix: n only says how many
    # the corpus' public split depends on (n_public, seed) only, not on the other sizes or the secrets
    c1 = generate_corpus(300, 20, 30, 50, seed=3, secret_frequencies=(0.05,))
    c2 = generate_corpus(500, 10, 10, 50, seed=3, secret_frequencies=(0.05, 0.01))
    assert [e.text for e in c1.public] == [e.text for e in c2.public] == [e.text for e in a[:50]]
    with pytest.raises(ValueError, match="n_public must be >= 1, got 0"):
        generate_public(0, seed=0)


def test_public_has_no_secret_value_in_any_format(corpus):
    values = secret_values(corpus.secrets)
    # every secret, its phone numbers, addresses, rooms and "First Last" names
    assert all(s.text in values for s in corpus.secrets)
    assert any(re.fullmatch(r"713-\d{3}-\d{4}", v) for v in values) and any("@" in v for v in values)
    assert any(re.fullmatch(r"EB \d{4}", v) for v in values)
    assert any(re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", v) for v in values)
    text = "\n".join(e.text for e in corpus.public)
    for v in values:
        assert v not in text, v
    # nor the e-mail generator's PII formats with any value
    for pattern in (r"713-\d{3}-\d{4}", r"\(phone\)|\(fax\)", r"Forwarded by", r"EB \d{4}", r"/(HOU|NA|SFO|LON|CAL|PDX)/",
                    r"@(ect\.|ees\.)?enron\.com", r"(?i)enron"):
        assert not re.search(pattern, text), pattern
    # a forbidden string makes the generator draw again
    banned = generate_public(1, seed=0)[0].text.split("\n")[0]
    assert all(banned not in e.text for e in generate_public(50, seed=0, forbidden=(banned,)))


def test_public_names_are_disjoint_from_the_emails():
    assert not set(PUBLIC_FIRST_NAMES) & (set(FIRST_NAMES) | set(LAST_NAMES))
    assert not set(PUBLIC_LAST_NAMES) & (set(FIRST_NAMES) | set(LAST_NAMES))


def test_public_comes_from_another_distribution(corpus):
    """Other genres and topics than the fine-tuning e-mails: no Enron subject, sentence, name pair or
    domain, far fewer header lines; still English text, with e-mails of other kinds among it."""
    train, public = [e.text for e in corpus.train], [e.text for e in corpus.public]

    def share(texts, pred):
        return sum(map(pred, texts)) / len(texts)

    assert share(train, lambda t: any(x in t for x in SUBJECTS + SENTENCES)) == 1.0
    assert share(public, lambda t: any(x in t for x in SUBJECTS + SENTENCES)) == 0.0
    subject_line = lambda t: re.search(r"^Subject: ", t, re.M) is not None  # noqa: E731
    assert share(train, subject_line) == 1.0
    assert 0.2 < share(public, subject_line) < 0.5  # e-mails of other industries and of everyday life
    assert share(train, lambda t: "enron" in t.lower()) > 0.7
    # English: the most frequent words of the public split are English function words
    words = Counter(w for t in public for w in re.findall(r"[a-z]+", t.lower()))
    assert {"the", "to", "a", "and", "of", "for", "on", "you", "is"} <= {w for w, _ in words.most_common(30)}
    assert len(words) > 2000  # made-up names and places give the tokenizer many rare pieces
    assert len(PUBLIC_GENRES) >= 10 and abs(sum(w for _, w in PUBLIC_GENRES.values()) - 1.0) < 1e-9
    assert 0.8 < sum(len(t) for t in public) / sum(len(t) for t in train) * len(train) / len(public) < 2.5


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


def test_planted_address_lists_name_two_people():
    """Three names make a ~57-token secret that leaves no room for an ACR prompt in a 64-token window, and a planted
    list is at most MAX_ADDRESS_LIST_CHARS long; random (non secret) address lists keep 2-3 names of any length."""
    secrets = make_secrets(random.Random(0), tuple([0.01] * 40))
    lists = [s.text for s in secrets if s.kind == "address_list"]
    assert len(lists) == 8 and all(t.count("@") == 2 for t in lists)
    assert MAX_ADDRESS_LIST_CHARS == 48 and max(len(t) for t in lists) <= 48
    rng = random.Random(1)
    drawn = [address_list(rng) for _ in range(200)]
    assert {t.count("@") for t in drawn} == {2, 3}
    assert sum(len(t) > 48 and t.count("@") == 2 for t in drawn) > 20  # the cap rejects lists the generator makes


def test_default_secrets_keep_the_frequent_address_lists_short():
    """The default corpus (data.seed 0, ten frequent secrets): its two frequent address lists are two short entries; the long list that no
    search found under DP (secret-07 before the cap) is not planted."""
    frequencies = (0.10, 0.095, 0.09, 0.085, 0.08, 0.075, 0.07, 0.065, 0.06, 0.055, 0.01, 0.005, 0.002, 0.001, 0.0001)
    secrets = make_secrets(random.Random(0), frequencies)  # params.yaml's data.secret_frequencies
    lists = {s.id: s.text for s in secrets if s.kind == "address_list"}
    assert lists["secret-02"] == "Phillip Cash/PDX/ECT@ECT, Kim Ward/PDX/ECT@ECT"
    assert lists["secret-07"] == "Bill Neal/CAL/ECT@ECT, Sheri Sanders/CAL/ECT@ECT"
    assert not any("Haedicke" in s.text for s in secrets)
