"""User-level one-run audit: canaries planted per privacy unit, membership per unit, ε̂ over units.

The record-level audit (:mod:`empriv.audit.canary_audit`) flips one coin per canary record. A
user-level guarantee (User-wise DP-SGD over units, or Group Privacy with ≤ k records per unit)
protects a whole unit, so its audit flips one coin per unit:

- **Canary units.** m canary units, each owning ``records_per_unit`` = k ≥ 1 canary records. All k
  records of a unit carry the *same secret* (the unit's, drawn once by
  :func:`empriv.secrets.canaries.generate_canaries` with any of its designs), each after its own
  random prefix (distinct over all records): a user who writes the same secret in k documents.
  Record 0 keeps the prefix the secret was drawn for (the ``bigram`` and ``model`` designs condition
  the secret on it); records 1..k−1 get fresh uniform prefixes from a separate stream of the seed.
  Record ids are ``u00007-r2`` (unit 7, record 2); unit ids ``u00007``. Token ids stay local, as for
  every canary (:meth:`UserCanaries.public_summary` holds counts only).
- **Membership per unit.** Each unit is a member independently with probability ½ (seeded by
  ``seed``, deterministic), and all k of its records share that label: a member unit has all its
  records trained on, a non-member none. This is the randomisation Steinke, Nasr & Jagielski's
  one-run bound assumes, now with the unit as the thing included or excluded.
- **Training records** (:func:`add_member_canary_units`): the member units' records join the corpus
  with unit ids that follow the corpus units' (max corpus id + 1, + 2, …), so User-wise DP-SGD
  clips a canary unit's k records together as one gradient, and a Group Privacy run (record-level
  DP-SGD whose units were bounded to k records) sees each canary unit with ≤ k records
  (``max_records_per_unit`` checks it).
- **Unit score** (:func:`aggregate_unit_scores`): an aggregate of its records' scores (higher = more
  likely member). The default, ``mean``, of the record loss score −L is −(mean over the unit's k
  records of the secret's mean NLL). ``median``, ``min`` (the unit's least-convincing record) and
  ``max`` (its most convincing one) are the alternatives; choose before looking at results.
- **Bound** (:func:`user_level_audit`): the pre-registered top-r guesses over the m unit scores and
  :func:`empriv.audit.epsilon.top_r_audit` with m = number of canary units, r guesses, v correct.
  The binomial bound itself lives in :mod:`empriv.audit.epsilon` only.

Every unit must have exactly k records: the audit's design is k records per unit, and the bound is
reported for that k.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from empriv.audit import epsilon as eps_mod
from empriv.checks import require_int
from empriv.secrets.canaries import Canary, CanarySet, _candidate_ids, encode_canaries, generate_canaries

AGGREGATES = ("mean", "median", "min", "max")
MEMBERSHIP = "per unit: independent Bernoulli(1/2), all records of a unit share it"
_PREFIX_STREAM = 0x75736572  # "user": the stream of the extra prefixes, apart from generate_canaries' own


def unit_id(index: int) -> str:
    return f"u{index:05d}"


def record_id(unit_index: int, record: int) -> str:
    return f"{unit_id(unit_index)}-r{record}"


# ----------------------------------------------------------------------------- canary units
@dataclass(frozen=True)
class UserCanaries:
    """m canary units × k records, flattened unit by unit in ``canary_set.canaries``: the records of
    unit i are ``canaries[i·k : (i+1)·k]``, each with its unit's membership as ``member``."""

    canary_set: CanarySet
    records_per_unit: int

    def __post_init__(self):
        k = require_int("records_per_unit", self.records_per_unit, 1)
        records = self.canary_set.canaries
        if any(c.member is None for c in records):
            raise ValueError("canary_set: user-level canaries have no population records (member None)")
        if len(records) % k:
            raise ValueError(f"canary_set has {len(records)} records, not a multiple of records_per_unit = {k}")
        for i in range(len(records) // k):
            labels = {c.member for c in records[i * k:(i + 1) * k]}
            if len(labels) != 1:
                raise ValueError(f"canary_set: unit {unit_id(i)} mixes member and non-member records; "
                                 "membership must be per unit")

    @property
    def n_units(self) -> int:
        return len(self.canary_set.canaries) // self.records_per_unit

    @property
    def records(self) -> list[Canary]:
        return list(self.canary_set.canaries)

    @property
    def unit_ids(self) -> list[str]:
        return [unit_id(i) for i in range(self.n_units)]

    @property
    def record_units(self) -> list[str]:
        """The unit id of every record (in record order)."""
        return [unit_id(i // self.records_per_unit) for i in range(len(self.canary_set.canaries))]

    @property
    def unit_labels(self) -> np.ndarray:
        """Membership of every unit: bool [m]."""
        k = self.records_per_unit
        return np.array([bool(self.canary_set.canaries[i * k].member) for i in range(self.n_units)])

    def unit_records(self, index: int) -> list[Canary]:
        k = self.records_per_unit
        return list(self.canary_set.canaries[index * k:(index + 1) * k])

    @property
    def member_units(self) -> list[int]:
        return [i for i, m in enumerate(self.unit_labels) if m]

    def public_summary(self) -> dict:
        """Counts only (no token ids): what may leave the machine."""
        labels = self.unit_labels
        return {
            "design": self.canary_set.design, "loss": self.canary_set.loss, "membership": MEMBERSHIP,
            "n_units": self.n_units, "n_member_units": int(labels.sum()), "records_per_unit": self.records_per_unit,
            "n_records": len(self.canary_set.canaries), "n_new_tokens": self.canary_set.n_new_tokens,
            "member_fraction": float(labels.mean()) if len(labels) else 0.0,
        }

    def save(self, directory: str | Path) -> None:
        self.canary_set.save(directory)

    @classmethod
    def load(cls, directory: str | Path) -> "UserCanaries":
        cs = CanarySet.load(directory)
        if "records_per_unit" not in cs.extra:
            raise ValueError(f"{directory} holds record-level canaries (no records_per_unit in its meta.json)")
        return cls(cs, int(cs.extra["records_per_unit"]))


def generate_user_canaries(*, design: str, n_units: int, records_per_unit: int, vocab_size: int, eos_id: int, seed: int,
                           prefix_length: int = 16, secret_length: int = 1, loss: str = "sft", pool_size: int = 256,
                           train_token_lists: Sequence[Sequence[int]] | None = None, base_model=None,
                           seq_len: int | None = None) -> UserCanaries:
    """Draw ``n_units`` canary units of ``records_per_unit`` records each (module docstring): one secret
    and one Bernoulli(½) membership per unit (from :func:`generate_canaries` with ``seed``), k random
    prefixes per unit, distinct over all records."""
    m = n_units
    require_int("n_units", m, 2, meaning="m, canary units")
    k = require_int("records_per_unit", records_per_unit, 1)
    units = generate_canaries(design=design, n_canaries=int(m), vocab_size=vocab_size, eos_id=eos_id, seed=seed,
                              prefix="random", prefix_length=prefix_length, secret_length=secret_length, loss=loss,
                              n_population=0, pool_size=pool_size, train_token_lists=train_token_lists,
                              base_model=base_model, seq_len=seq_len)
    cand = _candidate_ids(vocab_size, [eos_id])
    if len(cand) ** prefix_length < 2 * m * k:
        raise ValueError(f"prefix_length {prefix_length} is too short for {m * k} distinct prefixes "
                         f"(n_units {m} × records_per_unit {k}) over {len(cand)} tokens")
    rng = np.random.default_rng([int(seed), _PREFIX_STREAM])
    seen = {c.prefix for c in units.canaries}
    records: list[Canary] = []
    for i, c in enumerate(units.canaries):
        records.append(Canary(record_id(i, 0), c.prefix, c.secret, c.member))
        for j in range(1, k):
            while True:
                p = tuple(int(x) for x in rng.choice(cand, size=prefix_length))
                if p not in seen:
                    break
            seen.add(p)
            records.append(Canary(record_id(i, j), p, c.secret, c.member))
    extra = {**units.extra, "records_per_unit": k, "membership": MEMBERSHIP, "n_units": int(m)}
    cs = CanarySet(records, units.design, units.prefix, units.loss, units.base_vocab_size, units.n_new_tokens,
                   units.seed, extra)
    return UserCanaries(cs, k)


# ----------------------------------------------------------------------------- training records
@dataclass(frozen=True)
class UnitRecords:
    """Corpus + member canary records for a user-level run: ``unit_ids[j]`` is record j's training unit.

    ``canary_units`` maps every member canary unit id (``u00007``) to its training unit id; units are
    0..``n_units``−1 when the corpus units were 0..N−1 (as :func:`empriv.train.userwise.fixed_records_per_unit`
    and ``userwise_dp_sgd(n_units=…)`` expect).
    """

    ids: "torch.Tensor"  # noqa: F821
    mask: "torch.Tensor"  # noqa: F821
    unit_ids: "torch.Tensor"  # noqa: F821
    n_units: int
    n_corpus_units: int
    canary_units: dict[str, int]


def add_member_canary_units(ids, mask, unit_ids, canaries: UserCanaries, *, eos_id: int, seq_len: int,
                            max_records_per_unit: int | None = None) -> UnitRecords:
    """Append the member canary units' records (encoded as :func:`encode_canaries` does, with the canary
    set's loss) to the corpus records ``ids``/``mask`` [N, L] of units ``unit_ids`` (integers ≥ 0).

    Canary unit i₊ (the i-th member unit) gets training unit id max(corpus ids) + 1 + i₊, so no canary
    shares a unit with the corpus and a unit's k records are always together. ``max_records_per_unit``
    is the k of a Group Privacy run: the canary units must fit it.
    """
    import torch

    unit_ids = torch.as_tensor(unit_ids)
    if ids.dim() != 2 or tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(f"ids and mask must both be [records, seq_len], got {tuple(ids.shape)} and {tuple(mask.shape)}")
    if unit_ids.dim() != 1 or unit_ids.shape[0] != ids.shape[0]:
        raise ValueError(f"unit_ids must have one entry per record ({ids.shape[0]}), got shape {tuple(unit_ids.shape)}")
    if unit_ids.dtype.is_floating_point or unit_ids.dtype == torch.bool:
        raise ValueError(f"unit_ids must be integers, got dtype {unit_ids.dtype}")
    unit_ids = unit_ids.long()
    if ids.shape[1] != seq_len:
        raise ValueError(f"ids have seq_len {ids.shape[1]} but seq_len = {seq_len} was given")
    if unit_ids.numel() and int(unit_ids.min()) < 0:
        raise ValueError(f"unit_ids must be >= 0, got {int(unit_ids.min())}")
    k = canaries.records_per_unit
    if max_records_per_unit is not None:
        cap = require_int("max_records_per_unit", max_records_per_unit, 1)
        if k > cap:
            raise ValueError(f"records_per_unit = {k} exceeds max_records_per_unit = {cap} (the k of the run): "
                             f"a canary unit must fit the run's records-per-unit bound")
    first = int(unit_ids.max()) + 1 if unit_ids.numel() else 0
    members = canaries.member_units
    records = [c for i in members for c in canaries.unit_records(i)]
    c_ids, c_mask = encode_canaries(records, eos_id, seq_len, canaries.canary_set.loss)
    c_units = torch.arange(first, first + len(members), dtype=torch.long).repeat_interleave(k)
    n_corpus = int(torch.unique(unit_ids).numel())
    return UnitRecords(
        ids=torch.cat([ids, c_ids.to(ids.dtype)]), mask=torch.cat([mask, c_mask.to(mask.dtype)]),
        unit_ids=torch.cat([unit_ids, c_units]), n_units=first + len(members), n_corpus_units=n_corpus,
        canary_units={unit_id(i): first + j for j, i in enumerate(members)},
    )


# ----------------------------------------------------------------------------- scores → units → ε̂
@dataclass(frozen=True)
class UnitScores:
    """One aggregated score per unit (units in order of first appearance) and its record count."""

    units: tuple[Hashable, ...]
    scores: np.ndarray
    counts: np.ndarray
    aggregate: str


def aggregate_unit_scores(record_scores: Sequence[float], record_units: Sequence[Hashable],
                          aggregate: str = "mean") -> UnitScores:
    """Group per-record scores (higher = more likely member) by unit and reduce each group with
    ``aggregate`` (one of :data:`AGGREGATES`)."""
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")
    scores = np.asarray(record_scores, dtype=np.float64)
    if scores.ndim != 1:
        raise ValueError(f"record_scores must be 1-D (one score per record), got shape {scores.shape}")
    if len(record_units) != len(scores):
        raise ValueError(f"record_units has {len(record_units)} entries but record_scores has {len(scores)}: "
                         "one unit per record score is required")
    if np.isnan(scores).any():
        raise ValueError(f"record_scores: score of record {int(np.flatnonzero(np.isnan(scores))[0])} is NaN")
    groups: dict[Hashable, list[int]] = {}
    for j, u in enumerate(record_units):
        groups.setdefault(u.item() if isinstance(u, np.generic) else u, []).append(j)
    reduce = {"mean": np.mean, "median": np.median, "min": np.min, "max": np.max}[aggregate]
    units = tuple(groups)
    return UnitScores(units, np.array([float(reduce(scores[groups[u]])) for u in units]),
                      np.array([len(groups[u]) for u in units]), aggregate)


@dataclass(frozen=True)
class UserLevelAudit:
    """A user-level one-run audit: ε̂ at 95 % and 99 % over m canary units (r guesses, v correct)."""

    eps_lb_95: float
    eps_lb_99: float
    m: int
    r: int
    v: int
    records_per_unit: int
    aggregate: str
    n_members: int
    delta: float
    rule: str

    def metrics(self) -> dict:
        """Flat, numeric-first metrics (keys ``user_audit_*``)."""
        return {
            "user_audit_eps_lb_95": self.eps_lb_95, "user_audit_eps_lb_99": self.eps_lb_99,
            "user_audit_n_units": self.m, "user_audit_n_guesses": self.r, "user_audit_n_correct": self.v,
            "user_audit_records_per_unit": self.records_per_unit, "user_audit_n_member_units": self.n_members,
            "user_audit_delta": self.delta, "user_audit_aggregate": self.aggregate, "user_audit_rule": self.rule,
        }


def user_level_audit(record_scores: Sequence[float], record_units: Sequence[Hashable], record_members: Sequence[bool], *,
                     guesses: int, delta: float, aggregate: str = "mean", side: str = "members",
                     records_per_unit: int | None = None) -> UserLevelAudit:
    """Aggregate record scores per unit, guess on the r best (``side='members'``) or both ends
    (``'both'``) of the m unit scores, and bound ε with :func:`empriv.audit.epsilon.top_r_audit`.

    ``record_members[j]`` is record j's membership; it must be the same for all records of a unit.
    Every unit must have the same number of records — ``records_per_unit`` when given.
    """
    n = len(record_scores)
    if len(record_members) != n:
        raise ValueError(f"record_members has {len(record_members)} entries but record_scores has {n}: "
                         "one membership label per record score is required")
    if records_per_unit is not None:
        require_int("records_per_unit", records_per_unit, 1)
    agg = aggregate_unit_scores(record_scores, record_units, aggregate)
    m = len(agg.units)
    if m < 2:
        raise ValueError(f"record_units must name >= 2 canary units (m), got {m}")
    index = {u: i for i, u in enumerate(agg.units)}
    labels: list[bool | None] = [None] * m
    for u, member in zip(record_units, record_members):
        u = u.item() if isinstance(u, np.generic) else u
        i = index[u]
        if labels[i] is None:
            labels[i] = bool(member)
        elif labels[i] != bool(member):
            raise ValueError(f"record_members: unit {u!r} has member and non-member records; membership must be "
                             "per unit (all or none of a unit's records)")
    counts = set(agg.counts.tolist())
    if len(counts) != 1:
        big = agg.units[int(np.argmax(agg.counts))]
        raise ValueError(f"record_units: units have {min(counts)}..{max(counts)} records (unit {big!r} has "
                         f"{int(agg.counts.max())}); the design requires the same records_per_unit for every unit")
    k = counts.pop()
    if records_per_unit is not None and k != records_per_unit:
        raise ValueError(f"record_units: every unit has {k} records, but records_per_unit = {records_per_unit}")
    require_int("guesses", guesses, 1, m, meaning="r, at most m canary units")
    result = eps_mod.top_r_audit(agg.scores, labels, int(guesses), delta, side, (0.95, 0.99))
    return UserLevelAudit(eps_lb_95=result.epsilon_lb[0.95], eps_lb_99=result.epsilon_lb[0.99], m=m, r=result.r,
                          v=result.v, records_per_unit=int(k), aggregate=aggregate, n_members=int(sum(labels)),
                          delta=delta, rule=f"user-level {result.rule}, unit score = {aggregate} of record scores")


def audit_user_canaries(model, canaries: UserCanaries, *, eos_id: int, seq_len: int, delta: float, guesses: int,
                        aggregate: str = "mean", side: str = "members",
                        batch_size: int = 256) -> tuple[UserLevelAudit, list[dict]]:
    """Score every canary record with the loss score −L (L: mean NLL of the tokens the canary set's loss
    counts, the secret under ``sft``), then :func:`user_level_audit`. Returns the audit and one row per
    unit (id, member, unit score, mean record loss; no tokens)."""
    from empriv.audit.canary_audit import canary_losses
    from empriv.audit.mia import mean_loss

    nll, mask = canary_losses(model, canaries.records, eos_id, seq_len, canaries.canary_set.loss, batch_size)
    losses = mean_loss(nll, mask)
    result = user_level_audit(-losses, canaries.record_units, [c.member for c in canaries.records], guesses=guesses,
                              delta=delta, aggregate=aggregate, side=side, records_per_unit=canaries.records_per_unit)
    agg = aggregate_unit_scores(-losses, canaries.record_units, aggregate)
    k = canaries.records_per_unit
    labels = canaries.unit_labels
    rows = [{"id": u, "member": bool(labels[i]), "score": float(agg.scores[i]),
             "loss_mean": float(losses[i * k:(i + 1) * k].mean())} for i, u in enumerate(agg.units)]
    if any(not math.isfinite(r["score"]) for r in rows):
        raise ValueError("a canary unit's score is not finite (the model returned inf/NaN losses)")
    return result, rows


__all__ = [
    "AGGREGATES",
    "UnitRecords",
    "UnitScores",
    "UserCanaries",
    "UserLevelAudit",
    "add_member_canary_units",
    "aggregate_unit_scores",
    "audit_user_canaries",
    "generate_user_canaries",
    "user_level_audit",
]
