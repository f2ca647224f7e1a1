"""Leak check: no secret or canary may occur where it must not — the public (pre-training) split, and
the validation and test splits that utility and memorisation are measured on.

:func:`find_leaks` takes secret texts (by id) and the texts of named splits and returns every sample
that contains a secret; :func:`find_token_leaks` does the same for token sequences (audit canaries,
which are token ids). :func:`leak_error` turns the findings into the one-line error a stage raises: it
names the secret ids, the splits and the counts, never a secret's text.

What "the secret" is, per source: the planted string (synthetic-enron), the mined string (enron), the
author's name (TOFU: the (author → genre) pair is private, and a private author's name in any other
split already says who is in the training set), the canary's token sequence (audits).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from empriv.config import ConfigError

SEPARATOR = "\x00"  # joins a split's texts for searching; never inside a text of the corpora


@dataclass(frozen=True)
class Leak:
    """Secret ``secret_id`` occurs in ``count`` samples of ``split`` (their indices in ``samples``)."""

    secret_id: str
    split: str
    samples: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.samples)

    def as_dict(self) -> dict:
        return {"secret_id": self.secret_id, "split": self.split, "count": self.count}


def _sample_hits(joined: str, starts: list[int], needle: str) -> tuple[int, ...]:
    """Indices of the samples (starting at ``starts`` in ``joined``) that contain ``needle``."""
    hits: list[int] = []
    pos = joined.find(needle)
    while pos != -1:
        i = bisect_right(starts, pos) - 1
        hits.append(i)
        # continue after the end of this sample: each sample counts once
        nxt = starts[i + 1] if i + 1 < len(starts) else len(joined)
        pos = joined.find(needle, nxt)
    return tuple(hits)


def find_leaks(secrets: Mapping[str, str], splits: Mapping[str, Sequence[str]]) -> list[Leak]:
    """Every (secret, split) pair where the secret's text occurs in a sample of the split, with the
    samples' indices; ordered by split (as given), then secret id (as given). Empty secrets are an error."""
    for sid, text in secrets.items():
        if not text:
            raise ValueError(f"secret {sid} has an empty text: nothing to check")
    leaks: list[Leak] = []
    for split, texts in splits.items():
        if any(SEPARATOR in t for t in texts):
            raise ValueError(f"the {split} split holds a NUL character, which the leak check uses as separator")
        starts, offset = [], 0
        for t in texts:
            starts.append(offset)
            offset += len(t) + 1
        joined = SEPARATOR.join(texts)
        for sid, text in secrets.items():
            hits = _sample_hits(joined, starts, text)
            if hits:
                leaks.append(Leak(sid, split, hits))
    return leaks


def find_token_leaks(sequences: Mapping[str, Sequence[int]], splits: Mapping[str, Sequence[Sequence[int]]]) -> list[Leak]:
    """As :func:`find_leaks` for token-id sequences: the samples (token lists) that contain a sequence
    contiguously. Sequences of one token or none are an error (one token occurs everywhere)."""
    by_head: dict[tuple[int, int], list[tuple[str, tuple[int, ...]]]] = {}
    for sid, seq in sequences.items():
        seq = tuple(int(t) for t in seq)
        if len(seq) < 2:
            raise ValueError(f"sequence {sid} has {len(seq)} tokens: the token leak check needs >= 2")
        by_head.setdefault(seq[:2], []).append((sid, seq))
    order = {sid: i for i, sid in enumerate(sequences)}
    leaks: list[Leak] = []
    for split, lists in splits.items():
        found: dict[str, list[int]] = {}
        for i, toks in enumerate(lists):
            toks = list(toks)
            for j in range(len(toks) - 1):
                cands = by_head.get((toks[j], toks[j + 1]))
                if not cands:
                    continue
                for sid, seq in cands:
                    if tuple(toks[j : j + len(seq)]) == seq and (not found.get(sid) or found[sid][-1] != i):
                        found.setdefault(sid, []).append(i)
        for sid in sorted(found, key=order.__getitem__):
            leaks.append(Leak(sid, split, tuple(found[sid])))
    return leaks


class LeakError(ConfigError):
    """A secret or canary occurs in a split where none may: the stage stops before writing anything
    (a ConfigError, so the stage runner prints it as one line and exits 2)."""


def check_no_leaks(leaks: Sequence[Leak], what: str = "secret") -> None:
    """Raise :class:`LeakError` (one line: ids, splits, counts) if ``leaks`` is not empty."""
    message = leak_error(leaks, what)
    if message:
        raise LeakError(message)


def leak_error(leaks: Sequence[Leak], what: str = "secret") -> str | None:
    """The one-line error for ``leaks`` (None when there are none): ids, splits and counts only."""
    if not leaks:
        return None
    shown = ", ".join(f"{lk.secret_id} in {lk.count} {lk.split} sample{'s' if lk.count != 1 else ''}" for lk in leaks[:10])
    more = f" (and {len(leaks) - 10} more)" if len(leaks) > 10 else ""
    return (f"leak check failed: {len(leaks)} {what}/split pair{'s' if len(leaks) != 1 else ''} found where no {what} may "
            f"occur: {shown}{more}")


def leak_summary(leaks: Sequence[Leak], checked: Mapping[str, int], n_secrets: int) -> dict:
    """What a stage records about its leak check (counts only): how many secrets, the samples of each
    split searched, and the number of leaks found (0 whenever the stage went on)."""
    return {"n_checked": n_secrets, "splits": dict(checked), "n_leaks": len(leaks)}
