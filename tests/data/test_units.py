"""User-level records (user-level DP paper, appendix B.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from empriv.data.units import (
    UserRecord,
    build_user_records,
    expand_recipients,
    is_forwarded,
    max_ngram_repetition,
    parse_message,
    unit_statistics,
)

REAL_CSV = Path(__file__).resolve().parents[2].parent / "shared/data/enron/emails.csv"


def raw(frm, to, body, cc=None, subject="hi"):
    lines = ["Message-ID: <1.x>", "Date: Tue, 1 May 2001 10:00:00 -0700 (PDT)"]
    if frm is not None:
        lines.append(f"From: {frm}")
    if to is not None:
        lines.append(f"To: {to}")
    lines.append(f"Subject: {subject}")
    if cc is not None:
        lines += [f"Cc: {cc}", f"Bcc: {cc}"]
    lines += ["X-From: A", ""]
    return "\n".join(lines) + "\n" + body


def words(n, tag):
    return " ".join(f"{tag}{i}" for i in range(n))


def test_parse_message_fields_and_folding():
    p = parse_message(raw("A@x.com", "b@x.com, c@x.com,\n\td@x.com", "line one\n\nline two\n", subject="Re: plan"))
    assert p["date"] == "Tue, 1 May 2001 10:00:00 -0700 (PDT)"
    assert p["from"] == "a@x.com"
    assert p["to"] == ("b@x.com", "c@x.com", "d@x.com")
    assert p["subject"] == "Re: plan"
    assert p["body"] == "line one\n\nline two\n"
    assert parse_message(raw(None, "b@x.com", "body")) is None


def test_each_cc_bcc_recipient_is_a_record():
    p = parse_message(raw("a@x.com", "b@x.com", "body", cc="c@x.com, d@x.com, b@x.com"))
    recs = expand_recipients(p, "f")
    assert [r.to for r in recs] == [("b@x.com",), ("c@x.com",), ("d@x.com",)]
    assert all((r.sender, r.body, r.subject, r.file, r.unit) == ("a@x.com", "body", "hi", "f", "a@x.com") for r in recs)
    assert [r.to for r in expand_recipients(parse_message(raw("a@x.com", None, "x")))] == [()]


def test_max_ngram_repetition():
    assert max_ngram_repetition(words(25, "w")) == 1
    assert max_ngram_repetition(words(19, "w")) == 0
    block = words(20, "w")
    assert max_ngram_repetition(f"{block} middle {block}") == 2
    assert max_ngram_repetition(f"{block} {block} {block}") == 3
    assert max_ngram_repetition("a b a b", n=2) == 2
    with pytest.raises(ValueError, match=r"n \(n-gram length\): out of range \(got 0; allowed: an integer >= 1\)"):
        max_ngram_repetition("a", n=0)


def test_forwarded_detection():
    def rec(subject, body):
        return UserRecord("d", "a@x.com", ("b@x.com",), subject, body)

    assert is_forwarded(rec("FW: numbers", "see below"))
    assert is_forwarded(rec("Fwd:numbers", "see below"))
    assert is_forwarded(rec("numbers", "hi\n---------------------- Forwarded by Jane Doe/HOU/ECT on 01/02/2001"))
    assert is_forwarded(rec("numbers", "Begin forwarded message:\n"))
    assert not is_forwarded(rec("Re: forward curve", "the forward price is up"))


def test_build_user_records_counts_and_unit_stats():
    block = words(20, "r")
    messages = [
        ("m1", raw("a@x.com", "b@x.com", words(30, "one"), cc="c@x.com, d@x.com")),  # 3 records
        ("m2", raw("a@x.com", "c@x.com", words(30, "two"))),                         # 1
        ("m3", raw("b@x.com", "a@x.com", f"{block} and {block}")),                   # 1, repeated 20-gram
        ("m4", raw("b@x.com", "a@x.com", words(30, "four"), subject="FW: x")),       # 1, forwarded
        ("m5", raw("c@x.com", "a@x.com", "-----Forwarded by C/HOU/ECT", cc="e@x.com")),  # 2, forwarded
        ("m6", raw("c@x.com", "a@x.com", "short reply")),                            # 1
        ("m7", raw(None, "a@x.com", "no sender")),                                   # malformed
    ]
    data = build_user_records(messages)
    assert list(data.counts.items()) == [
        ("messages", 7),
        ("parsed", 6),
        ("expanded_recipients", 9),
        ("max_20gram_repetition", 8),
        ("not_forwarded", 5),
    ]
    assert data.n_malformed == 1
    assert [(r.file, r.to) for r in data.records] == [
        ("m1", ("b@x.com",)), ("m1", ("c@x.com",)), ("m1", ("d@x.com",)), ("m2", ("c@x.com",)), ("m6", ("a@x.com",))
    ]
    assert data.unit_stats == {
        "n_units": 2,
        "n_records": 5,
        "records_per_unit_mean": 2.5,
        "records_per_unit_max": 4,
        "records_per_unit_min": 1,
        "records_per_unit_median": 2.5,
    }
    assert unit_statistics([])["n_units"] == 0


@pytest.mark.slow
def test_real_sample_user_records():
    if not REAL_CSV.exists():
        pytest.skip(f"real Enron sample not found at {REAL_CSV} (../shared/data is absent on this machine)")
    from empriv.data.enron import iter_raw_messages

    data = build_user_records(iter_raw_messages(REAL_CSV))
    assert list(data.counts.values()) == [4904, 4904, 8696, 8447, 6224]
    s = data.unit_stats
    assert (s["n_units"], s["n_records"], s["records_per_unit_max"], s["records_per_unit_min"]) == (310, 6224, 872, 1)
    assert s["records_per_unit_median"] == 3.0
    assert s["records_per_unit_mean"] == pytest.approx(6224 / 310)
