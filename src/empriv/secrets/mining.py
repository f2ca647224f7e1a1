"""Mining secret candidates from a real corpus (appendix B.6 of the research, Enron).

1. Histogram of token n-grams (n = 50 in the research) over the training split. An n-gram is
   counted once per sample that contains it (sample-level count), so one email repeating a line
   does not make it "frequent"; n-grams in fewer than ``min_count`` samples are never candidates.
2. The top-K (500) n-grams by that count (ties broken by first occurrence in the corpus).
3. Iterative merging: whenever a suffix of one sequence of at least ``min_overlap`` tokens is a
   prefix of another (the n-grams of one long recurring string overlap by up to n − 1 tokens),
   the two are merged into one longer sequence — provided the merged sequence itself occurs in at
   least as many training samples as the K-th n-gram (so a merge never invents a string that is
   not recurring) and in at least ``merge_ratio`` (0.5) × the larger count of its two parts (so a
   frequent string is not swallowed by a rare extension). A sequence contained in another is
   dropped. Passes repeat until no merge applies; what remains are maximal sequences, none
   contained in another (two may still overlap where their merge was vetoed).
4. Each candidate: token ids, decoded text, token length, occurrences (number of training samples
   containing its token sequence) and frequency = occurrences / n.

Counting is done on token ids: n-grams are hashed with numpy (random 64-bit weights, so a
collision is ~1e-7 likely even over millions of distinct n-grams), and exact occurrences of the
final sequences are found by a byte search over the corpus encoded as uint32.

Which candidates are kept (degenerate strings, the model-based filters) is :mod:`empriv.secrets.candidates`; a
kept secret's prompt/continuation split and training-split facts are :mod:`empriv.secrets.records`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from empriv.checks import require_int, require_real

_SEPARATOR_ID = 0xFFFFFFFF


@dataclass(frozen=True)
class SecretCandidate:
    """One mined candidate secret (``text`` is sensitive: never log it)."""

    id: str
    token_ids: tuple[int, ...]
    text: str
    token_length: int
    occurrences: int
    frequency: float

    def to_row(self) -> dict:
        return {
            "id": self.id,
            "text": self.text,
            "token_ids": list(self.token_ids),
            "token_length": self.token_length,
            "occurrences": self.occurrences,
            "frequency": self.frequency,
        }


class _Corpus:
    """Training samples as one uint32 byte string, samples separated by an id no tokenizer uses."""

    def __init__(self, samples: Sequence[Sequence[int]]):
        import numpy as np

        starts, pieces, pos = [], [], 0
        for ids in samples:
            arr = np.asarray(ids, dtype=np.int64)
            if arr.size and (arr.min() < 0 or arr.max() >= _SEPARATOR_ID):
                raise ValueError(f"token ids must be in [0, {_SEPARATOR_ID}), got range [{arr.min()}, {arr.max()}]")
            starts.append(pos)
            pieces.append(arr.astype(np.uint32))
            pieces.append(np.array([_SEPARATOR_ID], dtype=np.uint32))
            pos += arr.size + 1
        self.starts = starts
        self.ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint32)
        self.buffer = self.ids.astype("<u4").tobytes()

    def positions(self, seq: Sequence[int]) -> list[int]:
        """Token positions where ``seq`` starts (never across a sample boundary)."""
        import numpy as np

        needle = np.asarray(seq, dtype="<u4").tobytes()
        out, start = [], 0
        while True:
            i = self.buffer.find(needle, start)
            if i < 0:
                return out
            if i % 4 == 0:
                out.append(i // 4)
                start = i + 4
            else:
                start = i + 1

    def sample_count(self, seq: Sequence[int]) -> int:
        """Number of samples containing ``seq``."""
        return len({bisect.bisect_right(self.starts, p) - 1 for p in self.positions(seq)})


def top_ngrams(
    samples: Sequence[Sequence[int]], n: int = 50, top_k: int = 500, min_count: int = 2, seed: int = 0
) -> list[tuple[tuple[int, ...], int]]:
    """The ``top_k`` token n-grams by sample-level count (≥ ``min_count``), as (ids, count), most frequent first."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    n = require_int("n (n-gram length)", n, 1)
    top_k = require_int("top_k", top_k, 1)
    min_count = require_int("min_count", min_count, 1)
    corpus = _Corpus(samples)
    if corpus.ids.size < n:
        return []
    weights = np.random.default_rng(seed).integers(1, 2**63, size=n, dtype=np.uint64) | np.uint64(1)
    windows = sliding_window_view(corpus.ids.astype(np.uint64), n)
    # Hash in chunks (uint64 arithmetic wraps, which is what we want).
    hashes = np.empty(windows.shape[0], dtype=np.uint64)
    chunk = 1 << 16
    with np.errstate(over="ignore"):
        for lo in range(0, windows.shape[0], chunk):
            hashes[lo : lo + chunk] = (windows[lo : lo + chunk] * weights).sum(axis=1, dtype=np.uint64)
    # Valid windows: no separator inside.
    is_sep = (corpus.ids == _SEPARATOR_ID).astype(np.int64)
    seps = np.concatenate([[0], np.cumsum(is_sep)])
    valid = (seps[n:] - seps[:-n]) == 0
    pos = np.nonzero(valid)[0]
    if pos.size == 0:
        return []
    h = hashes[pos]
    sample_of = np.searchsorted(np.asarray(corpus.starts), pos, side="right") - 1
    # One (hash, sample) pair per sample; keep the earliest position of each pair.
    order = np.lexsort((pos, sample_of, h))
    h_s, s_s, p_s = h[order], sample_of[order], pos[order]
    first_pair = np.ones(h_s.size, dtype=bool)
    first_pair[1:] = (h_s[1:] != h_s[:-1]) | (s_s[1:] != s_s[:-1])
    h_u, p_u = h_s[first_pair], p_s[first_pair]
    first_hash = np.ones(h_u.size, dtype=bool)
    first_hash[1:] = h_u[1:] != h_u[:-1]
    group_start = np.nonzero(first_hash)[0]
    counts = np.diff(np.append(group_start, h_u.size))
    first_pos = np.minimum.reduceat(p_u, group_start)
    keep = counts >= min_count
    counts, first_pos = counts[keep], first_pos[keep]
    best = np.lexsort((first_pos, -counts))[:top_k]
    return [(tuple(int(t) for t in corpus.ids[first_pos[i] : first_pos[i] + n]), int(counts[i])) for i in best]


def _contains(big: tuple[int, ...], small: tuple[int, ...]) -> bool:
    if len(small) > len(big):
        return False
    first = small[0]
    for i in range(len(big) - len(small) + 1):
        if big[i] == first and big[i : i + len(small)] == small:
            return True
    return False


def _drop_contained(seqs: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    seqs = sorted(set(seqs), key=lambda s: (-len(s), s))
    kept: list[tuple[int, ...]] = []
    for s in seqs:
        if not any(_contains(k, s) for k in kept):
            kept.append(s)
    return kept


def merge_overlapping(
    seqs: Sequence[tuple[int, ...]],
    min_overlap: int,
    accept: Callable[[tuple[int, ...], tuple[int, ...], tuple[int, ...]], bool] | None = None,
) -> list[tuple[int, ...]]:
    """Merge sequences whose suffix (≥ ``min_overlap`` tokens) is another's prefix, until none applies.

    ``accept(left, right, merged)`` may veto a merge (the miner requires the merged string to recur). Contained
    sequences are dropped. The result is sorted by (length desc, ids) for determinism.
    """
    min_overlap = require_int("min_overlap", min_overlap, 1)
    current = _drop_contained([tuple(s) for s in seqs if len(s) > 0])
    rejected: set[tuple[tuple[int, ...], tuple[int, ...], int]] = set()
    while True:
        by_prefix: dict[tuple[int, ...], list[int]] = {}
        for j, s in enumerate(current):
            if len(s) >= min_overlap:
                by_prefix.setdefault(s[:min_overlap], []).append(j)
        pairs = []  # (overlap, i, j)
        for i, a in enumerate(current):
            for start in range(1, len(a) - min_overlap + 1):
                for j in by_prefix.get(a[start : start + min_overlap], ()):
                    if j == i:
                        continue
                    b = current[j]
                    k = len(a) - start
                    if k < len(b) and a[start:] == b[:k]:
                        pairs.append((k, i, j))
        pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
        used_left, used_right = set(), set()
        parent = list(range(len(current)))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        nxt: dict[int, tuple[int, int]] = {}
        for k, i, j in pairs:
            if i in used_left or j in used_right or find(i) == find(j):
                continue
            a, b = current[i], current[j]
            if (a, b, k) in rejected:
                continue
            merged = a + b[k:]
            if accept is not None and not accept(a, b, merged):
                rejected.add((a, b, k))
                continue
            used_left.add(i)
            used_right.add(j)
            parent[find(j)] = find(i)
            nxt[i] = (j, k)
        if not nxt:
            return current
        # Stitch chains i → j → … (each node has at most one successor and one predecessor, no
        # cycles). Every link was accepted pairwise; a chain is re-checked as it grows and cut where
        # the longer string is vetoed.
        heads = [i for i in nxt if i not in used_right]
        out, consumed = [], set()
        for head in heads:
            seq, node = current[head], head
            consumed.add(head)
            while node in nxt:
                j, k = nxt[node]
                longer = seq + current[j][k:]
                if accept is None or accept(seq, current[j], longer):
                    seq = longer
                else:
                    out.append(seq)
                    seq = current[j]
                consumed.add(j)
                node = j
            out.append(seq)
        rest = [s for idx, s in enumerate(current) if idx not in consumed]
        current = _drop_contained(rest + out)


def mine_ngram_sequences(
    samples: Sequence[Sequence[int]],
    n: int = 50,
    top_k: int = 500,
    min_overlap: int | None = None,
    min_count: int = 2,
    merge_ratio: float = 0.5,
) -> list[tuple[tuple[int, ...], int]]:
    """Top-K n-grams merged into maximal recurring sequences, as (ids, sample-level count), most frequent first.

    ``min_overlap`` defaults to ``max(1, n // 2)`` tokens. A merge is accepted when the merged
    sequence occurs in at least as many samples as the K-th n-gram *and* in at least
    ``merge_ratio`` × the larger count of its two parts (so a frequent string is not swallowed by a
    rare extension of it, e.g. a chance token before it).
    """
    require_real("merge_ratio", merge_ratio, ge=0, le=1)
    top = top_ngrams(samples, n, top_k, min_count)
    if not top:
        return []
    overlap = max(1, n // 2) if min_overlap is None else min_overlap
    corpus = _Corpus(samples)
    threshold = min(c for _, c in top)
    cache: dict[tuple[int, ...], int] = {}

    def count(seq: tuple[int, ...]) -> int:
        if seq not in cache:
            cache[seq] = corpus.sample_count(seq)
        return cache[seq]

    def accept(a: tuple[int, ...], b: tuple[int, ...], merged: tuple[int, ...]) -> bool:
        c = count(merged)
        return c >= threshold and c >= merge_ratio * max(count(a), count(b))

    merged = merge_overlapping([s for s, _ in top], overlap, accept=accept)
    rows = [(s, count(s)) for s in merged]
    first = {s: (corpus.positions(s) or [0])[0] for s, _ in rows}
    rows.sort(key=lambda r: (-r[1], -len(r[0]), first[r[0]]))
    return rows


def mine_secret_candidates(
    train_texts: Sequence[str],
    tokenizer,
    n: int = 50,
    top_k: int = 500,
    min_overlap: int | None = None,
    min_count: int = 2,
    merge_ratio: float = 0.5,
    id_prefix: str = "enron",
) -> list[SecretCandidate]:
    """Appendix B.6 mining on the training split: candidates with ids, token length and frequency."""
    if not train_texts:
        raise ValueError("train_texts must be non-empty to mine secrets")
    samples = tokenizer.encode_batch(list(train_texts))
    rows = mine_ngram_sequences(samples, n, top_k, min_overlap, min_count, merge_ratio)
    total = len(train_texts)
    return [
        SecretCandidate(
            id=f"{id_prefix}-{i:03d}",
            token_ids=ids,
            text=tokenizer.decode(ids),
            token_length=len(ids),
            occurrences=c,
            frequency=c / total,
        )
        for i, (ids, c) in enumerate(rows)
    ]
