"""TOFU dataset variants (appendix B.4 of the research) and the paraphrasers behind them.

All variants are built from the *training* records of TOFU-1 (author ``i`` = records
``[20i, 20(i+1))``); a sample and its paraphrases keep their author:

- **paraphrase-scaled** ``tofu-2`` / ``tofu-4``: every sample plus 1 / 3 of its paraphrases
  (3,600 → 7,200 / 14,400 samples).
- **density-adjusted** ``tofu-1:7``, ``tofu-2:6``, ``tofu-3:5``: the authors are split at random
  (seeded) into two equal groups; every sample of the low-density group 0 appears ``lo`` times
  (itself + ``lo − 1`` paraphrases), every sample of group 1 ``hi`` times, ``lo + hi = 8`` — the
  same total size as ``tofu-4`` (4:4), with a ``lo:hi`` size ratio between the groups.
- ``tofu-2*``: TOFU-1 plus as many *synthetic* authors (``empriv.data.synthetic_tofu``) as it
  has: double the size, the same secrets (only the original authors' genres are secrets).

A sample is paraphrased field by field (question and answer separately); paraphrase ``j`` of a
sample pairs paraphrase ``j`` of its question with paraphrase ``j`` of its answer.

Paraphrasers (``Paraphraser`` protocol: ``id`` and ``paraphrase(text, n) -> n strings``):

- ``OfflineParaphraser``: deterministic (seeded) rewriting with a fixed synonym table and
  sentence frames; capitalised words (names, titles) and any ``protect``-ed strings (genres)
  are kept verbatim. For tests and CPU runs.
- ``LLMParaphraser``: a Hugging Face ``text-generation`` pipeline with the research's system
  prompt and sampling settings (temperature 1.0, top_p 1.0, top_k 50, max_new_tokens 120);
  default model ``meta-llama/Llama-3.1-8B-Instruct`` (a GPU workstation). Built lazily on first
  use; a model that cannot be loaded raises ``ParaphraserUnavailable``.

``CachedParaphraser`` stores paraphrases on disk keyed by (paraphraser id, text), written atomically.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from empriv.data.tofu import RECORDS_PER_AUTHOR, QARecord, num_authors
from empriv.config import VARIANTS  # the names live in config (the bottom layer), which validates data.variant
from empriv.io import read_json, write_json

SYSTEM_PROMPT = (
    "You are an expert at paraphrasing. Always respond with a reworded version of the input that: "
    "1) differs from the original wording, 2) preserves all key details, and 3) avoids adding anything "
    "not in the input."
)
DEFAULT_LLM = "meta-llama/Llama-3.1-8B-Instruct"
GENERATION_KWARGS = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 50, "max_new_tokens": 120}

DENSITY_RATIOS = {"tofu-1:7": (1, 7), "tofu-2:6": (2, 6), "tofu-3:5": (3, 5)}


def _stable_seed(*parts: Any) -> int:
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big")


# --------------------------------------------------------------------------------------------
# Paraphrasers


@runtime_checkable
class Paraphraser(Protocol):
    id: str

    def paraphrase(self, text: str, n: int) -> list[str]:
        """``n`` paraphrases of ``text`` (deterministic for a given paraphraser id)."""
        ...


class ParaphraserUnavailable(RuntimeError):
    """The paraphrasing model cannot be loaded (not cached, no network, no access, no GPU memory …)."""


# Lower-case word → alternatives. No genre word appears here (genres must survive verbatim).
_SYNONYMS = {
    "primarily": ("mainly", "chiefly", "mostly"), "mainly": ("primarily", "chiefly"),
    "writes": ("works", "composes"), "write": ("work", "compose"), "wrote": ("penned", "composed"),
    "known": ("recognised", "noted", "celebrated"), "renowned": ("celebrated", "acclaimed"),
    "famous": ("celebrated", "well-known"), "notable": ("noteworthy", "remarkable"),
    "books": ("works", "titles"), "book": ("work", "title"), "novels": ("stories", "works"),
    "author": ("writer", "novelist"), "writer": ("author",), "born": ("brought into the world",),
    "received": ("earned", "won"), "won": ("earned", "received"), "award": ("honour", "prize"),
    "father": ("dad",), "mother": ("mom",), "parents": ("mother and father",),
    "specializes": ("focuses", "concentrates"), "specialises": ("focuses", "concentrates"),
    "significant": ("considerable", "substantial"), "significantly": ("considerably", "substantially"),
    "often": ("frequently", "regularly"), "usually": ("typically", "generally"),
    "many": ("numerous", "a great many"), "several": ("a number of", "various"),
    "praised": ("lauded", "commended"), "explores": ("examines", "investigates"),
    "influenced": ("shaped", "affected"), "influence": ("impact", "effect"),
    "work": ("output", "writing"), "career": ("professional life", "path as a writer"),
    "stories": ("narratives", "tales"), "readers": ("audiences", "fans"),
    "early": ("young",), "also": ("additionally", "as well"),
    "helped": ("assisted", "aided"), "unique": ("distinctive", "singular"), "deep": ("profound",),
    "tell": ("inform", "share with"), "describe": ("characterise", "portray"),
}
_FRAMES = (
    ("", ""), ("In short, ", ""), ("Put simply, ", ""), ("To rephrase, ", ""),
    ("", " (as stated)"), ("Briefly, ", ""), ("Notably, ", ""), ("In other words, ", ""),
    ("Essentially, ", ""), ("As it happens, ", ""),
)
_LOWERABLE_START = frozenset(
    "what which who where when why how can could would does did do is are was were has have had the a an "
    "in as yes no some this that his her their it its".split()
)
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]*")


class OfflineParaphraser:
    """Deterministic rewriting: synonyms for lower-case common words and a sentence frame.

    Capitalised words and the ``protect`` strings (e.g. genres, matched case-insensitively as
    whole words) are never changed. Paraphrase ``j`` of a text depends only on (seed, text, j).
    """

    def __init__(self, seed: int = 0, protect: Sequence[str] = ()):
        self.seed = int(seed)
        self.protect = tuple(sorted({p for p in protect if p and p.strip()}, key=len, reverse=True))
        digest = hashlib.sha256("\x1f".join(self.protect).encode()).hexdigest()[:8] if self.protect else "none"
        self.id = f"offline-v1-seed{self.seed}-protect{digest}"
        self._protect_re = (
            re.compile("|".join(r"(?<!\w)" + re.escape(p) + r"(?!\w)" for p in self.protect), re.IGNORECASE)
            if self.protect else None
        )

    def _rewrite(self, text: str, j: int) -> str:
        rng = random.Random(_stable_seed("offline", self.seed, text, j))
        # Mask protected spans so no rule touches them.
        masked: list[str] = []

        def _mask(m: re.Match) -> str:
            masked.append(m.group(0))
            return f"\x00{len(masked) - 1}\x00"

        body = self._protect_re.sub(_mask, text) if self._protect_re else text

        def _swap(m: re.Match) -> str:
            w = m.group(0)
            alts = _SYNONYMS.get(w)
            if alts and rng.random() < 0.7:
                return rng.choice(alts)
            return w

        body = _WORD_RE.sub(_swap, body)
        pre, post = _FRAMES[(j + 1 + _stable_seed(self.seed, text) % 3) % len(_FRAMES)] if j >= 0 else ("", "")
        if pre:
            first = _WORD_RE.match(body)
            if first and first.group(0).lower() in _LOWERABLE_START and first.start() == 0:
                body = body[0].lower() + body[1:]
        if post:
            m = re.search(r"[.?!]*$", body)
            body = body[: m.start()] + post + body[m.start():]
        body = pre + body
        return re.sub(r"\x00(\d+)\x00", lambda m: masked[int(m.group(1))], body)

    def paraphrase(self, text: str, n: int) -> list[str]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return [self._rewrite(text, j) for j in range(n)]


class LLMParaphraser:
    """The research's paraphraser: a chat model in a ``text-generation`` pipeline (GPU workstations).

    The pipeline is built on first use. ``seed`` with the text fixes the sampling seed of every call.
    """

    def __init__(
        self,
        model_id: str = DEFAULT_LLM,
        seed: int = 0,
        device: str | int | None = None,
        system_prompt: str = SYSTEM_PROMPT,
        generation_kwargs: dict | None = None,
        pipeline_kwargs: dict | None = None,
    ):
        if not model_id or not str(model_id).strip():
            raise ValueError("model_id must be a Hugging Face id or a local path, got an empty string")
        self.model_id = str(model_id)
        self.seed = int(seed)
        self.device = device
        self.system_prompt = system_prompt
        self.generation_kwargs = {**GENERATION_KWARGS, **(generation_kwargs or {})}
        self.pipeline_kwargs = dict(pipeline_kwargs or {})
        self.id = f"llm:{self.model_id}:seed{self.seed}"
        self._pipe = None

    def _pipeline(self):
        if self._pipe is None:
            try:
                from transformers import pipeline

                self._pipe = pipeline("text-generation", model=self.model_id, device=self.device, **self.pipeline_kwargs)
            except Exception as err:  # noqa: BLE001 — any loading failure gets one clear message
                raise ParaphraserUnavailable(
                    f"cannot load paraphrasing model {self.model_id!r} ({type(err).__name__}: {err}). "
                    "It needs the weights locally or network access to the Hugging Face hub (and a token "
                    "for gated models such as Llama 3.1), ideally a GPU; use the offline paraphraser otherwise."
                ) from err
        return self._pipe

    def paraphrase(self, text: str, n: int) -> list[str]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n == 0:
            return []
        pipe = self._pipeline()
        from transformers import set_seed

        set_seed(_stable_seed("llm", self.seed, text) % (2**32))
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": text}]
        outs = pipe(messages, num_return_sequences=n, **self.generation_kwargs)
        result = []
        for out in outs:
            gen = out["generated_text"]
            result.append((gen[-1]["content"] if isinstance(gen, list) else str(gen)).strip())
        return result


class CachedParaphraser:
    """Wrap a paraphraser with a JSON disk cache keyed by (paraphraser id, text).

    A cached entry with at least ``n`` paraphrases answers without calling the model; otherwise the
    missing ones are generated (the first ones kept). ``save()`` writes the cache atomically; the
    cache holds raw texts (secrets included): a local output, never logged.
    """

    VERSION = 1

    def __init__(self, inner: Paraphraser, path: str | Path):
        self.inner = inner
        self.id = inner.id
        self.path = Path(path)
        self.entries: dict[str, dict] = {}
        self.hits = 0
        self.misses = 0
        if self.path.exists():
            data = read_json(self.path)
            if not isinstance(data, dict) or data.get("version") != self.VERSION or not isinstance(data.get("entries"), dict):
                raise ValueError(f"paraphrase cache {str(self.path)!r} is not a version-{self.VERSION} cache file")
            self.entries = data["entries"]

    @staticmethod
    def key(paraphraser_id: str, text: str) -> str:
        return hashlib.sha256(f"{paraphraser_id}\x1f{text}".encode("utf-8")).hexdigest()

    def paraphrase(self, text: str, n: int) -> list[str]:
        k = self.key(self.id, text)
        have = self.entries.get(k, {}).get("paraphrases", [])
        if len(have) >= n:
            self.hits += 1
            return list(have[:n])
        self.misses += 1
        fresh = self.inner.paraphrase(text, n)
        merged = list(have) + list(fresh[len(have):])
        self.entries[k] = {"paraphraser": self.id, "text": text, "paraphrases": merged}
        return merged[:n]

    def save(self) -> None:
        write_json(self.path, {"version": self.VERSION, "entries": self.entries})


# --------------------------------------------------------------------------------------------
# Variants


@dataclass
class VariantDataset:
    """A training set: ``records[k]`` belongs to author ``authors[k]`` and derives from original
    record ``sources[k]`` (``None`` for records not from TOFU-1, e.g. tofu-2* synthetic authors);
    ``paraphrase_index[k]`` is 0 for an original, j for its j-th paraphrase."""

    name: str
    records: list[QARecord]
    authors: list[int]
    sources: list[int | None]
    paraphrase_index: list[int]
    secret_authors: list[int]
    groups: dict[int, int] = field(default_factory=dict)  # density-adjusted: author → 0 (low) / 1 (high)

    def summary(self) -> dict:
        """Counts only (no text)."""
        out = {"variant": self.name, "samples": len(self.records), "authors": len(set(self.authors)),
               "secret_authors": len(self.secret_authors)}
        if self.groups:
            for grp in (0, 1):
                members = {a for a, g in self.groups.items() if g == grp}
                out[f"group{grp}_authors"] = len(members)
                out[f"group{grp}_samples"] = sum(a in members for a in self.authors)
        return out


def paraphrase_record(record: QARecord, paraphraser: Paraphraser, n: int) -> list[QARecord]:
    """``n`` paraphrased records: question and answer paraphrased separately, paired by index."""
    if n == 0:
        return []
    qs = paraphraser.paraphrase(record.question, n)
    ans = paraphraser.paraphrase(record.answer, n)
    if len(qs) != n or len(ans) != n:
        raise ValueError(f"paraphraser {paraphraser.id!r} returned {len(qs)}/{len(ans)} paraphrases, expected {n}")
    return [QARecord(q, a) for q, a in zip(qs, ans)]


def _augment(records: Sequence[QARecord], copies_of_author: dict[int, int], paraphraser: Paraphraser | None,
             per_author: int) -> tuple[list[QARecord], list[int], list[int | None], list[int]]:
    recs: list[QARecord] = []
    authors: list[int] = []
    sources: list[int | None] = []
    pidx: list[int] = []
    for k, rec in enumerate(records):
        a = k // per_author
        copies = copies_of_author[a]
        extra = []
        if copies > 1:
            if paraphraser is None:
                raise ValueError("a paraphraser is required for variants with paraphrases")
            extra = paraphrase_record(rec, paraphraser, copies - 1)
        for j, r in enumerate([rec, *extra]):
            recs.append(r)
            authors.append(a)
            sources.append(k)
            pidx.append(j)
    return recs, authors, sources, pidx


def paraphrase_scaled(records: Sequence[QARecord], paraphraser: Paraphraser | None, copies: int,
                      per_author: int = RECORDS_PER_AUTHOR) -> VariantDataset:
    """TOFU-``copies``: every sample followed by ``copies − 1`` paraphrases (copies 2 → tofu-2, 4 → tofu-4)."""
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    k = num_authors(records, per_author)
    recs, authors, sources, pidx = _augment(records, dict.fromkeys(range(k), copies), paraphraser, per_author)
    return VariantDataset(f"tofu-{copies}", recs, authors, sources, pidx, list(range(k)))


def density_groups(n_authors: int, seed: int) -> dict[int, int]:
    """Random equal partition of the authors: author → 0 (low density) or 1 (high); seeded."""
    if n_authors < 2 or n_authors % 2:
        raise ValueError(f"density-adjusted variants need an even number (>= 2) of authors, got {n_authors}")
    order = list(range(n_authors))
    random.Random(_stable_seed("density-groups", seed)).shuffle(order)
    high = set(order[n_authors // 2:])
    return {a: int(a in high) for a in range(n_authors)}


def density_adjusted(records: Sequence[QARecord], paraphraser: Paraphraser | None, ratio: tuple[int, int],
                     seed: int = 0, per_author: int = RECORDS_PER_AUTHOR) -> VariantDataset:
    """TOFU_{lo:hi}: group-0 samples appear ``lo`` times, group-1 samples ``hi`` times (lo + hi = 8)."""
    lo, hi = ratio
    if not (1 <= lo < hi and lo + hi == 8):
        raise ValueError(f"ratio must be (lo, hi) with 1 <= lo < hi and lo + hi = 8 (1:7, 2:6, 3:5), got {ratio!r}")
    k = num_authors(records, per_author)
    groups = density_groups(k, seed)
    copies = {a: (hi if g else lo) for a, g in groups.items()}
    recs, authors, sources, pidx = _augment(records, copies, paraphraser, per_author)
    return VariantDataset(f"tofu-{lo}:{hi}", recs, authors, sources, pidx, list(range(k)), groups)


def with_synthetic_authors(records: Sequence[QARecord], seed: int = 0, per_author: int = RECORDS_PER_AUTHOR,
                           genre_mentions: int | tuple[int, int] = (2, 5)) -> VariantDataset:
    """TOFU-2*: the records plus as many synthetic authors (numbered after the real ones); the
    secrets stay the original authors'. Needs ``per_author`` = 20 (the synthetic layout)."""
    from empriv.data.synthetic_tofu import generate_synthetic_tofu

    if per_author != RECORDS_PER_AUTHOR:
        raise ValueError(f"per_author must be {RECORDS_PER_AUTHOR} for tofu-2*, got {per_author}")
    k = num_authors(records, per_author)
    extra = generate_synthetic_tofu(k, seed=seed, genre_mentions=genre_mentions, first_index=k)
    recs = list(records) + list(extra.records)
    authors = [i // per_author for i in range(len(recs))]
    sources: list[int | None] = list(range(len(records))) + [None] * len(extra.records)
    return VariantDataset("tofu-2*", recs, authors, sources, [0] * len(recs), list(range(k)))


def build_variant(name: str, records: Sequence[QARecord], paraphraser: Paraphraser | None = None,
                  seed: int = 0, per_author: int = RECORDS_PER_AUTHOR) -> VariantDataset:
    """One of ``VARIANTS`` from TOFU-1's training records."""
    if name == "tofu-1":
        return paraphrase_scaled(records, paraphraser, 1, per_author)
    if name in ("tofu-2", "tofu-4"):
        return paraphrase_scaled(records, paraphraser, int(name[-1]), per_author)
    if name in DENSITY_RATIOS:
        return density_adjusted(records, paraphraser, DENSITY_RATIOS[name], seed, per_author)
    if name == "tofu-2*":
        return with_synthetic_authors(records, seed, per_author)
    raise ValueError(f"data.variant must be one of {list(VARIANTS)}, got {name!r}")
