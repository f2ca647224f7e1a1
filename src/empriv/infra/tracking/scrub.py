"""What goes to W&B: every value scrubbed of secrets and canaries (:class:`SecretScrubber`) and made JSON-safe
(:func:`numeric`)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("empriv.tracking")  # one logger for the package, named as before it moved
REDACTED = "[redacted]"

_MIN_TEXT = 6  # very short fragments would redact ordinary words
_MIN_TOKENS = 3  # token-id needles: shorter runs of ids occur by chance in any list of numbers


class SecretScrubber:
    """Replaces any string that contains one of ``secrets`` (texts, prompts, continuations) and any list of
    integers that contains one of ``token_sequences`` (canaries as token ids) by ``[redacted]``."""

    def __init__(self, secrets: Iterable[dict] = (), token_sequences: Mapping[str, Sequence[int]] | None = None):
        self._needles: list[tuple[str, str]] = []
        self._sequences: list[tuple[str, tuple[int, ...]]] = []
        for s in secrets:
            for key in ("text", "prompt", "continuation"):
                value = s.get(key)
                if value and len(value) >= _MIN_TEXT:
                    self._needles.append((s.get("id", "?"), value))
        for sid, tokens in (token_sequences or {}).items():
            self.add_token_sequence(sid, tokens)

    def add_token_sequence(self, sid: str, tokens: Sequence[int]) -> None:
        tokens = tuple(int(t) for t in tokens)
        if len(tokens) >= _MIN_TOKENS:
            self._sequences.append((sid, tokens))
            # the ways a list of ids is written as text (JSON, space- or comma-separated)
            for text in (json.dumps(list(tokens)), " ".join(map(str, tokens)), ",".join(map(str, tokens))):
                self._needles.append((sid, text))

    @classmethod
    def from_files(cls, *paths: str | Path) -> "SecretScrubber":
        """Secrets from every JSON-lines file of ``paths`` that exists (planted and mined lists)."""
        from empriv.io import read_jsonl

        rows: list[dict] = []
        for path in paths:
            if Path(path).exists():
                rows.extend(read_jsonl(path))
        return cls(rows)

    def with_canaries(self, canary_set, tokenizer=None) -> "SecretScrubber":
        """This scrubber plus every canary of ``canary_set`` (:class:`~empriv.secrets.canaries.CanarySet`): its
        token ids (prefix + secret, and the secret alone) and, with ``tokenizer``, its decoded text."""
        out = SecretScrubber()
        out._needles, out._sequences = list(self._needles), list(self._sequences)
        for c in canary_set.canaries:
            out.add_token_sequence(c.id, c.tokens)
            out.add_token_sequence(c.id, c.secret)
            if tokenizer is not None:
                vocab = tokenizer.vocab_size
                for part in (c.tokens, c.secret):
                    if part and all(t < vocab for t in part):
                        text = tokenizer.decode(list(part))
                        if len(text.strip()) >= _MIN_TEXT:
                            out._needles.append((c.id, text))
        return out

    @property
    def needles(self) -> list[str]:
        """Every string this scrubber looks for (for tests that scan written files)."""
        return [n for _, n in self._needles]

    def _hit_sequence(self, values: Sequence[int]) -> str | None:
        n = len(values)
        for sid, seq in self._sequences:
            k = len(seq)
            if k <= n and any(tuple(values[i : i + k]) == seq for i in range(n - k + 1)):
                return sid
        return None

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, str):
            for sid, needle in self._needles:
                if needle in obj:
                    log.warning("a value to be logged contained secret %s: redacted", sid)
                    return REDACTED
            return obj
        if isinstance(obj, dict):
            return {self(k) if isinstance(k, str) else k: self(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            if self._sequences and obj and all(isinstance(v, int) and not isinstance(v, bool) for v in obj):
                sid = self._hit_sequence(obj)
                if sid is not None:
                    log.warning("a value to be logged contained the token ids of %s: redacted", sid)
                    return REDACTED
            return type(obj)(self(v) for v in obj)
        return obj


def numeric(obj: Any) -> Any:
    """``obj`` as JSON-safe values: non-finite floats (∞ = non-private) become None, numpy/torch scalars
    Python numbers, tuples lists, paths strings; nested dicts and lists are converted throughout."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {str(k): numeric(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [numeric(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):
        return numeric(obj.item())
    return str(obj)
