"""Appendix B.6 secret mining (n-gram histogram, merging) and the mined secrets of a corpus."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from empriv.secrets.mining import (
    SecretCandidate,
    merge_overlapping,
    mine_ngram_sequences,
    mine_secret_candidates,
    top_ngrams,
)

REAL_CSV = Path(__file__).resolve().parents[2].parent / "shared/data/enron/emails.csv"


class WordTokenizer:
    """Whitespace words ↔ ids, enough to test the text-level API."""

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def encode(self, text):
        out = []
        for w in text.split():
            if w not in self.vocab:
                self.vocab[w] = len(self.words)
                self.words.append(w)
            out.append(self.vocab[w])
        return out

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids)


def test_top_ngrams_counts_once_per_sample():
    samples = [[1, 2, 3, 4], [1, 2, 3, 5], [9, 1, 2, 3, 1, 2, 3]]
    assert top_ngrams(samples, n=3, top_k=10, min_count=2) == [((1, 2, 3), 3)]
    every = top_ngrams(samples, n=3, top_k=10, min_count=1)
    assert every[0] == ((1, 2, 3), 3)
    assert len(every) == 6 and all(c == 1 for _, c in every[1:])
    # ties broken by first occurrence; top_k truncates
    assert [s for s, _ in every[1:3]] == [(2, 3, 4), (2, 3, 5)]
    assert len(top_ngrams(samples, n=3, top_k=2, min_count=1)) == 2
    # n-grams never cross a sample boundary
    assert top_ngrams([[1, 2], [3, 4]], n=3, top_k=10, min_count=1) == []
    assert top_ngrams([[7, 7, 7, 7]], n=2, top_k=10, min_count=1) == [((7, 7), 1)]


def test_top_ngrams_validates():
    with pytest.raises(ValueError, match=r"n \(n-gram length\): out of range \(got 0; allowed: an integer >= 1\)"):
        top_ngrams([[1, 2]], n=0)
    with pytest.raises(ValueError, match=r"top_k: out of range \(got 0; allowed: an integer >= 1\)"):
        top_ngrams([[1, 2]], n=1, top_k=0)
    with pytest.raises(ValueError, match="token ids must be in"):
        top_ngrams([[1, -2]], n=1)


def test_merge_overlapping_chains_contains_and_cycles():
    assert merge_overlapping([(1, 2, 3), (2, 3, 4), (3, 4, 5), (9, 9, 9)], min_overlap=2) == [(1, 2, 3, 4, 5), (9, 9, 9)]
    assert merge_overlapping([(1, 2, 3, 4), (2, 3)], min_overlap=1) == [(1, 2, 3, 4)]
    assert merge_overlapping([(1, 2, 1), (2, 1, 2)], min_overlap=2) == [(1, 2, 1, 2)]
    # overlap shorter than min_overlap: no merge
    assert merge_overlapping([(1, 2, 3), (3, 4, 5)], min_overlap=2) == [(1, 2, 3), (3, 4, 5)]
    assert merge_overlapping([(1, 2, 3), (3, 4, 5)], min_overlap=1) == [(1, 2, 3, 4, 5)]
    # a veto keeps the pieces apart
    assert merge_overlapping([(1, 2, 3), (3, 4, 5)], 1, accept=lambda a, b, m: False) == [(1, 2, 3), (3, 4, 5)]
    with pytest.raises(ValueError, match=r"min_overlap: out of range \(got 0; allowed: an integer >= 1\)"):
        merge_overlapping([(1,)], 0)


def test_mining_merges_one_recurring_string():
    secret = list(range(10, 20))
    samples = [[100 + i, 101 + i, *secret, 200 + i] for i in range(0, 30, 3)]  # 10 samples
    samples += [[300 + i, 301 + i, 302 + i, 303 + i, 304 + i] for i in range(0, 50, 5)]  # noise
    assert mine_ngram_sequences(samples, n=4, top_k=500) == [(tuple(secret), 10)]


def test_mining_does_not_invent_strings_by_merging():
    a, b = [1, 2, 3, 4, 5], [4, 5, 6, 7, 8]
    samples = [[100 + i, *a, 200 + i] for i in range(3)] + [[300 + i, *b, 400 + i] for i in range(4)]
    rows = mine_ngram_sequences(samples, n=3, top_k=500, min_overlap=2)
    assert rows == [(tuple(b), 4), (tuple(a), 3)]
    # without the recurrence check the two would have been glued into a string that never occurs
    assert merge_overlapping([s for s, _ in top_ngrams(samples, 3, 500)], 2) == [(1, 2, 3, 4, 5, 6, 7, 8)]


def test_mining_top_k_limits_then_merges():
    # two recurring strings; the more frequent one's windows fill top_k=3 on their own
    s1, s2 = list(range(10, 15)), list(range(50, 55))
    samples = [[1000 + i, *s1, 2000 + i] for i in range(5)] + [[3000 + i, *s2, 4000 + i] for i in range(3)]
    assert mine_ngram_sequences(samples, n=3, top_k=3) == [(tuple(s1), 5)]
    assert mine_ngram_sequences(samples, n=3, top_k=6) == [(tuple(s1), 5), (tuple(s2), 3)]


def test_mine_secret_candidates_fields():
    tok = WordTokenizer()
    block = "Jane Roe EB 1234 555-000-1111 (phone) 555-000-2222 (fax)"
    texts = [f"note {i} about deal {i}\n{block}\nthanks{i}" for i in range(6)] + [f"other {i} text here" for i in range(4)]
    cands = mine_secret_candidates(texts, tok, n=4, top_k=50)
    assert len(cands) == 1
    c = cands[0]
    assert isinstance(c, SecretCandidate)
    assert c.id == "enron-000"
    assert c.text == " ".join(block.split())
    assert c.token_length == len(block.split()) == len(c.token_ids)
    assert c.occurrences == 6 and c.frequency == pytest.approx(0.6)
    assert set(c.to_row()) == {"id", "text", "token_ids", "token_length", "occurrences", "frequency"}
    with pytest.raises(ValueError, match="train_texts must be non-empty"):
        mine_secret_candidates([], tok)


def test_mining_finds_a_planted_50_gram_among_2000_random_records():
    """At the research's scale (50-grams over 2,000 records of 100-400 ids). No time limit is asserted (a loaded CI
    machine made one fail): performance is measured in benchmarks/, not in tests."""
    rng = random.Random(0)
    block = [rng.randrange(5000) for _ in range(120)]
    samples = []
    for i in range(2000):
        s = [rng.randrange(5000) for _ in range(rng.randrange(100, 400))]
        if i % 10 == 0:
            cut = rng.randrange(len(s))
            s = s[:cut] + block + s[cut:]
        samples.append(s)
    rows = mine_ngram_sequences(samples, n=50, top_k=500)
    assert rows[0] == (tuple(block), 200)
    assert all(c <= 5 for _, c in rows[1:])  # chance repeats of a token next to the block


# ------------------------------------------------------------------------------- real sample

@pytest.fixture(scope="module")
def real_train(gpt2_tokenizer):
    if not REAL_CSV.exists():
        pytest.skip(f"real Enron sample not found at {REAL_CSV} (../shared/data is absent on this machine)")
    from empriv.data.enron import clean_enron, load_enron

    emails, _ = load_enron(REAL_CSV)
    cleaned = clean_enron(emails, lambda s: len(gpt2_tokenizer.encode(s)), top_n=100, seed=0)
    return [e.body for e in cleaned.train]


@pytest.mark.slow
def test_real_sample_mining_finds_forwarded_by_and_contact_blocks(real_train, gpt2_tokenizer):
    # GPT-2 BPE, n = 10 (the research: 50 on 33k emails; the sample's recurring lines are shorter)
    cands = mine_secret_candidates(real_train, gpt2_tokenizer, n=10, top_k=500)
    assert 40 <= len(cands) <= 100
    n = len(real_train)
    ids = [c.token_ids for c in cands]
    assert len(set(ids)) == len(ids)
    threshold = min(c for _, c in top_ngrams(gpt2_tokenizer.encode_batch(real_train), 10, 500))
    assert all(c.token_length >= 10 and c.occurrences >= threshold for c in cands)
    assert all(c.frequency == pytest.approx(c.occurrences / n) for c in cands)
    assert [c.occurrences for c in cands] == sorted((c.occurrences for c in cands), reverse=True)

    def string_count(text):
        return sum(text in t for t in real_train)

    # "Forwarded by Steven J Kean/NA/Enron" (checked by hand: 50 training emails carry the merged line)
    kean = [c for c in cands if "Forwarded by Steven J Kean/NA/Enron" in c.text]
    assert len(kean) == 1 and kean[0].occurrences >= 40
    assert string_count(kean[0].text) >= kean[0].occurrences
    # at least two distinct recurring "Forwarded by Name/…" candidates
    assert sum(1 for c in cands if re.search(r"Forwarded by [A-Z][a-z]+ ", c.text)) >= 2
    # a phone/fax/e-mail block with a 713-853-NNNN number
    blocks = [c for c in cands if re.search(r"713-853-\d{4}", c.text) and "fax" in c.text.lower() and "@" in c.text]
    assert blocks and max(c.occurrences for c in blocks) >= 30
    assert all(string_count(c.text) >= c.occurrences for c in blocks)
    # a "/HOU/ECT@ECT" address list
    assert any(c.text.count("/HOU/ECT@ECT") >= 1 for c in cands)


def _mined(texts, tok, public=(), seq_len=48, **kw):
    from empriv.secrets.build import mined_secrets

    settings = {"ngram": 6, "top_k": 50, "min_count": 2, "split_rule": "last_word", "min_continuation_chars": 4,
                "min_in_window_fraction": 0.5, **kw}
    return mined_secrets(texts, list(public), tok, seq_len, **settings)


def test_mined_secrets_beyond_the_training_window_are_dropped(public_bpe):
    """A mined string that only ever occurs past base.seq_len is never trained on: it is not a secret to measure."""
    from empriv.config import ConfigError

    early = "Call Gerald Nemec at 713-853-3512 about the storage swap."
    late = "Forwarded by Kay Mann/Corp/Enron on 05/04/2001 10:12 AM."
    filler = " ".join(["Please review the attached draft and let me know."] * 12)
    texts = [f"{early} Note {i}. {filler} {late}" for i in range(8)] + [f"Unrelated note number {i}." for i in range(8)]
    records, info = _mined(texts, public_bpe)
    kept = " ".join(r["text"] for r in records)
    assert "3512" in kept and "Kay Mann" not in kept
    assert info["outside_window"] >= 1 and info["min_in_window_fraction"] == 0.5
    assert all(r["in_window_fraction"] >= 0.5 for r in records)
    assert any("Kay Mann" in r["text"] for r in _mined(texts, public_bpe, min_in_window_fraction=0.0)[0])
    only_late = [" ".join(f"q{i}z{j}" for j in range(40)) + f" {late} {i}" for i in range(8)]  # unique filler
    with pytest.raises(ConfigError, match=r"none of the \d+ mined secrets has >= secrets.min_in_window_fraction = 0.5 .*48-token window"):
        _mined(only_late, public_bpe)


def test_degenerate_mined_secrets_are_rejected_counted_and_keep_the_held_out_splits_whole(public_bpe):
    """Blank runs, dash bars and letter-poor strings recur in real e-mails; they are no secret, and each would
    drop every held-out sample that contains it."""
    from empriv.secrets.build import held_out

    name = "Call Gerald Nemec at 713-853-3512 about the storage swap."
    bar = "\n\n---------------------------------------------\n\n"
    texts = [f"Note {i}.{bar}Reply number {i} here" for i in range(8)] + [f"{name} Unrelated {i}." for i in range(8)]
    records, info = _mined(texts, public_bpe, ngram=4)
    assert [r["id"] for r in records] == ["enron-000"] and "3512" in records[0]["text"]
    assert records and not any("-----" in r["text"] and sum(c.isalpha() for c in r["text"]) < 8 for r in records)
    rejected = info["rejected_degenerate"]
    assert set(rejected) == {"whitespace_only", "punctuation_run", "few_letters", "continuation_without_letters"}
    assert rejected["punctuation_run"] == 1 and sum(rejected.values()) + info["longer_than_window"] + len(records) \
        + info["in_public_split"] + info["outside_window"] == info["mined"]
    heldout = [{"id": f"t{i}", "text": f"Other mail {i}.{bar}Regards"} for i in range(5)]
    assert len(held_out(heldout, records)) == 5  # a rejected dash bar no longer empties the held-out splits


def test_mined_strings_of_the_public_split_are_public_text_not_secrets(public_bpe):
    from empriv.secrets.leaks import find_leaks

    name = "Call Gerald Nemec at 713-853-3512 about the storage swap."
    rule = "-----Original Message-----\nFrom: the front desk"
    texts = [f"{name} Note {i}.\n\n{rule} {i}" for i in range(8)] + [f"Unrelated note number {i}." for i in range(8)]
    public = [f"Hello.\n\n{rule} at the clinic", "Nothing here."]
    with_public, info = _mined(texts, public_bpe, public=public, seq_len=64)
    without, _ = _mined(texts, public_bpe, seq_len=64)
    assert info["in_public_split"] >= 1
    assert any("Original Message" in r["text"] for r in without)
    assert not any("Original Message" in r["text"] for r in with_public) and any("3512" in r["text"] for r in with_public)
    assert not find_leaks({r["id"]: r["text"] for r in with_public}, {"public": public})
