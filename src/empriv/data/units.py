"""User-level records of the Enron corpus (appendix B.1 of the user-level DP fine-tuning paper).

Steps, in order (``counts`` records the size after each):

1. ``parsed``: each raw message is parsed with regular expressions into DATE, FROM (sender),
   TO, SUBJECT and BODY (header lines may be folded onto indented continuation lines; the body is
   everything after the first blank line). A message without a FROM address is counted as
   malformed and skipped.
2. ``expanded_recipients``: one record with the message's TO list, plus one record per CC/BCC
   recipient with the same (DATE, FROM, SUBJECT, BODY) and that recipient as TO. The CC and BCC
   addresses are taken as one de-duplicated set (the Enron export copies Cc into Bcc); a CC/BCC
   address already in TO adds no record.
3. ``max_20gram_repetition``: keep records whose body has no *word* 20-gram (whitespace-separated
   words, so the filter needs no tokenizer) occurring more than once — the in-email
   de-duplication of the paper. Bodies shorter than 20 words pass.
4. ``not_forwarded``: remove forwarded emails — a subject starting with ``FW:``/``Fwd:`` or a body
   containing a forward marker (``----- Forwarded by``, ``---------- Forwarded message``,
   ``Begin forwarded message``).

The privacy unit is the sender (FROM). :func:`unit_statistics` summarises records per unit.

Corpora without senders (the built-in synthetic ones) get unit ids from
:func:`synthetic_unit_ids`: a heavy-tailed number of records per unit shaped like Enron's
(min 1, median 2, mean ≈ 13, a long tail capped at 5,000). :func:`records_by_unit` turns a unit
column into the unit → record-index mapping that :mod:`empriv.data.selection` works on.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from empriv.checks import require_int

NGRAM = 20

_HEADER_BLOCK = re.compile(r"\A(.*?)(?:\r?\n\r?\n|\Z)(.*)\Z", re.S)
_FORWARD_SUBJECT = re.compile(r"^\s*(fw|fwd)\s*:", re.I)
_FORWARD_BODY = re.compile(
    r"-{2,}\s*Forwarded by|-{2,}\s*Forwarded message|Begin forwarded message", re.I
)


@dataclass(frozen=True)
class UserRecord:
    """One (sender, receiver-set) record; ``unit`` is the privacy unit (the sender)."""

    date: str
    sender: str
    to: tuple[str, ...]
    subject: str
    body: str
    file: str = ""

    @property
    def unit(self) -> str:
        return self.sender

    def to_row(self) -> dict:
        return {"unit": self.unit, "date": self.date, "from": self.sender, "to": list(self.to),
                "subject": self.subject, "text": self.body, "file": self.file}


@dataclass(frozen=True)
class UserLevelData:
    records: list[UserRecord]
    counts: OrderedDict[str, int]
    unit_stats: dict
    n_malformed: int


def _headers(block: str) -> dict[str, str]:
    """Header name (lower case) → unfolded value; the first occurrence of a name wins."""
    out: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        if line[:1] in (" ", "\t") and name is not None:
            out[name] += " " + line.strip()
            continue
        m = re.match(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$", line)
        if m:
            name = m.group(1).lower()
            if name in out:
                name = None  # ignore a repeated header and its continuations
                continue
            out[name] = m.group(2).strip()
        else:
            name = None
    return out


def _addresses(value: str) -> tuple[str, ...]:
    out = []
    for part in value.split(","):
        m = re.search(r"<([^<>]*)>", part)
        addr = (m.group(1) if m else part).strip().strip("'\" ").lower()
        if addr:
            out.append(addr)
    return tuple(dict.fromkeys(out))


def parse_message(raw: str) -> dict | None:
    """DATE, FROM, TO, CC, BCC, SUBJECT, BODY of a raw message by regular expressions (None without FROM)."""
    m = _HEADER_BLOCK.match(raw)
    head, body = (m.group(1), m.group(2)) if m else (raw, "")
    h = _headers(head)
    sender = _addresses(h.get("from", ""))
    if not sender:
        return None
    return {
        "date": h.get("date", ""),
        "from": sender[0],
        "to": _addresses(h.get("to", "")),
        "cc": _addresses(h.get("cc", "")),
        "bcc": _addresses(h.get("bcc", "")),
        "subject": h.get("subject", ""),
        "body": body,
    }


def expand_recipients(parsed: dict, file: str = "") -> list[UserRecord]:
    """One record for TO, plus one per distinct CC/BCC recipient not already in TO."""
    base = dict(date=parsed["date"], sender=parsed["from"], subject=parsed["subject"], body=parsed["body"], file=file)
    records = [UserRecord(to=parsed["to"], **base)]
    for addr in dict.fromkeys(parsed["cc"] + parsed["bcc"]):
        if addr not in parsed["to"]:
            records.append(UserRecord(to=(addr,), **base))
    return records


def max_ngram_repetition(text: str, n: int = NGRAM) -> int:
    """Largest number of times any word n-gram occurs in ``text`` (0 when it has fewer than n words)."""
    require_int("n", n, 1, meaning="n-gram length")
    words = text.split()
    if len(words) < n:
        return 0
    counts = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return max(counts.values())


def is_forwarded(record: UserRecord) -> bool:
    return bool(_FORWARD_SUBJECT.match(record.subject) or _FORWARD_BODY.search(record.body))


def unit_statistics(records: Iterable[UserRecord]) -> dict:
    """Records per privacy unit: number of units and the mean, max, min and median."""
    return unit_id_statistics(r.unit for r in records)


def unit_id_statistics(unit_ids: Iterable[str]) -> dict:
    """:func:`unit_statistics` from a column of unit ids (one entry per record)."""
    per_unit = Counter(unit_ids)
    if not per_unit:
        return {"n_units": 0, "n_records": 0, "records_per_unit_mean": 0.0, "records_per_unit_max": 0,
                "records_per_unit_min": 0, "records_per_unit_median": 0.0}
    values = list(per_unit.values())
    return {
        "n_units": len(values),
        "n_records": sum(values),
        "records_per_unit_mean": sum(values) / len(values),
        "records_per_unit_max": max(values),
        "records_per_unit_min": min(values),
        "records_per_unit_median": float(statistics.median(values)),
    }


def build_user_records(messages: Iterable[tuple[str, str]], ngram: int = NGRAM) -> UserLevelData:
    """From ``(file, raw message)`` pairs (e.g. ``enron.iter_raw_messages``) to user-level records."""
    counts: OrderedDict[str, int] = OrderedDict()
    n_messages = n_malformed = 0
    records: list[UserRecord] = []
    for file, raw in messages:
        n_messages += 1
        parsed = parse_message(raw)
        if parsed is None:
            n_malformed += 1
            continue
        records.extend(expand_recipients(parsed, file))
    counts["messages"] = n_messages
    counts["parsed"] = n_messages - n_malformed
    counts["expanded_recipients"] = len(records)
    repetition: dict[str, int] = {}
    kept = []
    for r in records:
        if r.body not in repetition:
            repetition[r.body] = max_ngram_repetition(r.body, ngram)
        if repetition[r.body] <= 1:
            kept.append(r)
    counts["max_20gram_repetition"] = len(kept)
    kept = [r for r in kept if not is_forwarded(r)]
    counts["not_forwarded"] = len(kept)
    return UserLevelData(kept, counts, unit_statistics(kept), n_malformed)


def records_by_unit(unit_ids: Iterable[str]) -> dict[str, list[int]]:
    """Unit id → indices of its records (a column of unit ids, one per record), units in order of first appearance."""
    out: dict[str, list[int]] = {}
    for i, unit in enumerate(unit_ids):
        out.setdefault(unit, []).append(i)
    return out


# ------------------------------------------------------------------ synthetic privacy units
#: Records per unit of a synthetic corpus: ceil(exp(μ + s·Z)) for a standard normal Z, capped.
#: μ = 0.33, s = 2.1 give P(1 record) ≈ 0.44, median 2 and mean ≈ 13.0 (cap 5,000), the shape of
#: Enron's senders (the user-level DP paper's Table 1: min 1, median 2.0, mean 13.2, max 5,049).
RECORDS_PER_UNIT_LOG_MEDIAN = 0.33
RECORDS_PER_UNIT_LOG_SPREAD = 2.1
MAX_RECORDS_PER_UNIT = 5000


def sample_records_per_unit(n_units: int, rng, max_records_per_unit: int = MAX_RECORDS_PER_UNIT):
    """``n_units`` draws of the heavy-tailed records-per-unit distribution (numpy int array, each in [1, cap])."""
    import numpy as np

    n_units = require_int("n_units", n_units, 0)
    max_records_per_unit = require_int("max_records_per_unit", max_records_per_unit, 1)
    z = rng.standard_normal(n_units)
    sizes = np.ceil(np.exp(RECORDS_PER_UNIT_LOG_MEDIAN + RECORDS_PER_UNIT_LOG_SPREAD * z))
    return np.clip(sizes, 1, max_records_per_unit).astype(np.int64)


def synthetic_unit_ids(n_records: int, seed: int, *, max_records_per_unit: int = MAX_RECORDS_PER_UNIT,
                       prefix: str = "unit") -> list[str]:
    """A privacy unit id for each of ``n_records`` records of a synthetic corpus.

    Unit sizes are drawn from :func:`sample_records_per_unit` until they cover ``n_records`` (the
    last unit is cut to fit), then records are dealt to units in a random order, so a unit's records
    are spread over the corpus. Ids are ``<prefix><number>`` (zero-padded, numbered by unit size
    draw order). Deterministic for ``seed``; only numpy's generator seeded with ``seed`` is used.
    """
    import numpy as np

    n_records = require_int("n_records", n_records, 1)
    require_int("seed", seed)
    rng = np.random.default_rng(seed)
    chunks, total = [], 0
    while total < n_records:
        # draw in blocks: the expected size is ~13, so n/8 + 16 units nearly always suffice at once
        block = sample_records_per_unit(n_records // 8 + 16, rng, max_records_per_unit)
        chunks.append(block)
        total += int(block.sum())
    sizes = np.concatenate(chunks)
    ends = np.cumsum(sizes)
    n_units = int(np.searchsorted(ends, n_records)) + 1  # the first unit whose end reaches n_records
    sizes = sizes[:n_units].copy()
    sizes[-1] -= int(ends[n_units - 1]) - n_records
    owner = np.repeat(np.arange(n_units), sizes)[rng.permutation(n_records)]
    width = len(str(n_units - 1))
    names = [f"{prefix}{i:0{width}d}" for i in range(n_units)]
    return [names[i] for i in owner.tolist()]
