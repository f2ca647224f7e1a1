"""Enron loading (Kaggle CSV, CMU maildir) and appendix B.1 cleaning."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from empriv.data.enron import (
    EnronEmail,
    clean_enron,
    deduplicate,
    drop_secret_samples,
    load_enron,
    parse_addresses,
    split_samples,
)

REAL_CSV = Path(__file__).resolve().parents[2].parent / "shared/data/enron/emails.csv"


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def raw(frm: str, to: str | None, body: str, cc: str | None = None, subject: str = "hello", mid: str = "1") -> str:
    lines = [f"Message-ID: <{mid}.JavaMail.evans@thyme>", "Date: Mon, 23 Apr 2001 12:41:00 -0700 (PDT)", f"From: {frm}"]
    if to is not None:
        lines.append(f"To: {to}")
    lines.append(f"Subject: {subject}")
    if cc is not None:
        lines += [f"Cc: {cc}", f"Bcc: {cc}"]
    lines += ["Mime-Version: 1.0", "X-From: Someone", "X-To: Someone Else", ""]
    return "\n".join(lines) + "\n" + body


def count_words(text: str) -> int:
    return len(text.split())


# The cleaning fixture: 12 emails; comments give the step that removes each.
FIXTURE = [
    ("a@x.com", "b@x.com", words(40, "alpha"), None),            # 1 kept
    ("a@x.com", "b@x.com", "\n" + words(40, "alpha") + "\n", None),  # 2 duplicate of 1 (outer whitespace)
    ("a@x.com", "c@x.com", words(40, "beta"), None),             # 3 receiver c not in top 2
    ("b@x.com", "a@x.com", words(40, "gamma"), None),            # 4 kept
    ("d@x.com", "a@x.com", words(40, "delta"), None),            # 5 sender d not in top 2
    ("a@x.com", "z@x.com", words(40, "eps"), None),              # 6 receiver z not in top 2
    ("a@x.com", "b@x.com", "No ancillary schedules awarded.  No variances detected.\n\n"
     "    LOG MESSAGES:\n\nPARSING FILE -->> O:\\x " + words(40, "zeta"), None),  # 7 boilerplate 1
    ("a@x.com", "b@x.com", "HourAhead schedule download failed.  Manual intervention required. "
     + words(40, "eta"), None),                                  # 8 boilerplate 2
    ("b@x.com", "a@x.com", "\t" * 101 + words(40, "theta"), None),  # 9 > 100 tabs
    ("b@x.com", "a@x.com", "\t" * 100 + words(40, "iota"), None),   # 10 kept (exactly 100 tabs)
    ("a@x.com", "b@x.com", words(29, "kappa"), None),            # 11 under 30 tokens
    ("a@x.com", None, words(40, "lambda"), "b@x.com"),           # 12 kept: no To, receiver via Cc
]


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(["file", "message"])
        w.writerows(rows)
    return path


@pytest.fixture
def fixture_csv(tmp_path: Path) -> Path:
    rows = [[f"u-{i}/inbox/{i}.", raw(f, t, b, cc, mid=str(i))] for i, (f, t, b, cc) in enumerate(FIXTURE, 1)]
    return write_csv(tmp_path / "emails.csv", rows)


def test_parse_addresses():
    assert parse_addresses("A@X.com, \n\tb@x.com,Name <C@x.com>, a@x.com") == ("a@x.com", "b@x.com", "c@x.com")
    assert parse_addresses(None) == ()
    assert parse_addresses("  ") == ()


def test_load_csv_fields(fixture_csv):
    emails, report = load_enron(fixture_csv)
    assert report.n_rows == 12 and report.n_parsed == 12 and report.n_malformed == 0
    assert report.n_without_to == 1
    e = emails[0]
    assert isinstance(e, EnronEmail)
    assert e.file == "u-1/inbox/1."
    assert e.message_id == "<1.JavaMail.evans@thyme>"
    assert e.date == "Mon, 23 Apr 2001 12:41:00 -0700 (PDT)"
    assert (e.sender, e.to, e.cc, e.bcc) == ("a@x.com", ("b@x.com",), (), ())
    assert (e.x_from, e.x_to, e.subject) == ("Someone", "Someone Else", "hello")
    assert e.body == words(40, "alpha")
    last = emails[-1]
    assert last.to == () and last.cc == ("b@x.com",) and last.bcc == ("b@x.com",)
    assert last.receivers == ("b@x.com",)


def test_load_csv_malformed_rows_are_counted_not_fatal(tmp_path):
    path = tmp_path / "emails.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(["file", "message"])
        w.writerow(["u/inbox/1.", raw("a@x.com", "b@x.com", "body one")])
        w.writerow(["u/inbox/2.", raw("a@x.com", "b@x.com", "body two"), "extra field"])
        w.writerow(["u/inbox/3.", ""])
        w.writerow(["u/inbox/4.", "just some text without headers\n\nand a body"])
        w.writerow(["u/inbox/5.", raw("c@x.com", None, "body five")])
    emails, report = load_enron(path)
    assert [e.file for e in emails] == ["u/inbox/1.", "u/inbox/5."]
    assert report.n_rows == 5 and report.n_parsed == 2 and report.n_malformed == 3
    assert report.n_without_to == 1
    m = report.as_metrics()
    assert m["n_malformed"] == 3 and sum(m["malformed_reasons"].values()) == 3
    assert [f for f, _ in report.malformed] == ["line 3", "u/inbox/3.", "u/inbox/4."]


def test_load_csv_bad_header_and_missing_path(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text('"name","text"\n"a","b"\n')
    with pytest.raises(ValueError, match="'file' and 'message'"):
        load_enron(bad)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_enron(tmp_path / "nope.csv")


def test_load_maildir_tree(tmp_path):
    root = tmp_path / "enron_mail" / "maildir"
    (root / "alice" / "inbox").mkdir(parents=True)
    (root / "alice" / "sent" / "2001").mkdir(parents=True)
    (root / "bob" / "inbox").mkdir(parents=True)
    (root / "alice" / "inbox" / "1.").write_text(raw("x@y.com", "alice@y.com", "hi alice"))
    (root / "alice" / "sent" / "2001" / "2.").write_text(raw("alice@y.com", "x@y.com, z@y.com", "hi x"))
    (root / "bob" / "inbox" / "1.").write_bytes(raw("q@y.com", "bob@y.com", "caf\xe9").encode("latin-1"))
    (root / "bob" / "inbox" / "9.").write_text("")  # empty file: malformed
    (root / "stray").write_text(raw("q@y.com", "bob@y.com", "not in a folder"))  # malformed: depth
    for path in (tmp_path / "enron_mail", root):  # the maildir dir or its parent
        emails, report = load_enron(path)
        assert report.source == "maildir"
        assert [e.file for e in emails] == ["alice/inbox/1.", "alice/sent/2001/2.", "bob/inbox/1."]
        assert emails[1].to == ("x@y.com", "z@y.com")
        assert emails[2].body == "caf\xe9"
        assert report.n_rows == 5 and report.n_parsed == 3 and report.n_malformed == 2
        assert sorted(f for f, _ in report.malformed) == ["bob/inbox/9.", "stray"]


def test_deduplicate_keeps_first_and_ignores_outer_whitespace(fixture_csv):
    emails, _ = load_enron(fixture_csv)
    kept = deduplicate(emails)
    assert len(kept) == 11
    assert "u-2/inbox/2." not in {e.file for e in kept}


def test_clean_counts_after_every_step(fixture_csv):
    emails, _ = load_enron(fixture_csv)
    result = clean_enron(emails, count_words, top_n=2, seed=0, fractions=(0.5, 0.25, 0.25))
    assert list(result.counts.items()) == [
        ("loaded", 12),
        ("deduplicated", 11),
        ("top_senders_receivers", 8),
        ("boilerplate_ancillary_schedules", 7),
        ("boilerplate_hourahead_failed", 6),
        ("max_tabs", 5),
        ("min_tokens", 4),
        ("train", 2),
        ("validation", 1),
        ("test", 1),
    ]
    files = {e.file for e in result.train + result.validation + result.test}
    assert files == {"u-1/inbox/1.", "u-4/inbox/4.", "u-10/inbox/10.", "u-12/inbox/12."}


def test_clean_top_n_large_keeps_everyone(fixture_csv):
    emails, _ = load_enron(fixture_csv)
    counts = clean_enron(emails, count_words, top_n=100, fractions=(1, 0, 0)).counts
    assert counts["top_senders_receivers"] == 11
    assert counts["min_tokens"] == 7 and counts["train"] == 7


def test_clean_validates_arguments(fixture_csv):
    emails, _ = load_enron(fixture_csv)
    with pytest.raises(ValueError, match=r"top_n: out of range \(got 0; allowed: an integer >= 1\)"):
        clean_enron(emails, count_words, top_n=0)
    with pytest.raises(ValueError, match="sum to 1"):
        clean_enron(emails, count_words, fractions=(0.5, 0.2, 0.2))
    with pytest.raises(ValueError, match=r"split fraction validation: out of range \(got 1.5; allowed: a finite number in \[0, 1\]\)"):
        clean_enron(emails, count_words, fractions=(0.5, 1.5, -1.0))
    with pytest.raises(ValueError, match="3 numbers"):
        clean_enron(emails, count_words, fractions=(0.5, 0.5))


def test_split_is_seeded_and_partitions():
    items = list(range(100))
    a = split_samples(items, (0.8, 0.1, 0.1), seed=3)
    b = split_samples(items, (0.8, 0.1, 0.1), seed=3)
    c = split_samples(items, (0.8, 0.1, 0.1), seed=4)
    assert a == b and a != c
    assert [len(s) for s in a] == [80, 10, 10]
    assert sorted(a[0] + a[1] + a[2]) == items


def test_drop_secret_samples():
    texts = ["call 713-853-5620 now", "nothing here", "Forwarded by X/HOU/ECT", "713-853"]
    assert drop_secret_samples(texts, ["713-853-5620", "X/HOU/ECT"]) == ["nothing here", "713-853"]
    assert drop_secret_samples(texts, []) == texts
    e = EnronEmail("f", "", "", "a", (), (), (), "", "", "", "has a.b (c) secret")
    assert drop_secret_samples([e], ["a.b (c)"]) == []  # regex metacharacters are literal
    with pytest.raises(ValueError, match=r"secrets\[1\] must be a non-empty string"):
        drop_secret_samples(texts, ["ok", ""])


# ------------------------------------------------------------------------------- real sample

@pytest.fixture(scope="module")
def real_emails():
    if not REAL_CSV.exists():
        pytest.skip(f"real Enron sample not found at {REAL_CSV} (../shared/data is absent on this machine)")
    return load_enron(REAL_CSV)


@pytest.mark.slow
def test_real_sample_loading(real_emails):
    emails, report = real_emails
    assert report.n_rows == 4904 and report.n_parsed == 4904 and report.n_malformed == 0
    assert report.n_without_to == 119
    assert len({e.message_id for e in emails}) == 4904
    assert {e.file.split("/")[0] for e in emails} == {"allen-p", "jones-t", "shackleton-s", "kean-s"}


@pytest.mark.slow
def test_real_sample_dedup_and_cleaning_counts(real_emails, gpt2_tokenizer):
    emails, _ = real_emails
    assert len(emails) - len(deduplicate(emails)) == 58
    result = clean_enron(emails, lambda s: len(gpt2_tokenizer.encode(s)), top_n=100, seed=0)
    assert list(result.counts.values())[:7] == [4904, 4846, 2589, 2589, 2589, 2576, 2384]
    assert result.counts["train"] + result.counts["validation"] + result.counts["test"] == 2384


@pytest.mark.slow
def test_real_sample_maildir_matches_csv(real_emails, tmp_path):
    emails, _ = real_emails
    rows = list(csv.reader(open(REAL_CSV, newline="", encoding="utf-8")))[1:]
    subset = rows[::97]
    for file, message in subset:
        p = tmp_path / "maildir" / file
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(message, encoding="utf-8")
    from_dir, report = load_enron(tmp_path)
    assert report.n_malformed == 0 and len(from_dir) == len(subset)
    by_file = {e.file: e for e in emails}
    assert all(by_file[e.file] == e for e in from_dir)
