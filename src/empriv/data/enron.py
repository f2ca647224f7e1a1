"""The Enron email corpus: loading (Kaggle ``emails.csv`` or the CMU maildir tree) and cleaning.

Loading
-------
- Kaggle layout: a CSV with header ``file,message``; ``message`` is the raw RFC-822 email.
- CMU layout (enron_mail_20150507): ``maildir/<user>/<folder>[/<subfolder>…]/<n>.``; each file is
  one raw email. ``path`` may be the ``maildir`` directory itself or its parent. The ``file`` of a
  maildir email is its path relative to ``maildir`` (``allen-p/_sent_mail/1.``), as in the CSV.

Each message is parsed with :mod:`email.parser` under the ``compat32`` policy (the corpus predates
RFC 5322 strictness) into an :class:`EnronEmail`. A row that cannot be used — wrong number of CSV
fields, an empty message, a message with neither ``From`` nor ``Message-ID``, an undecodable
file — is counted in :class:`LoadReport` (with its ``file`` and the reason) and skipped; it is
never fatal. Emails without ``To`` are *not* malformed (the corpus has them: 119 in the sample).

Cleaning (appendix B.1 of the research), in order; ``counts`` records the size after each step:

1. ``deduplicated``: sample-level de-duplication on the text field (the body), compared after
   stripping leading and trailing whitespace (copies of one mail stored in two folders differ by a
   trailing newline or leading blank line); the first occurrence in load order is kept.
2. ``top_senders_receivers``: keep an email when its sender is among the top-N senders *and* at
   least one of its receivers (To ∪ Cc ∪ Bcc) is among the top-N receivers. Ranks are counted on
   the de-duplicated set (an email counts once per distinct receiver); ties at the cut-off are
   broken by address (alphabetical), so the selection is deterministic.
3. ``boilerplate_ancillary_schedules`` and ``boilerplate_hourahead_failed``: drop the two
   automated-report patterns the appendix names (matched with any whitespace, or none, between the words):
   "No ancillary schedules awarded. No variances detected. LOG MESSAGES: PARSING FILE -- >> O:"
   and "HourAhead schedule download failed. Manual intervention required".
4. ``max_tabs``: drop texts with more than ``max_tabs`` (100) tab characters.
5. ``min_tokens``: drop texts with fewer than ``min_tokens`` (30) tokens, counted by the caller's
   ``count_tokens`` callable (the tokenizer decides).
6. split into ``train`` / ``validation`` / ``test`` with a seeded shuffle and the given fractions.

After secrets are mined from the training split, :func:`drop_secret_samples` removes the
validation/test samples that contain any secret as a substring (step 4 of the appendix).

Bodies are never logged: functions here return data and counts, they do not print.
"""

from __future__ import annotations

import random
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from email.message import Message
from email.parser import Parser
from email.policy import compat32
from pathlib import Path
from typing import TypeVar

from empriv.checks import require_int, require_real
from empriv.io import csv_rows

T = TypeVar("T")

BOILERPLATE_PATTERNS: dict[str, str] = {
    "boilerplate_ancillary_schedules": (
        "No ancillary schedules awarded. No variances detected. LOG MESSAGES: PARSING FILE -- >> O:"
    ),
    "boilerplate_hourahead_failed": "HourAhead schedule download failed. Manual intervention required",
}


def _whitespace_insensitive(pattern: str) -> re.Pattern[str]:
    return re.compile(r"\s*".join(re.escape(word) for word in pattern.split()))


_BOILERPLATE_RES = {name: _whitespace_insensitive(p) for name, p in BOILERPLATE_PATTERNS.items()}


@dataclass(frozen=True)
class EnronEmail:
    """One parsed email. Address fields are lower-cased tuples of bare addresses."""

    file: str
    message_id: str
    date: str
    sender: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    bcc: tuple[str, ...]
    x_from: str
    x_to: str
    subject: str
    body: str

    @property
    def receivers(self) -> tuple[str, ...]:
        """Distinct receivers (To, then Cc, then Bcc), in first-seen order."""
        return tuple(dict.fromkeys(self.to + self.cc + self.bcc))

    def to_row(self) -> dict:
        return {
            "file": self.file,
            "message_id": self.message_id,
            "date": self.date,
            "from": self.sender,
            "to": list(self.to),
            "cc": list(self.cc),
            "bcc": list(self.bcc),
            "x_from": self.x_from,
            "x_to": self.x_to,
            "subject": self.subject,
            "text": self.body,
        }


@dataclass
class LoadReport:
    """What loading saw: rows read, emails parsed, malformed rows (file, reason) skipped."""

    source: str
    n_rows: int = 0
    n_parsed: int = 0
    malformed: list[tuple[str, str]] = field(default_factory=list)
    n_without_to: int = 0

    @property
    def n_malformed(self) -> int:
        return len(self.malformed)

    def as_metrics(self) -> dict:
        reasons = Counter(reason for _, reason in self.malformed)
        return {
            "source": self.source,
            "n_rows": self.n_rows,
            "n_parsed": self.n_parsed,
            "n_malformed": self.n_malformed,
            "malformed_reasons": dict(sorted(reasons.items())),
            "n_without_to": self.n_without_to,
        }


@dataclass(frozen=True)
class CleanedEnron:
    """The three splits and the count after every cleaning step (step name → count, in order)."""

    train: list[EnronEmail]
    validation: list[EnronEmail]
    test: list[EnronEmail]
    counts: OrderedDict[str, int]


# ---------------------------------------------------------------------------------------- parsing

_ANGLE = re.compile(r"<([^<>]*)>")


def parse_addresses(value: str | None) -> tuple[str, ...]:
    """Split an address header into lower-cased bare addresses (``Name <a@b>`` → ``a@b``)."""
    if not value:
        return ()
    out = []
    for part in " ".join(value.split()).split(","):
        part = part.strip()
        m = _ANGLE.search(part)
        if m:
            part = m.group(1).strip()
        part = part.strip("'\" ").lower()
        if part:
            out.append(part)
    return tuple(dict.fromkeys(out))


def _header(msg: Message, name: str) -> str:
    value = msg.get(name)
    if value is None:
        return ""
    return " ".join(str(value).split())


def _body(msg: Message) -> str:
    if not msg.is_multipart():
        payload = msg.get_payload()
        return payload if isinstance(payload, str) else ""
    parts = []
    for part in msg.walk():
        if part.get_content_maintype() == "text" and not part.is_multipart():
            payload = part.get_payload()
            if isinstance(payload, str):
                parts.append(payload)
    return "\n".join(parts)


_PARSER = Parser(policy=compat32)


def parse_email(file: str, raw: str) -> EnronEmail:
    """Parse one raw RFC-822 message; raise ``ValueError`` when it is unusable."""
    if not raw or not raw.strip():
        raise ValueError("empty message")
    msg = _PARSER.parsestr(raw)
    if msg.get("From") is None and msg.get("Message-ID") is None:
        raise ValueError("no From or Message-ID header")
    return EnronEmail(
        file=file,
        message_id=_header(msg, "Message-ID"),
        date=_header(msg, "Date"),
        sender=(parse_addresses(msg.get("From")) or ("",))[0],
        to=parse_addresses(msg.get("To")),
        cc=parse_addresses(msg.get("Cc")),
        bcc=parse_addresses(msg.get("Bcc")),
        x_from=_header(msg, "X-From"),
        x_to=_header(msg, "X-To"),
        subject=_header(msg, "Subject"),
        body=_body(msg),
    )


# ---------------------------------------------------------------------------------------- loading


def _csv_rows(path: Path, report: LoadReport) -> Iterator[tuple[str, str]]:
    records = csv_rows(path, errors="surrogateescape")
    first = next(records, None)
    if first is None:
        return
    header = first[1]
    names = [h.strip().lower() for h in header]
    if "file" not in names or "message" not in names:
        raise ValueError(f"{path}: CSV header must have columns 'file' and 'message', got {header}")
    i_file, i_msg = names.index("file"), names.index("message")
    for line_no, row in records:
        report.n_rows += 1
        if len(row) != len(names):
            report.malformed.append((f"line {line_no}", f"expected {len(names)} fields, got {len(row)}"))
            continue
        yield row[i_file], row[i_msg]


def _maildir_root(path: Path) -> Path:
    return path / "maildir" if (path / "maildir").is_dir() else path


def _maildir_rows(path: Path, report: LoadReport) -> Iterator[tuple[str, str]]:
    root = _maildir_root(path)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    for p in files:
        rel = p.relative_to(root).as_posix()
        report.n_rows += 1
        if len(p.relative_to(root).parts) < 3:
            report.malformed.append((rel, "not under maildir/<user>/<folder>/"))
            continue
        data = p.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")  # never fails; the corpus has a few 8-bit mails
        yield rel, text


def iter_raw_messages(path: str | Path, report: LoadReport | None = None) -> Iterator[tuple[str, str]]:
    """Yield ``(file, raw message)`` from a Kaggle CSV or a CMU maildir tree."""
    path = Path(path)
    report = report if report is not None else LoadReport(source=str(path))
    if path.is_dir():
        yield from _maildir_rows(path, report)
    elif path.is_file():
        yield from _csv_rows(path, report)
    else:
        raise FileNotFoundError(f"data.path {str(path)!r}: no such file or directory (expected emails.csv or a maildir tree)")


def load_enron(path: str | Path) -> tuple[list[EnronEmail], LoadReport]:
    """Load every parseable email (Kaggle CSV or CMU maildir); malformed rows go to the report."""
    path = Path(path)
    report = LoadReport(source="maildir" if path.is_dir() else "csv")
    emails = []
    for file, raw in iter_raw_messages(path, report):
        try:
            e = parse_email(file, raw)
        except Exception as exc:  # noqa: BLE001 — one bad row must not stop a 500k-row load
            report.malformed.append((file, str(exc) or type(exc).__name__))
            continue
        report.n_parsed += 1
        if not e.to:
            report.n_without_to += 1
        emails.append(e)
    return emails, report


# ---------------------------------------------------------------------------------------- cleaning


def deduplicate(emails: Iterable[EnronEmail]) -> list[EnronEmail]:
    """Keep the first email of every distinct body (compared after stripping outer whitespace)."""
    seen: set[str] = set()
    out = []
    for e in emails:
        key = e.body.strip()
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _top(counter: Counter, n: int) -> set[str]:
    return {a for a, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]}


def top_senders_and_receivers(emails: Sequence[EnronEmail], top_n: int) -> tuple[set[str], set[str]]:
    """The top-N senders and top-N receivers of ``emails`` (ties broken alphabetically)."""
    senders = Counter(e.sender for e in emails if e.sender)
    receivers = Counter(r for e in emails for r in e.receivers)
    return _top(senders, top_n), _top(receivers, top_n)


def filter_common_people(emails: Sequence[EnronEmail], top_n: int) -> list[EnronEmail]:
    """Keep emails whose sender is a top-N sender and with at least one top-N receiver."""
    senders, receivers = top_senders_and_receivers(emails, top_n)
    return [e for e in emails if e.sender in senders and any(r in receivers for r in e.receivers)]


def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    if len(fractions) != 3:
        raise ValueError(f"split fractions must be 3 numbers (train, validation, test), got {list(fractions)}")
    for name, f in zip(("train", "validation", "test"), fractions):
        require_real(f"split fraction {name}", f, ge=0, le=1)
    if abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"split fractions must sum to 1, got {list(fractions)} (sum {sum(fractions)})")
    return tuple(float(f) for f in fractions)  # type: ignore[return-value]


def split_samples(items: Sequence[T], fractions: Sequence[float], seed: int) -> tuple[list[T], list[T], list[T]]:
    """Seeded shuffle, then validation = round(n·f_val), test = round(n·f_test), train = the rest."""
    _, f_val, f_test = _check_fractions(fractions)
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    n = len(items)
    n_val, n_test = round(n * f_val), round(n * f_test)
    n_val = min(n_val, n)
    n_test = min(n_test, n - n_val)
    val = [items[i] for i in order[:n_val]]
    test = [items[i] for i in order[n_val : n_val + n_test]]
    train = [items[i] for i in order[n_val + n_test :]]
    return train, val, test


def clean_enron(
    emails: Sequence[EnronEmail],
    count_tokens: Callable[[str], int],
    top_n: int = 100,
    seed: int = 0,
    fractions: Sequence[float] = (0.9, 0.05, 0.05),
    max_tabs: int = 100,
    min_tokens: int = 30,
) -> CleanedEnron:
    """Appendix B.1 cleaning (see the module docstring), returning the splits and every step's count."""
    top_n = require_int("top_n", top_n, 1)
    max_tabs = require_int("max_tabs", max_tabs, 0)
    min_tokens = require_int("min_tokens", min_tokens, 0)
    _check_fractions(fractions)
    counts: OrderedDict[str, int] = OrderedDict()
    counts["loaded"] = len(emails)
    kept = deduplicate(emails)
    counts["deduplicated"] = len(kept)
    kept = filter_common_people(kept, top_n)
    counts["top_senders_receivers"] = len(kept)
    for name, pattern in _BOILERPLATE_RES.items():
        kept = [e for e in kept if not pattern.search(e.body)]
        counts[name] = len(kept)
    kept = [e for e in kept if e.body.count("\t") <= max_tabs]
    counts["max_tabs"] = len(kept)
    kept = [e for e in kept if count_tokens(e.body) >= min_tokens]
    counts["min_tokens"] = len(kept)
    train, val, test = split_samples(kept, fractions, seed)
    counts["train"], counts["validation"], counts["test"] = len(train), len(val), len(test)
    return CleanedEnron(train, val, test, counts)


def drop_secret_samples(samples: Sequence[T], secrets: Iterable[str], text: Callable[[T], str] | None = None) -> list[T]:
    """Remove the samples that contain any secret as a substring (for validation/test splits).

    ``samples`` are strings, or any objects when ``text`` extracts their text
    (``EnronEmail`` objects use their body by default).
    """
    secrets = list(secrets)
    for i, s in enumerate(secrets):
        if not isinstance(s, str) or not s:
            raise ValueError(f"secrets[{i}] must be a non-empty string, got {type(s).__name__} of length {len(s) if isinstance(s, str) else 'n/a'}")
    if text is None:
        def text(x):  # noqa: E306
            return x.body if isinstance(x, EnronEmail) else x
    if not secrets:
        return list(samples)
    pattern = re.compile("|".join(re.escape(s) for s in sorted(set(secrets), key=len, reverse=True)))
    return [x for x in samples if not pattern.search(text(x))]
