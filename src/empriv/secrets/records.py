"""Secrets whose memorisation is measured, each split into a prompt s₁ and a continuation s₂.

For the synthetic corpus the secrets are the generator's planted list; from a real corpus they
are mined (:mod:`empriv.secrets.mining`). Each secret gets, in the training split: its number of
occurrences (emails containing it), its sample-level frequency (occurrences / n), its token
length, and the fraction of its occurrences that end inside the training window of
``seq_len`` tokens (a secret cut off by truncation cannot be learned).

Split rule (``secrets.split_rule``):

- ``last_word`` (default, after the research's Table 5): s₂ is the last whitespace-separated
  word of the secret together with the whitespace before it; when that word is a hyphenated
  number such as ``713-853-3989``, s₂ starts at its first hyphen (``-853-3989``). If that leaves
  fewer than ``min_continuation_chars`` characters, the split moves one word to the left.
- ``half``: split at the whitespace boundary nearest the middle of the secret.

A per-secret override file (``secrets.overrides``, JSON lines ``{"id", "prompt", "continuation"}``,
prompt + continuation = secret) replaces the rule for the secrets it names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from empriv.config import ConfigError

_HYPHEN_NUMBER = re.compile(r"^\d+(-\d+)+$")


def split_secret(text: str, rule: str = "last_word", min_continuation_chars: int = 4) -> tuple[str, str]:
    """Split ``text`` into (s₁, s₂) with s₁ + s₂ == text, both non-empty."""
    bounds = [m.start() for m in re.finditer(r"\s+\S", text)]  # whitespace runs before a word
    if rule == "last_word":
        last_word_start = (re.search(r"\S+$", text) or re.search(r"$", text)).start()
        word = text[last_word_start:]
        if _HYPHEN_NUMBER.match(word):
            cut = last_word_start + word.index("-")
            if cut > 0 and len(text) - cut >= min_continuation_chars:
                return text[:cut], text[cut:]
        for cut in reversed(bounds):
            if cut > 0 and len(text) - cut >= min_continuation_chars:
                return text[:cut], text[cut:]
    elif rule == "half":
        if bounds:
            cut = min((b for b in bounds if b > 0), key=lambda b: abs(b - len(text) / 2), default=None)
            if cut is not None:
                return text[:cut], text[cut:]
    else:
        raise ValueError(f"secrets.split_rule must be 'last_word' or 'half', got {rule!r}")
    # No usable word boundary: split the characters, keeping at least min_continuation_chars in s₂.
    if len(text) < 2:
        raise ValueError(f"secret is too short to split into prompt and continuation: {len(text)} characters")
    cut = max(1, min(len(text) // 2, len(text) - min_continuation_chars))
    return text[:cut], text[cut:]


OVERRIDE_KEYS = ("id", "prompt", "continuation")
OVERRIDE_ALLOWED = 'one JSON object per line, {"id": …, "prompt": …, "continuation": …}, non-empty strings, each id once'


def _override_rows(path: str | Path, with_lines: bool = False):
    """(overrides, problems) of an overrides file: every line checked, one problem each ``line N: …``; with
    ``with_lines`` also the line of each id."""
    import json

    out: dict[str, tuple[str, str]] = {}
    first_line: dict[str, int] = {}
    problems: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.rstrip("\r\n"))
            except ValueError as err:
                col = getattr(err, "pos", None)
                col = None if col is None else col + 1
                problems.append(f"line {n}: not valid JSON{f' (at column {col})' if col else ''}; a record must fit "
                                f"on one line (allowed: {OVERRIDE_ALLOWED})")
                continue
            if not isinstance(row, dict):
                problems.append(f"line {n}: not a JSON object (got a {type(row).__name__}; allowed: {OVERRIDE_ALLOWED})")
                continue
            missing = [k for k in OVERRIDE_KEYS if k not in row]
            extra = sorted(k for k in row if k not in OVERRIDE_KEYS)
            bad = [k for k in OVERRIDE_KEYS if k in row and (not isinstance(row[k], str) or not row[k])]
            sid = row.get("id") if isinstance(row.get("id"), str) else None
            label = f"line {n}" + (f" (id {sid})" if sid else "")
            if missing:
                problems.append(f"{label}: missing key(s) {', '.join(missing)} (allowed: {OVERRIDE_ALLOWED})")
            if extra:
                problems.append(f"{label}: unknown key(s) {', '.join(extra)} (allowed: {OVERRIDE_ALLOWED})")
            if bad:
                problems.append(f"{label}: {', '.join(bad)} must be a non-empty string (allowed: {OVERRIDE_ALLOWED})")
            if missing or extra or bad:
                continue
            if sid in first_line:
                problems.append(f"{label}: id repeated (first on line {first_line[sid]}; allowed: {OVERRIDE_ALLOWED})")
                continue
            first_line[sid] = n
            out[sid] = (row["prompt"], row["continuation"])
    return (out, problems, first_line) if with_lines else (out, problems)


def override_lines(path: str | Path) -> list[tuple[int, str, str, str]]:
    """(line, id, prompt, continuation) of every well-formed override of a ``secrets.overrides`` file, in file order
    (a malformed line or a repeated id is left out: :func:`override_problems` names it)."""
    rows, _, first_line = _override_rows(path, with_lines=True)
    return [(first_line[sid], sid, prompt, continuation) for sid, (prompt, continuation) in rows.items()]


def override_problems(path: str | Path) -> list[str]:
    """One line per problem of a ``secrets.overrides`` file (``line N (id X): …``); [] for a good file."""
    return _override_rows(path)[1]


def load_overrides(path: str | Path | None) -> dict[str, tuple[str, str]]:
    """id → (prompt, continuation) of a ``secrets.overrides`` file; a :class:`ConfigError` with one line per
    problem (file, line, key) otherwise."""
    if path is None:
        return {}
    out, problems = _override_rows(path)
    if problems:
        raise ConfigError(*(f"secrets.overrides: {path} {p}" for p in problems))
    return out


def secret_records(
    secrets: Sequence[dict],
    train_texts: Sequence[str],
    tokenizer,
    seq_len: int,
    rule: str = "last_word",
    min_continuation_chars: int = 4,
    overrides: dict[str, tuple[str, str]] | None = None,
) -> list[dict]:
    """Build one record per secret (see the module docstring for the fields)."""
    overrides = overrides or {}
    unknown = set(overrides) - {s["id"] for s in secrets}
    if unknown:
        raise ConfigError(f"secrets.overrides names unknown secret ids {sorted(unknown)}")
    n = len(train_texts)
    records = []
    for s in secrets:
        text = s["text"]
        if s["id"] in overrides:
            prompt, continuation = overrides[s["id"]]
            if prompt + continuation != text:
                raise ConfigError(f"secrets.overrides id {s['id']}: prompt + continuation must equal the secret")
            split_by = "override"
        else:
            prompt, continuation = split_secret(text, rule, min_continuation_chars)
            split_by = rule
        containing = [t for t in train_texts if text in t]
        context_ids = context_token_ids(text, containing, tokenizer)
        in_window = sum(1 for t in containing if 1 + len(tokenizer.encode(t[: t.index(text) + len(text)])) <= seq_len)
        records.append(
            {
                "id": s["id"],
                "kind": s.get("kind", "unknown"),
                "text": text,
                "prompt": prompt,
                "continuation": continuation,
                "split_by": split_by,
                "token_length": len(tokenizer.encode(text)),
                "prompt_tokens": len(tokenizer.encode(prompt)),
                "continuation_tokens": len(tokenizer.encode(continuation)),
                "occurrences": len(containing),
                "frequency": len(containing) / n if n else 0.0,
                "in_window_fraction": in_window / len(containing) if containing else 0.0,
                "context_token_ids": context_ids,
            }
        )
    return records


def context_token_ids(text: str, containing: Sequence[str], tokenizer, max_records: int = 50) -> list[int] | None:
    """The secret's token ids as the tokenizer splits it *inside* its training records (the most common split over
    the first ``max_records`` records that contain it), or None when no record contains it.

    A BPE tokenizer merges a leading space into the next word: ``Forwarded by X`` preceded by a space in every e-mail
    is trained on as `` Forwarded by X``, whose ids differ from those of the text alone (on the built-in corpus the
    standalone ids had 4x the continuation NLL of the in-context ones under a memorising model). The research mines its
    secrets as token n-grams of the training data, so its ACR targets are in-context ids by construction; this gives
    planted and mined-then-decoded secrets the same: the tokens of ``record[:end]`` after the longest prefix they share
    with the tokens of ``record[:start]`` (a token straddling the start, such as the space, is kept)."""
    from collections import Counter

    counts: Counter = Counter()
    for t in containing[:max_records]:
        start = t.index(text)
        before = tokenizer.encode(t[:start])
        upto = tokenizer.encode(t[: start + len(text)])
        k = 0
        while k < min(len(before), len(upto)) and before[k] == upto[k]:
            k += 1
        counts[tuple(upto[k:])] += 1
    if not counts:
        return None
    return list(max(counts.items(), key=lambda kv: (kv[1], -len(kv[0])))[0])
