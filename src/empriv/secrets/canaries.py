"""Audit canaries (Panda, Tang et al., "Privacy Auditing of Large Language Models").

A canary is a prefix followed by a secret, both drawn a priori from a fixed distribution, so
that members and non-members are IID (membership inference cannot exploit a distribution shift).
m audit canaries are drawn; each is included in training independently with probability ½
(the one-run audit of Steinke et al. assumes exactly this), and its label is saved. A further
``n_population`` canaries from the same distribution are never trained on: they are the
population set Z of RMIA.

Secret designs (the token ids never include the end-of-text token):

- ``random``   — tokens uniform over the vocabulary.
- ``unigram``  — uniform over the ``pool_size`` least frequent tokens of the training data.
- ``bigram``   — a chain of ≥ 2 tokens (the pair x, y of Paper A), each uniform over the
  ``pool_size`` least likely next tokens under the training data's bigram model (Jelinek–Mercer
  interpolation with the add-one unigram, λ = 0.9), starting from the prefix's last token. (With
  one token it would be almost the unigram design: after a random prefix token nearly every token
  has bigram count 0, and the least likely are then the rarest.)
- ``model``    — a chain of tokens, each uniform over the ``pool_size`` least likely next tokens
  under the base model (the model before the canaries), given the prefix and the secret so far.
- ``new_token`` — fresh tokens appended to the vocabulary, ``secret_length`` per canary, never
  shared: canary i's secret is ids V + i·L … V + i·L + L − 1 (V = the base vocabulary). Their
  embedding rows start at zero (:func:`extend_vocabulary`); the output layer is tied, so their
  logits start at 0 in every context.

Prefixes: ``random`` (``prefix_length`` uniform tokens, unique per canary; the default for
auditing) or ``test`` (windows of ``prefix_length`` tokens from the test split, unique).

Loss: ``sft`` trains (and scores) the secret tokens only; ``nwp`` the whole sequence.

Canaries are secrets: their token ids stay in the directory the ``canaries`` stage saves them to (a
DVC output), never in metrics, logs or W&B — only counts and ids such as ``c0007``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger("empriv.secrets")

DESIGNS = ("random", "unigram", "bigram", "model", "new_token")
PREFIXES = ("random", "test")
LOSSES = ("sft", "nwp")
CANARIES_FILE = "canaries.jsonl"
# How audit canaries become members: each independently with probability 1/2 (the one-run audit of
# Steinke et al. assumes independent coin flips). m = n_canaries is fixed by the settings; only the
# number of members is random (recorded as n_members).
MEMBERSHIP = "independent Bernoulli(1/2)"
META_FILE = "meta.json"
BIGRAM_LAMBDA = 0.9


@dataclass(frozen=True)
class Canary:
    id: str
    prefix: tuple[int, ...]
    secret: tuple[int, ...]
    member: bool | None  # None: population canary (never trained on)

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.prefix + self.secret

    def to_row(self) -> dict:
        return {"id": self.id, "prefix": list(self.prefix), "secret": list(self.secret), "member": self.member}

    @classmethod
    def from_row(cls, row: dict) -> "Canary":
        return cls(row["id"], tuple(row["prefix"]), tuple(row["secret"]), row["member"])


@dataclass
class CanarySet:
    """Audit canaries (``member`` True/False) and population canaries (``member`` None)."""

    canaries: list[Canary]
    design: str
    prefix: str
    loss: str
    base_vocab_size: int
    n_new_tokens: int = 0
    seed: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def audit(self) -> list[Canary]:
        return [c for c in self.canaries if c.member is not None]

    @property
    def members(self) -> list[Canary]:
        return [c for c in self.canaries if c.member]

    @property
    def population(self) -> list[Canary]:
        return [c for c in self.canaries if c.member is None]

    @property
    def vocab_size(self) -> int:
        """Vocabulary a model needs to read every canary (base + new tokens)."""
        return self.base_vocab_size + self.n_new_tokens

    def meta(self) -> dict:
        return {
            "design": self.design, "prefix": self.prefix, "loss": self.loss,
            "base_vocab_size": self.base_vocab_size, "n_new_tokens": self.n_new_tokens, "seed": self.seed,
            "n_canaries": len(self.audit), "n_members": len(self.members), "n_population": len(self.population),
            **self.extra,
        }

    def public_summary(self) -> dict:
        """What may leave the machine: counts and lengths, never token ids."""
        audit = self.audit
        return {
            **self.meta(),
            "member_fraction": len(self.members) / max(1, len(audit)),
            "prefix_length_mean": float(np.mean([len(c.prefix) for c in self.canaries])) if self.canaries else 0.0,
            "secret_length_mean": float(np.mean([len(c.secret) for c in self.canaries])) if self.canaries else 0.0,
            "distinct_secrets": len({c.secret for c in audit}),
        }

    def save(self, directory: str | Path) -> None:
        from empriv.io import write_json, write_jsonl

        directory = Path(directory)
        write_jsonl(directory / CANARIES_FILE, [c.to_row() for c in self.canaries])
        write_json(directory / META_FILE, self.meta())

    @classmethod
    def load(cls, directory: str | Path) -> "CanarySet":
        from empriv.io import read_jsonl

        directory = Path(directory)
        path = directory / CANARIES_FILE
        if not path.exists():
            raise FileNotFoundError(f"{path} (run the canaries stage first: dvc repro canaries)")
        meta = json.loads((directory / META_FILE).read_text())
        known = {"design", "prefix", "loss", "base_vocab_size", "n_new_tokens", "seed"}
        derived = {"n_canaries", "n_members", "n_population"}
        return cls(
            [Canary.from_row(r) for r in read_jsonl(path)],
            design=meta["design"], prefix=meta["prefix"], loss=meta["loss"],
            base_vocab_size=meta["base_vocab_size"], n_new_tokens=meta["n_new_tokens"], seed=meta["seed"],
            extra={k: v for k, v in meta.items() if k not in known | derived},
        )


# ----------------------------------------------------------------------------- validation
def validate_settings(*, design: str, prefix: str, loss: str, n_canaries: int, n_population: int,
                      prefix_length: int, secret_length: int, pool_size: int, seq_len: int | None = None) -> None:
    """Raise ValueError naming the field, the value and what is allowed."""
    if design not in DESIGNS:
        raise ValueError(f"canaries.design must be one of {', '.join(DESIGNS)}, got {design!r}")
    if prefix not in PREFIXES:
        raise ValueError(f"canaries.prefix must be one of {', '.join(PREFIXES)}, got {prefix!r}")
    if loss not in LOSSES:
        raise ValueError(f"canaries.loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    if n_canaries < 2:
        raise ValueError(f"canaries.n_canaries must be >= 2, got {n_canaries}")
    if n_population < 0:
        raise ValueError(f"canaries.n_population must be >= 0, got {n_population}")
    if prefix_length < 1:
        raise ValueError(f"canaries.prefix_length must be >= 1, got {prefix_length}")
    if not 1 <= secret_length <= 8:
        raise ValueError(f"canaries.secret_length must be in [1, 8], got {secret_length}")
    if pool_size < 1:
        raise ValueError(f"canaries.pool_size must be >= 1, got {pool_size}")
    if design == "bigram" and secret_length < 2:
        raise ValueError(f"canaries.secret_length must be >= 2 for design 'bigram' (its secret is a token pair x, y), "
                         f"got {secret_length}")
    if seq_len is not None and 1 + prefix_length + secret_length > seq_len:
        raise ValueError(
            f"a canary ([EOS] + prefix_length {prefix_length} + secret_length {secret_length} tokens) "
            f"must fit base.seq_len = {seq_len}"
        )


# ----------------------------------------------------------------------------- building blocks
def _candidate_ids(vocab_size: int, exclude: Sequence[int]) -> np.ndarray:
    ex = set(int(x) for x in exclude)
    return np.array([t for t in range(vocab_size) if t not in ex], dtype=np.int64)


def random_prefixes(n: int, length: int, vocab_size: int, exclude: Sequence[int], rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n`` distinct prefixes of ``length`` uniform tokens."""
    cand = _candidate_ids(vocab_size, exclude)
    if len(cand) ** length < 2 * n:
        raise ValueError(f"canaries.prefix_length {length} is too short for {n} distinct prefixes over {len(cand)} tokens")
    seen: set[tuple[int, ...]] = set()
    out: list[tuple[int, ...]] = []
    while len(out) < n:
        p = tuple(int(x) for x in rng.choice(cand, size=length))
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def test_prefixes(n: int, length: int, token_lists: Sequence[Sequence[int]], rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n`` distinct windows of ``length`` tokens from held-out samples (round-robin over samples,
    random start), as Paper A's test-set prefixes."""
    usable = [list(t) for t in token_lists if len(t) >= length]
    if not usable:
        raise ValueError(f"no test sample has canaries.prefix_length = {length} tokens")
    capacity = sum(len(t) - length + 1 for t in usable)
    if capacity < n:
        raise ValueError(f"the test split has only {capacity} windows of {length} tokens, fewer than the {n} canaries needed")
    seen: set[tuple[int, ...]] = set()
    out: list[tuple[int, ...]] = []
    order = rng.permutation(len(usable))
    attempts = 0
    while len(out) < n:
        toks = usable[order[attempts % len(usable)]]
        attempts += 1
        start = int(rng.integers(0, len(toks) - length + 1))
        p = tuple(toks[start : start + length])
        if p not in seen:
            seen.add(p)
            out.append(p)
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not find {n} distinct test windows of {length} tokens")
    return out


def unigram_counts(token_lists: Sequence[Sequence[int]], vocab_size: int) -> np.ndarray:
    counts = np.zeros(vocab_size, dtype=np.int64)
    for toks in token_lists:
        if toks:
            np.add.at(counts, np.asarray(toks, dtype=np.int64), 1)
    return counts


def rarest_tokens(counts: np.ndarray, pool_size: int, exclude: Sequence[int]) -> np.ndarray:
    """The ``pool_size`` least frequent token ids (ties by id), special tokens excluded."""
    cand = _candidate_ids(len(counts), exclude)
    order = np.lexsort((cand, counts[cand]))
    return cand[order[:pool_size]]


class BigramModel:
    """p(y | x) = λ·c(x, y)/c(x) + (1 − λ)·p_add-one(y), from the training token sequences
    (each sequence preceded by ``eos_id``, as the model sees it)."""

    def __init__(self, token_lists: Sequence[Sequence[int]], vocab_size: int, eos_id: int, lam: float = BIGRAM_LAMBDA):
        self.vocab_size = vocab_size
        self.lam = lam
        uni = unigram_counts(token_lists, vocab_size).astype(np.float64)
        self.unigram = (uni + 1.0) / (uni.sum() + vocab_size)
        self.pairs: dict[int, dict[int, int]] = {}
        for toks in token_lists:
            prev = eos_id
            for t in toks:
                row = self.pairs.setdefault(int(prev), {})
                row[int(t)] = row.get(int(t), 0) + 1
                prev = t

    def next_probs(self, x: int) -> np.ndarray:
        p = (1 - self.lam) * self.unigram.copy()
        row = self.pairs.get(int(x))
        if row:
            total = sum(row.values())
            ids = np.fromiter(row.keys(), dtype=np.int64)
            p[ids] += self.lam * np.fromiter(row.values(), dtype=np.float64) / total
        else:
            p = self.unigram.copy()
        return p


def _bottom_pool(scores: np.ndarray, pool_size: int, exclude: Sequence[int]) -> np.ndarray:
    """Ids of the ``pool_size`` lowest ``scores`` (ties by id), ``exclude`` left out."""
    s = scores.astype(np.float64).copy()
    s[np.asarray(list(exclude), dtype=np.int64)] = np.inf
    ids = np.arange(len(s))
    order = np.lexsort((ids, s))
    return order[:pool_size]


def bigram_secrets(prefixes: Sequence[Sequence[int]], length: int, bigram: BigramModel, pool_size: int,
                   exclude: Sequence[int], rng: np.random.Generator) -> list[tuple[int, ...]]:
    out = []
    cache: dict[int, np.ndarray] = {}
    for prefix in prefixes:
        prev = int(prefix[-1])
        secret = []
        for _ in range(length):
            if prev not in cache:
                cache[prev] = _bottom_pool(bigram.next_probs(prev), pool_size, exclude)
            tok = int(rng.choice(cache[prev]))
            secret.append(tok)
            prev = tok
        out.append(tuple(secret))
    return out


def model_secrets(model, prefixes: Sequence[Sequence[int]], length: int, pool_size: int, exclude: Sequence[int],
                  rng: np.random.Generator, eos_id: int, batch_size: int = 256) -> list[tuple[int, ...]]:
    """Each secret token uniform over the ``pool_size`` least likely next tokens under ``model``
    (the base model, before any canary) given ``[EOS] + prefix + secret so far``."""
    import torch

    from empriv.models.lm import model_device

    seqs = [[eos_id, *p] for p in prefixes]
    secrets: list[list[int]] = [[] for _ in prefixes]
    device = model_device(model)
    exclude_t = torch.tensor(list(exclude), dtype=torch.long)
    model.eval()
    with torch.no_grad():
        for _ in range(length):
            for start in range(0, len(seqs), batch_size):
                chunk = seqs[start : start + batch_size]
                width = len(chunk[0])  # all prefixes have the same length at every step
                ids = torch.tensor(chunk, dtype=torch.long, device=device).view(len(chunk), width)
                pos = torch.arange(width, device=device).unsqueeze(0).expand_as(ids)
                logp = model(input_ids=ids, position_ids=pos, use_cache=False).logits[:, -1].float().log_softmax(-1).cpu()
                logp[:, exclude_t] = math.inf
                pools = torch.topk(logp, k=min(pool_size, logp.shape[1]), largest=False, dim=-1).indices.numpy()
                for j, pool in enumerate(pools):
                    tok = int(rng.choice(pool))
                    secrets[start + j].append(tok)
                    seqs[start + j].append(tok)
    return [tuple(s) for s in secrets]


def extend_vocabulary(model, n_new: int) -> int:
    """Append ``n_new`` token rows to the (tied) embedding, initialised to zero; returns the new
    vocabulary size. A no-op for ``n_new`` = 0."""
    import torch

    old = model.get_input_embeddings().weight.shape[0]
    if n_new <= 0:
        return old
    model.resize_token_embeddings(old + n_new, mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[old:].zero_()
        out = model.get_output_embeddings()
        if out is not None and out.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
            out.weight[old:].zero_()
            if getattr(out, "bias", None) is not None:
                out.bias[old:].zero_()
    return old + n_new


# ----------------------------------------------------------------------------- the generator
def generate_canaries(
    *,
    design: str,
    n_canaries: int,
    vocab_size: int,
    eos_id: int,
    seed: int,
    prefix: str = "random",
    prefix_length: int = 16,
    secret_length: int = 1,
    loss: str = "sft",
    n_population: int = 0,
    pool_size: int = 256,
    train_token_lists: Sequence[Sequence[int]] | None = None,
    test_token_lists: Sequence[Sequence[int]] | None = None,
    base_model=None,
    seq_len: int | None = None,
) -> CanarySet:
    """Draw ``n_canaries`` audit canaries (membership Bernoulli(½), seeded) and ``n_population``
    population canaries, IID from one design."""
    validate_settings(design=design, prefix=prefix, loss=loss, n_canaries=n_canaries, n_population=n_population,
                      prefix_length=prefix_length, secret_length=secret_length, pool_size=pool_size, seq_len=seq_len)
    rng = np.random.default_rng(seed)
    total = n_canaries + n_population
    exclude = [eos_id]
    if prefix == "random":
        prefixes = random_prefixes(total, prefix_length, vocab_size, exclude, rng)
    else:
        if test_token_lists is None:
            raise ValueError("canaries.prefix 'test' needs the test split's token lists")
        prefixes = test_prefixes(total, prefix_length, test_token_lists, rng)

    extra: dict = {"prefix_length": prefix_length, "secret_length": secret_length}
    n_new = 0
    if design == "random":
        cand = _candidate_ids(vocab_size, exclude)
        secrets = [tuple(int(x) for x in rng.choice(cand, size=secret_length)) for _ in range(total)]
    elif design == "unigram":
        if train_token_lists is None:
            raise ValueError("canaries.design 'unigram' needs the training split's token lists")
        pool = rarest_tokens(unigram_counts(train_token_lists, vocab_size), pool_size, exclude)
        secrets = [tuple(int(x) for x in rng.choice(pool, size=secret_length)) for _ in range(total)]
        extra["pool_size"] = int(len(pool))
    elif design == "bigram":
        if train_token_lists is None:
            raise ValueError("canaries.design 'bigram' needs the training split's token lists")
        bigram = BigramModel(train_token_lists, vocab_size, eos_id)
        secrets = bigram_secrets(prefixes, secret_length, bigram, pool_size, exclude, rng)
        extra["pool_size"] = pool_size
    elif design == "model":
        if base_model is None:
            raise ValueError("canaries.design 'model' needs the base model")
        secrets = model_secrets(base_model, prefixes, secret_length, pool_size, exclude, rng, eos_id)
        extra["pool_size"] = pool_size
    else:  # new_token
        n_new = total * secret_length
        secrets = [tuple(range(vocab_size + i * secret_length, vocab_size + (i + 1) * secret_length)) for i in range(total)]

    extra["membership"] = MEMBERSHIP
    members = rng.random(n_canaries) < 0.5
    canaries = [Canary(f"c{i:05d}", prefixes[i], secrets[i], bool(members[i])) for i in range(n_canaries)]
    canaries += [Canary(f"p{j:05d}", prefixes[n_canaries + j], secrets[n_canaries + j], None) for j in range(n_population)]
    return CanarySet(canaries, design, prefix, loss, vocab_size, n_new, seed, extra)


# ----------------------------------------------------------------------------- encoding
def encode_canaries(canaries: Sequence[Canary], eos_id: int, seq_len: int, loss: str):
    """``[EOS] + prefix + secret`` padded to ``seq_len`` → (ids [N, L], loss mask [N, L]).

    The mask marks the tokens that carry loss: the secret only (``sft``) or every real token
    (``nwp``). These are the records added to training and the tokens scored by the audit.
    """
    import torch

    if loss not in LOSSES:
        raise ValueError(f"canaries.loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    ids = torch.full((len(canaries), seq_len), eos_id, dtype=torch.long)
    mask = torch.zeros((len(canaries), seq_len), dtype=torch.float32)
    for i, c in enumerate(canaries):
        seq = [eos_id, *c.prefix, *c.secret]
        if len(seq) > seq_len:
            raise ValueError(f"canary {c.id} has {len(seq)} tokens, more than base.seq_len = {seq_len}")
        ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        start = 1 + len(c.prefix) if loss == "sft" else 1
        mask[i, start : len(seq)] = 1.0
    return ids, mask


# ----------------------------------------------------------------------------- from the params section
def _generate_from_params(cp, vocab, eos_id, train_lists, test_lists, base, seq_len) -> CanarySet:
    """:func:`generate_canaries` with the settings of the ``canaries`` params section ``cp``."""
    return generate_canaries(
        design=cp.design, n_canaries=cp.n_canaries, vocab_size=vocab, eos_id=eos_id, seed=cp.seed,
        prefix=cp.prefix, prefix_length=cp.prefix_length, secret_length=cp.secret_length, loss=cp.loss,
        n_population=cp.n_population, pool_size=cp.pool_size, train_token_lists=train_lists,
        test_token_lists=test_lists, base_model=base, seq_len=seq_len,
    )


def checkable_sequences(canary_set: CanarySet, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """id → token sequence (prefix + secret) of every canary that text of the corpus could contain: all its
    tokens are in the tokenizer's vocabulary (a new-token canary can occur nowhere but in training)."""
    return {c.id: c.tokens for c in canary_set.canaries if all(t < vocab_size for t in c.tokens)}
