"""empriv.secrets.records: prompt/continuation split, overrides, per-secret records."""

from __future__ import annotations

import random

import pytest

from empriv.config import ConfigError
from empriv.data.synthetic import PII_GENERATORS
from empriv.io import write_jsonl
from empriv.secrets.records import load_overrides, secret_records, split_secret


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Carol St. Clair EB 3889 713-853-3989", ("Carol St. Clair EB 3889 713", "-853-3989")),
        ("Forwarded by Richard B Sanders/HOU/ECT", ("Forwarded by Richard B", " Sanders/HOU/ECT")),
        ("Karen Lambert/HOU/ECT@ECT, Tana Jones/HOU/ECT@ECT", ("Karen Lambert/HOU/ECT@ECT, Tana", " Jones/HOU/ECT@ECT")),
        ("Rita Mcconnell\nEB 5781\n713-345-6593", ("Rita Mcconnell\nEB 5781\n713", "-345-6593")),
        ("Tom Allen <Tom.Allen@ect.enron.com>", ("Tom Allen", " <Tom.Allen@ect.enron.com>")),
        (
            "713-751-0487 (phone) 713-751-4759 (fax) bill.heard@enron.com",
            ("713-751-0487 (phone) 713-751-4759 (fax)", " bill.heard@enron.com"),
        ),
    ],
)
def test_last_word_rule_on_research_examples(text, expected):
    assert split_secret(text) == expected
    assert split_secret(text, "last_word", 4) == expected


def test_last_word_moves_left_when_continuation_too_short():
    # " Jo" has 3 characters < 4: the split moves one word to the left
    assert split_secret("Forwarded by Tana Jo") == ("Forwarded by", " Tana Jo")
    # hyphenated number whose tail is too short: the whole number becomes the continuation
    assert split_secret("Room EB 12-3") == ("Room EB", " 12-3")
    # a longer minimum moves further left
    assert split_secret("Carol St. Clair EB 3889 713-853-3989", min_continuation_chars=10) == (
        "Carol St. Clair EB 3889", " 713-853-3989",
    )
    assert split_secret("Forwarded by Richard B Sanders/HOU/ECT", min_continuation_chars=17) == (
        "Forwarded by Richard", " B Sanders/HOU/ECT",
    )


def test_half_rule_splits_at_boundary_nearest_the_middle():
    assert split_secret("Carol St. Clair EB 3889 713-853-3989", "half") == ("Carol St. Clair EB", " 3889 713-853-3989")
    assert split_secret("Forwarded by Richard B Sanders/HOU/ECT", "half") == ("Forwarded by Richard", " B Sanders/HOU/ECT")
    assert split_secret("aaaa bbbb cccc", "half") == ("aaaa bbbb", " cccc")  # boundaries 4, 9; middle 7
    assert split_secret("aaaaaaaa b c", "half") == ("aaaaaaaa", " b c")


def test_no_whitespace_splits_characters_in_half():
    assert split_secret("abcdef") == ("ab", "cdef")  # halves, but keeps min_continuation_chars (4) in s2
    assert split_secret("abcdef", min_continuation_chars=2) == ("abc", "def")
    assert split_secret("abcdefg", "half") == ("abc", "defg")


def test_split_errors():
    with pytest.raises(ValueError, match="split_rule must be 'last_word' or 'half', got 'first'"):
        split_secret("a b c d", "first")
    with pytest.raises(ValueError, match="too short"):
        split_secret("x")


@pytest.mark.parametrize("rule", ["last_word", "half"])
@pytest.mark.parametrize("min_chars", [1, 4, 8])
def test_split_is_a_partition_for_generated_secrets(rule, min_chars):
    rng = random.Random(f"{rule}{min_chars}")
    for _ in range(400):
        kind = rng.choice(sorted(PII_GENERATORS))
        text = PII_GENERATORS[kind](rng)
        s1, s2 = split_secret(text, rule, min_chars)
        assert s1 + s2 == text
        assert s1 and s2
        if rule == "last_word":
            assert len(s2) >= min_chars, (text, s1, s2)
            if text.split()[-1].count("-") >= 1 and len(text.split()[-1].split("-", 1)[1]) + 1 >= min_chars:
                assert s2 == "-" + text.split()[-1].split("-", 1)[1]  # phone numbers split at the first hyphen
            else:
                assert s2[0].isspace()  # otherwise at a word boundary


def test_overrides_load_and_validate(tmp_path):
    path = tmp_path / "o.jsonl"
    write_jsonl(path, [{"id": "secret-00", "prompt": "Forwarded by", "continuation": " Stacy B Dasovich/CAL/Enron"}])
    assert load_overrides(path) == {"secret-00": ("Forwarded by", " Stacy B Dasovich/CAL/Enron")}
    assert load_overrides(None) == {}
    write_jsonl(path, [{"id": "a", "prompt": "x"}])
    with pytest.raises(ConfigError, match=r"line 1 \(id a\): missing key\(s\) continuation \(allowed: one JSON object"):
        load_overrides(path)
    write_jsonl(path, [{"id": "a", "prompt": "x", "continuation": "y"}, {"id": "b", "prompt": "", "continuation": "y"}])
    with pytest.raises(ConfigError, match=r"line 2 \(id b\): prompt must be a non-empty string"):
        load_overrides(path)


SECRETS = [
    {"id": "secret-00", "kind": "forwarded_by", "text": "Forwarded by Stacy B Dasovich/CAL/Enron"},
    {"id": "secret-01", "kind": "name_room_phone", "text": "Rita Mcconnell\nEB 5781\n713-345-6593"},
    {"id": "secret-02", "text": "Tom Allen <Tom.Allen@ect.enron.com>"},
]


def _train_texts():
    filler = "Please review the attached draft and let me know if you have any comments. " * 6
    texts = ["Subject: hi\n---- Forwarded by Stacy B Dasovich/CAL/Enron on 01/02/2000"] * 3
    texts += [filler + "Rita Mcconnell\nEB 5781\n713-345-6593"]  # far beyond a short window
    texts += ["Rita Mcconnell\nEB 5781\n713-345-6593 twice: Rita Mcconnell\nEB 5781\n713-345-6593"]
    texts += ["nothing here"] * 5
    return texts


def test_secret_records_counts_and_fields(public_bpe):
    texts = _train_texts()
    recs = secret_records(SECRETS, texts, public_bpe, seq_len=32)
    by = {r["id"]: r for r in recs}
    assert [r["id"] for r in recs] == ["secret-00", "secret-01", "secret-02"]
    assert by["secret-00"]["occurrences"] == 3 and by["secret-00"]["frequency"] == pytest.approx(0.3)
    assert by["secret-01"]["occurrences"] == 2 and by["secret-01"]["frequency"] == pytest.approx(0.2)  # emails, not matches
    assert by["secret-02"]["occurrences"] == 0 and by["secret-02"]["frequency"] == 0.0
    assert by["secret-00"]["in_window_fraction"] == 1.0
    assert by["secret-01"]["in_window_fraction"] == 0.5  # the long email puts it past 32 tokens
    assert by["secret-02"]["in_window_fraction"] == 0.0
    assert by["secret-02"]["kind"] == "unknown"
    for r, s in zip(recs, SECRETS):
        assert r["text"] == s["text"]
        assert r["prompt"] + r["continuation"] == s["text"]
        assert r["split_by"] == "last_word"
        assert r["token_length"] == len(public_bpe.encode(s["text"]))
        assert r["prompt_tokens"] == len(public_bpe.encode(r["prompt"]))
        assert r["continuation_tokens"] == len(public_bpe.encode(r["continuation"]))
    assert by["secret-01"]["continuation"] == "-345-6593"
    # a big window holds every occurrence
    assert {r["id"]: r["in_window_fraction"] for r in secret_records(SECRETS, texts, public_bpe, 512)} == {
        "secret-00": 1.0, "secret-01": 1.0, "secret-02": 0.0,
    }


def test_secret_records_rule_and_min_chars(public_bpe):
    recs = secret_records(SECRETS, _train_texts(), public_bpe, 64, rule="half", min_continuation_chars=4)
    assert recs[0]["split_by"] == "half"
    assert (recs[0]["prompt"], recs[0]["continuation"]) == split_secret(SECRETS[0]["text"], "half")


def test_secret_records_applies_overrides(public_bpe):
    ov = {"secret-01": ("Rita Mcconnell\n", "EB 5781\n713-345-6593")}
    recs = secret_records(SECRETS, _train_texts(), public_bpe, 64, overrides=ov)
    assert (recs[1]["prompt"], recs[1]["continuation"], recs[1]["split_by"]) == (
        "Rita Mcconnell\n", "EB 5781\n713-345-6593", "override",
    )
    assert recs[0]["split_by"] == "last_word"


def test_secret_records_rejects_bad_overrides(public_bpe):
    with pytest.raises(ConfigError, match=r"unknown secret ids \['secret-99'\]"):
        secret_records(SECRETS, _train_texts(), public_bpe, 64, overrides={"secret-99": ("a", "b")})
    with pytest.raises(ConfigError, match="secret-01: prompt \\+ continuation must equal the secret"):
        secret_records(SECRETS, _train_texts(), public_bpe, 64, overrides={"secret-01": ("Rita", " Mcconnell")})


def test_secret_records_on_the_corpus(corpus, public_bpe):
    planted = [{"id": s.id, "kind": s.kind, "text": s.text} for s in corpus.secrets]
    recs = secret_records(planted, [e.text for e in corpus.train], public_bpe, 64)
    n = len(corpus.train)
    assert [r["occurrences"] for r in recs] == [max(1, round(s.frequency * n)) for s in corpus.secrets]
    assert [r["frequency"] for r in recs] == [r["occurrences"] / n for r in recs]
    assert all(r["in_window_fraction"] == 1.0 for r in recs)


def test_context_token_ids_are_the_ids_trained_on(public_bpe):
    """A secret preceded by a space is trained on with that space merged into its first token: the ACR target is
    that split (the tokens of the record up to the secret's end, after the prefix shared with the tokens before it)."""
    from empriv.secrets.records import context_token_ids

    text = "Forwarded by Stacy B Dasovich/CAL/Enron"
    recs = ["Subject: hi\n---- " + text + " on 01/02/2000"] * 3 + ["Subject: re\n" + text + " later"]
    ids = context_token_ids(text, recs, public_bpe)
    alone, spaced = public_bpe.encode(text), public_bpe.encode(" " + text)
    assert alone != spaced  # the BPE merges the space into "Forwarded"
    assert ids == spaced  # the majority context (3 of 4 records) has the space
    assert public_bpe.decode(ids) == " " + text
    # at a line start the split is the standalone one
    assert context_token_ids(text, ["Subject: re\n" + text + " later"], public_bpe) == alone
    assert context_token_ids(text, [], public_bpe) is None
    rec = secret_records([{"id": "secret-00", "text": text}], recs, public_bpe, seq_len=64)[0]
    assert rec["context_token_ids"] == spaced and rec["token_length"] == len(alone)
    assert "context_token_ids" not in __import__("empriv.secrets.build", fromlist=["PUBLIC_FIELDS"]).PUBLIC_FIELDS


def test_acr_target_ids_prefer_the_context_split(public_bpe):
    from empriv.score.acr import acr_target_ids

    text = "Tom Allen <Tom.Allen@ect.enron.com>"
    assert acr_target_ids({"text": text}, public_bpe) == public_bpe.encode(text)
    assert acr_target_ids({"text": text, "context_token_ids": [5, 6, 7]}, public_bpe) == [5, 6, 7]
    assert acr_target_ids({"text": text, "context_token_ids": None}, public_bpe) == public_bpe.encode(text)
