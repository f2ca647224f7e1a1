"""Record selection for user-level DP (Chua et al., "Mind the Privacy Unit!", §4.1 and §4.2).

Group Privacy (the paper's Algorithm 1) bounds each privacy unit's contribution before training:
:func:`select_k` keeps **exactly k** records per unit, chosen by one of five strategies —

* ``random``: k records drawn uniformly without replacement;
* ``longest`` / ``shortest``: the k records with the most / fewest tokens;
* ``highest_perplexity`` / ``lowest_perplexity``: the k records most / least surprising to the
  *initial* base model, from a per-record score computed once before fine-tuning
  (:func:`record_mean_nll`; mean NLL and perplexity = exp(mean NLL) rank records identically).

Ties are broken by the lower record index, so the deterministic strategies do not depend on the
generator. A unit with fewer than k records keeps each of its records once and fills the
remaining slots with records drawn uniformly *with replacement* from the same unit (the paper
resamples; how is not stated — this choice uses every record at least once). With
``resample=False`` such a unit is an error instead.

User-wise DP-SGD (Algorithm 2) can also draw a **random chunk** each step: the unit's records
concatenated into one token stream and a window of the model's length taken at a uniformly random
offset (:func:`random_chunk`, :func:`unit_stream`, :func:`random_window`).

Records are addressed by their index 0..M-1 in the corpus (or split) being selected from; a
unit → record-indices mapping comes from :func:`empriv.data.units.records_by_unit`. Per-record
scores are cached by record *id* (:func:`write_record_scores`, :func:`read_record_scores`) so a
pipeline stage can compute them once and re-align them to any split.

Random draws accept a ``numpy.random.Generator``, a ``random.Random`` or a ``torch.Generator``:
every draw goes through one uniform-integer primitive, so the same generator state gives the same
selection. Nothing here is used by the pipeline yet (see docs/data.md).
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from empriv.checks import require_int

STRATEGIES = ("random", "longest", "shortest", "highest_perplexity", "lowest_perplexity")
PERPLEXITY_STRATEGIES = ("highest_perplexity", "lowest_perplexity")
LENGTH_STRATEGIES = ("longest", "shortest")

SCORES_KIND = "record_mean_nll"


# ----------------------------------------------------------------------------- checks
def check_strategy(strategy) -> str:
    """``strategy`` if it is one of :data:`STRATEGIES`, else a one-line error with the closest name."""
    if strategy in STRATEGIES:
        return strategy
    close = difflib.get_close_matches(str(strategy), STRATEGIES, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}{hint}")


def _check_rng(rng):
    if isinstance(rng, (np.random.Generator, random.Random)):
        return rng
    try:
        import torch

        if isinstance(rng, torch.Generator):
            return rng
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    raise ValueError(
        f"rng must be a numpy.random.Generator, random.Random or torch.Generator, got {type(rng).__name__}"
    )


def _uniform_int(rng, n: int) -> int:
    """One uniform draw from {0, …, n-1}."""
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(n))
    if isinstance(rng, random.Random):
        return rng.randrange(n)
    import torch

    return int(torch.randint(n, (1,), generator=rng))


def _check_per_record(name: str, values, n_records: int, *, integer: bool) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, one per record, got {type(values).__name__}") from None
    if arr.ndim != 1 or arr.shape[0] != n_records:
        raise ValueError(f"{name} must have one value per record ({n_records}), got shape {tuple(arr.shape)}")
    bad = ~np.isfinite(arr)
    if integer:
        bad |= (arr < 0) | (arr != np.round(arr))
    if bad.any():
        i = int(np.argmax(bad))
        allowed = "a non-negative integer" if integer else "finite"
        raise ValueError(f"{name}[{i}] must be {allowed}, got {values[i]!r}")
    return arr


def _check_units(units) -> tuple[list[tuple[object, list[int]]], int]:
    """(unit, record indices) pairs in mapping order, and M; the units must partition 0..M-1."""
    if not isinstance(units, Mapping) or not units:
        raise ValueError(f"units must be a non-empty mapping unit id -> record indices, got {type(units).__name__}")
    pairs, seen = [], 0
    for unit, idx in units.items():
        if isinstance(idx, (str, bytes)) or not isinstance(idx, Sequence):
            raise ValueError(f"units[{unit!r}] must be a sequence of record indices, got {type(idx).__name__}")
        idx = list(idx)
        if not idx:
            raise ValueError(f"units[{unit!r}] has no records; every unit needs at least one")
        for i in idx:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise ValueError(f"units[{unit!r}] holds a non-integer record index {i!r}")
        pairs.append((unit, [int(i) for i in idx]))
        seen += len(idx)
    flat = np.fromiter((i for _, idx in pairs for i in idx), dtype=np.int64, count=seen)
    if not np.array_equal(np.sort(flat), np.arange(seen)):
        values, counts = np.unique(flat, return_counts=True)
        dup = values[counts > 1]
        what = f"record {int(dup[0])} is in more than one place" if dup.size else (
            f"indices must be 0..{seen - 1}, got min {int(flat.min())} max {int(flat.max())}")
        raise ValueError(f"units must assign each record 0..M-1 to exactly one unit: {what}")
    return pairs, seen


# ----------------------------------------------------------------------------- select_k
@dataclass(frozen=True)
class Selection:
    """The bounded record set of Group Privacy: ``k`` slots per unit, units in the input's order.

    ``records[j]`` is the record index of slot j and ``units[j]`` its unit; a resampled record
    fills more than one slot of its unit. ``resampled_units`` lists the units that had fewer than k.
    """

    records: tuple[int, ...]
    units: tuple
    k: int
    strategy: str
    resampled_units: tuple = ()

    def by_unit(self) -> dict:
        out: dict = {}
        for unit, rec in zip(self.units, self.records):
            out.setdefault(unit, []).append(rec)
        return out

    def __len__(self) -> int:
        return len(self.records)


def select_k(units: Mapping, k: int, strategy: str, rng, *, n_tokens=None, scores=None,
             resample: bool = True) -> Selection:
    """Exactly ``k`` records per unit chosen by ``strategy`` (Algorithm 1, stage 2).

    ``units`` maps each unit id to its record indices; together they must cover the records
    0..M-1 once each. ``n_tokens`` (token count per record, length M) is needed by ``longest`` and
    ``shortest``; ``scores`` (per-record mean NLL or perplexity under the initial base model,
    length M) by the perplexity strategies. Within a unit, slots are in strategy order (longest
    first, highest score first, …; ``random``: draw order), ties by the lower index; the resampled
    slots of a short unit come last. ``rng`` is used only for ``random`` and for resampling.

    Every input is checked before any selection: k < 1, an unknown strategy, a missing or
    mis-sized ``n_tokens``/``scores``, and (``resample=False``) a unit with fewer than k records
    each raise a one-line ``ValueError``.
    """
    k = require_int("k", k, 1)
    strategy = check_strategy(strategy)
    rng = _check_rng(rng)
    pairs, m = _check_units(units)
    if strategy in LENGTH_STRATEGIES and n_tokens is None:
        raise ValueError(f"strategy {strategy!r} needs n_tokens (the token count of each record)")
    if strategy in PERPLEXITY_STRATEGIES and scores is None:
        raise ValueError(
            f"strategy {strategy!r} needs scores (each record's mean NLL under the initial base model, "
            "see record_mean_nll)")
    lengths = None if n_tokens is None else _check_per_record("n_tokens", n_tokens, m, integer=True)
    score = None if scores is None else _check_per_record("scores", scores, m, integer=False)
    short = [(u, len(idx)) for u, idx in pairs if len(idx) < k]
    if short and not resample:
        unit, count = short[0]
        raise ValueError(
            f"unit {unit!r} has {count} record(s), fewer than k={k}, and resample is off "
            f"({len(short)} such unit(s)); use k <= {min(c for _, c in short)} or resample=True")

    records: list[int] = []
    slots: list = []
    for unit, idx in pairs:
        if strategy == "random":
            pool = list(idx)
            chosen = []
            for j in range(min(k, len(pool))):  # partial Fisher-Yates: k draws without replacement
                r = j + _uniform_int(rng, len(pool) - j)
                pool[j], pool[r] = pool[r], pool[j]
                chosen.append(pool[j])
        else:
            if strategy == "longest":
                key = lambda i: (-lengths[i], i)  # noqa: E731
            elif strategy == "shortest":
                key = lambda i: (lengths[i], i)  # noqa: E731
            elif strategy == "highest_perplexity":
                key = lambda i: (-score[i], i)  # noqa: E731
            else:
                key = lambda i: (score[i], i)  # noqa: E731
            chosen = sorted(idx, key=key)[:k]
        while len(chosen) < k:  # a short unit: resample its records with replacement
            chosen.append(idx[_uniform_int(rng, len(idx))])
        records.extend(chosen)
        slots.extend([unit] * k)
    return Selection(tuple(records), tuple(slots), k, strategy, tuple(u for u, _ in short))


# ----------------------------------------------------------------------------- random chunk
def unit_stream(record_tokens: Sequence[Sequence[int]], separator: int | None = None) -> list[int]:
    """A unit's records concatenated in the given order into one token stream.

    ``separator`` (e.g. the end-of-text id) goes between consecutive records, not at the ends;
    None joins them directly.
    """
    if isinstance(record_tokens, (str, bytes)) or not isinstance(record_tokens, Sequence) or not record_tokens:
        raise ValueError("record_tokens must be a non-empty sequence of token-id lists (one per record)")
    stream: list[int] = []
    for j, toks in enumerate(record_tokens):
        if j and separator is not None:
            stream.append(int(separator))
        stream.extend(int(t) for t in toks)
    return stream


def random_window(stream: Sequence[int], window: int, rng) -> list[int]:
    """``window`` consecutive tokens of ``stream`` starting at a uniform offset in [0, len − window].

    A stream of at most ``window`` tokens is returned whole (no draw is made): it is shorter than
    the window and the caller pads it — ``empriv.models.lm.encode_fixed`` right-pads and its loss
    mask gives the padding no loss. Each call draws afresh (User-wise: one chunk per unit per step).
    """
    window = require_int("window", window, 1)
    rng = _check_rng(rng)
    if len(stream) == 0:
        raise ValueError("the unit's token stream is empty: a unit needs at least one token to draw a chunk")
    if len(stream) <= window:
        return list(stream)
    start = _uniform_int(rng, len(stream) - window + 1)
    return list(stream[start:start + window])


def random_chunk(record_tokens: Sequence[Sequence[int]], window: int, rng, *, separator: int | None = None) -> list[int]:
    """Random chunk (User-wise DP-SGD): a random ``window``-token slice of the unit's concatenated records.

    The paper takes a chunk "of the maximum record length (as defined by the model)"; with
    ``encode_fixed`` (which puts the end-of-text id first) use ``window = seq_len - 1``. Units with
    fewer tokens than the window give their whole stream, padded and masked by ``encode_fixed``.
    For many steps over one unit, build :func:`unit_stream` once and call :func:`random_window`.
    """
    return random_window(unit_stream(record_tokens, separator), window, rng)


# ----------------------------------------------------------------------------- perplexity scores
def record_mean_nll(model, record_tokens: Sequence[Sequence[int]], *, eos_id: int, seq_len: int,
                    batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
    """Mean next-token NLL (nats) of each record under ``model``: float64 array, one per record.

    Each record is scored as the training loss sees it: ``[EOS] + tokens`` cut to ``seq_len``
    (tokens past the window do not count), mean over its real tokens
    (:func:`empriv.models.lm.per_sample_mean_nll`). Perplexity is ``exp`` of it. The model is put
    in eval mode (no dropout) under ``torch.no_grad`` and its mode restored afterwards. Batches
    are padded only to their longest record (right padding under causal attention changes no
    real token's loss). An empty record has no perplexity and is an error.
    """
    import torch

    from empriv.models.lm import encode_fixed, per_sample_mean_nll
    from empriv.infra.progress import progress

    eos_id = require_int("eos_id", eos_id, 0)
    seq_len = require_int("seq_len", seq_len, 2)
    batch_size = require_int("batch_size", batch_size, 1)
    for i, toks in enumerate(record_tokens):
        if len(toks) == 0:
            raise ValueError(f"record {i} has no tokens: its perplexity is undefined")
    n = len(record_tokens)
    out = np.empty(n, dtype=np.float64)
    was_training = model.training
    model.eval()
    starts = range(0, n, batch_size)
    try:
        with torch.no_grad():
            it = progress(starts, total=len(starts), desc="record perplexity", unit="batches") if show_progress else starts
            for start in it:
                batch = record_tokens[start:start + batch_size]
                width = min(seq_len, 1 + max(len(t) for t in batch))
                ids, mask = encode_fixed(batch, eos_id, width)
                out[start:start + len(batch)] = per_sample_mean_nll(model, ids, mask).double().cpu().numpy()
    finally:
        model.train(was_training)
    return out


def scores_by_id(record_ids: Sequence[str], scores) -> dict[str, float]:
    """Record id → score (the cacheable form); ids must be unique and match the scores one to one."""
    ids = [str(r) for r in record_ids]
    if len(set(ids)) != len(ids):
        dup = next(r for r in ids if ids.count(r) > 1)
        raise ValueError(f"record_ids must be unique, got {dup!r} more than once")
    arr = _check_per_record("scores", scores, len(ids), integer=False)
    return {r: float(v) for r, v in zip(ids, arr)}


def align_scores(by_id: Mapping[str, float], record_ids: Sequence[str]) -> np.ndarray:
    """The scores of ``record_ids`` in that order (e.g. one split's records) from an id → score mapping."""
    missing = [str(r) for r in record_ids if str(r) not in by_id]
    if missing:
        raise ValueError(f"scores lack {len(missing)} of the {len(record_ids)} records (first: {missing[0]!r})")
    return np.array([float(by_id[str(r)]) for r in record_ids], dtype=np.float64)


def write_record_scores(path: str | Path, record_ids: Sequence[str], scores, *, meta: Mapping | None = None) -> None:
    """Write per-record scores as JSON ``{"kind", "meta", "scores": {id: mean NLL}}``, atomically.

    ``meta`` records what produced them (base model, seq_len, …); floats round-trip exactly.
    """
    from empriv.io import write_json

    write_json(path, {"kind": SCORES_KIND, "meta": dict(meta or {}), "scores": scores_by_id(record_ids, scores)})


def read_record_scores(path: str | Path, record_ids: Sequence[str] | None = None):
    """The scores written by :func:`write_record_scores`: the id → score dict, or (``record_ids``
    given) an array aligned to those ids."""
    from empriv.io import read_json

    data = read_json(path)
    if not isinstance(data, dict) or data.get("kind") != SCORES_KIND or not isinstance(data.get("scores"), dict):
        raise ValueError(f"{path} is not a record-scores file (kind {SCORES_KIND!r})")
    by_id = {str(k): float(v) for k, v in data["scores"].items()}
    return by_id if record_ids is None else align_scores(by_id, record_ids)


def perplexity(mean_nll) -> np.ndarray:
    """Perplexity exp(mean NLL) of per-record scores."""
    return np.exp(np.asarray(mean_nll, dtype=np.float64))


__all__ = [
    "LENGTH_STRATEGIES",
    "PERPLEXITY_STRATEGIES",
    "STRATEGIES",
    "Selection",
    "align_scores",
    "check_strategy",
    "perplexity",
    "random_chunk",
    "random_window",
    "read_record_scores",
    "record_mean_nll",
    "scores_by_id",
    "select_k",
    "unit_stream",
    "write_record_scores",
]
