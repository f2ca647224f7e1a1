"""PII-like secrets of a corpus nobody annotated (``data.secret_kind: patterns``): strings found by patterns.

Four kinds, looked for in this order (a later kind's match that overlaps an earlier one's is not counted):

- ``url``: ``http://…``, ``https://…`` or ``www.…`` up to the next space or quote (trailing ``.,;:!?)]`` left out);
- ``email``: ``local@domain.tld``;
- ``phone``: North-American style numbers, ``713-853-3989``, ``(713) 853-3989``, ``+1 713.853.3989``;
- ``digits``: a run of 8 or more digits not inside a longer run (account, card, ID numbers).

Each distinct string is counted once per record that holds it (sample-level, as the mining counts n-grams); those
in at least ``min_count`` training records are kept, the ``top_k`` most frequent first (ties: first seen).

A bare address or number split in two measures little; the research's secrets are strings *with* their context
(``Please call me at 713-853-3989``), split before the last word (the hyphen rule keeps ``-853-3989`` as the
continuation). So each PII string is given the words that precede it in the training records: the longest left
context of up to :data:`CONTEXT_WORDS` words that more than half of the records holding it share (the most common
such context; none when no context is shared that widely). The secret is context + PII, and
``secrets.split_rule`` splits it as every other secret: with ``last_word`` the PII (or its tail after the first
hyphen) is the continuation.

Nothing here logs or prints a string: callers record ids, kinds and counts only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

CONTEXT_WORDS = 6
MIN_DIGITS = 8
PATTERNS: dict[str, re.Pattern[str]] = {
    "url": re.compile(r"(?:https?://|www\.)[^\s<>\"']+"),
    "email": re.compile(r"[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
    "phone": re.compile(r"(?<![\w-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?![\w-])"),
    "digits": re.compile(rf"(?<!\d)\d{{{MIN_DIGITS},}}(?!\d)"),
}
KINDS = tuple(PATTERNS)
_TRAILING = ".,;:!?)]"


@dataclass(frozen=True)
class PiiMatch:
    kind: str
    text: str
    start: int
    end: int


def find_pii(text: str) -> list[PiiMatch]:
    """The PII-like strings of ``text`` in order of position (see the module docstring)."""
    taken: list[tuple[int, int]] = []
    out = []
    for kind, pattern in PATTERNS.items():
        for m in pattern.finditer(text):
            start, end = m.start(), m.end()
            if kind == "url":
                while end > start and text[end - 1] in _TRAILING:
                    end -= 1
            if end <= start or any(start < e and s < end for s, e in taken):
                continue
            taken.append((start, end))
            out.append(PiiMatch(kind, text[start:end], start, end))
    return sorted(out, key=lambda m: m.start)


def count_pii(texts: Sequence[str]) -> list[tuple[str, str, int]]:
    """(kind, string, records holding it) of every distinct PII string, most frequent first, ties by first seen."""
    counts: Counter = Counter()
    kinds: dict[str, str] = {}
    for t in texts:
        seen = {}
        for m in find_pii(t):
            seen.setdefault(m.text, m.kind)
        for s, kind in seen.items():
            counts[s] += 1
            kinds.setdefault(s, kind)
    order = {s: i for i, s in enumerate(kinds)}
    return sorted(((kinds[s], s, c) for s, c in counts.items()), key=lambda r: (-r[2], order[r[1]]))


def _left_context(text: str, start: int, words: int) -> str:
    """The text from the start of the ``words``-th word before ``start`` up to ``start`` ('' for 0 words)."""
    if words == 0:
        return ""
    before = text[:start]
    bounds = [m.start() for m in re.finditer(r"\S+", before)]
    if len(bounds) < words:
        return ""
    return before[bounds[-words]:]


def with_context(pii: str, texts: Sequence[str], max_words: int = CONTEXT_WORDS) -> str:
    """``pii`` with the longest left context (<= ``max_words`` words) that more than half of the ``texts`` holding
    it share, the most common such context (ties: the first seen); ``pii`` alone when none is shared that widely."""
    holding = [t for t in texts if pii in t]
    if not holding:
        return pii
    for words in range(max_words, 0, -1):
        contexts = Counter(_left_context(t, t.index(pii), words) for t in holding)
        contexts.pop("", None)
        if contexts:
            best, n = max(contexts.items(), key=lambda kv: kv[1])  # max keeps the first of equal counts
            if 2 * n > len(holding):
                return best + pii
    return pii


def pattern_candidates(train_texts: Sequence[str], *, top_k: int, min_count: int) -> tuple[list[dict], dict]:
    """({id, kind, text, pii_chars} of the ``top_k`` most frequent PII strings in >= ``min_count`` training records,
    with their context; counts by kind of what was found). ``pii_chars``: the length of the PII at the end of
    ``text``."""
    found = count_pii(train_texts)
    kept = [r for r in found if r[2] >= min_count][:top_k]
    rows = []
    for i, (kind, pii, _) in enumerate(kept):
        rows.append({"id": f"pii-{i:03d}", "kind": kind, "text": with_context(pii, train_texts), "pii_chars": len(pii)})
    info = {"found": {k: sum(1 for r in found if r[0] == k) for k in KINDS},
            "frequent": {k: sum(1 for r in kept if r[0] == k) for k in KINDS}}
    return rows, info
