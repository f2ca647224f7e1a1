"""Secrets whose memorisation is measured, each split into a prompt s₁ and a continuation s₂.

For the synthetic corpus the secrets are the generator's planted list (mining them from real
corpora is another stage of work). Each secret gets, in the training split: its number of
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


def load_overrides(path: str | Path | None) -> dict[str, tuple[str, str]]:
    if path is None:
        return {}
    from empriv.io import read_jsonl

    out = {}
    for i, row in enumerate(read_jsonl(path)):
        missing = {"id", "prompt", "continuation"} - set(row)
        if missing:
            raise ConfigError(f"{path} line {i + 1}: missing keys {sorted(missing)}")
        if not row["prompt"] or not row["continuation"]:
            raise ConfigError(f"{path} line {i + 1} (id {row['id']}): prompt and continuation must be non-empty")
        out[row["id"]] = (row["prompt"], row["continuation"])
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
            }
        )
    return records
