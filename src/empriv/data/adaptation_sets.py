"""The data of the adaptation-audit study (Paper B, "auditing private adaptations"), from the built-in
generators only: no download, fully determined by (sizes, seed) and the caller's public split.

Two adaptation datasets, each split four ways for membership inference:

- ``iid``: texts of the family the base was pre-trained on — the public split of synthetic-enron,
  i.e. :func:`empriv.data.synthetic.generate_public` (general English of other genres, secret-free)
  drawn with a *fresh* seed derived from ``seed``, so that none of them is a pre-training text (and
  any text that happens to equal one of the caller's public texts is dropped and replaced). This is
  Paper B's "IID, no overlap" case (BookCorpus2 Val, Enron Val: the Pile's family, unseen texts).
- ``ood``: synthetic-tofu question/answer records (:func:`empriv.data.synthetic_tofu.generate_synthetic_tofu`,
  rendered as the TOFU training text ``"Question: …\\nAnswer: …"``). They differ from the pre-training
  texts in structure (a rigid two-line Q/A layout, the same few dozen templates), in vocabulary
  (foreign author names, book titles, awards, genres) and in what there is to learn (facts about one
  person), which stands in for Paper B's SAMSum / GermanWiki. Sets are split *by author*, and by
  default each author contributes one record (``ood_records_per_author``): records of one author share
  the name and facts, so with several per author a record's membership is correlated with its
  co-authors' and a record-level DP guarantee no longer bounds what the attack sees (group privacy).

Each dataset gives a :class:`MiaSplit`: ``members`` (the adaptation's training set), ``nonmembers``
(unseen texts of the same dataset, the MIA's negatives), ``shadow`` (the training set of the shadow
adaptation, RMIA's reference model) and ``population`` (RMIA's population Z). The *pre-training
probe* (:class:`PretrainingProbe`) holds ``members`` — a sample of the caller's public split, what
the base was pre-trained on — and ``nonmembers`` — fresh public-like texts from the same generator.

Every text occurs in exactly one set (members, non-members, shadow, population of both datasets and
the probe's two sets), and no text outside the probe's members occurs in the public split; this is
true by construction and :func:`check_disjoint` checks it again before the sets are returned.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from empriv.checks import bad_input, require_int

DATASETS = ("iid", "ood")
#: which generator each dataset draws from
SOURCES = {"iid": "synthetic-public", "ood": "synthetic-tofu"}
ROLES = ("members", "nonmembers", "shadow", "population")
#: a generated stream is drawn this many times over (then more) so that dropped duplicates are replaced
_MAX_ROUNDS = 6


@dataclass(frozen=True)
class MiaSplit:
    """One adaptation dataset split for membership inference (texts)."""

    dataset: str
    source: str
    members: tuple[str, ...]
    nonmembers: tuple[str, ...]
    shadow: tuple[str, ...]
    population: tuple[str, ...]

    def counts(self) -> dict[str, int]:
        return {role: len(getattr(self, role)) for role in ROLES}


@dataclass(frozen=True)
class PretrainingProbe:
    """Pre-training membership: ``members`` from the base's pre-training texts, ``nonmembers`` unseen."""

    members: tuple[str, ...]
    nonmembers: tuple[str, ...]

    def counts(self) -> dict[str, int]:
        return {"members": len(self.members), "nonmembers": len(self.nonmembers)}


@dataclass(frozen=True)
class AdaptationSets:
    iid: MiaSplit
    ood: MiaSplit
    pretraining: PretrainingProbe
    seed: int
    ood_records_per_author: int

    def split(self, dataset: str) -> MiaSplit:
        if dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
        return getattr(self, dataset)

    def named_sets(self) -> dict[str, tuple[str, ...]]:
        """``"<dataset>/<role>"`` and ``"pretraining/<role>"`` → texts (what :func:`check_disjoint` checks)."""
        out = {f"{d}/{role}": getattr(self.split(d), role) for d in DATASETS for role in ROLES}
        out["pretraining/members"] = self.pretraining.members
        out["pretraining/nonmembers"] = self.pretraining.nonmembers
        return out

    def counts(self) -> dict:
        """Sizes and sources (numbers and names only: safe to write into metrics)."""
        return {
            "seed": self.seed,
            "iid": {"source": self.iid.source, **self.iid.counts()},
            "ood": {"source": self.ood.source, "records_per_author": self.ood_records_per_author,
                    **self.ood.counts()},
            "pretraining": self.pretraining.counts(),
        }


# ----------------------------------------------------------------------------- validation and checks


def check_disjoint(named_sets: Mapping[str, Sequence[str]], public_texts: Sequence[str] = (),
                   allowed_public: Sequence[str] = ()) -> None:
    """Raise a one-line ``ValueError`` if a text occurs twice within or across the named sets, or if
    a text of a set not named in ``allowed_public`` occurs in ``public_texts``. Names only counts
    and set names, never a text."""
    owner: dict[str, str] = {}
    for name, texts in named_sets.items():
        for text in texts:
            other = owner.get(text)
            if other is not None:
                where = f"twice in {name}" if other == name else f"in both {other} and {name}"
                raise ValueError(f"adaptation sets are not disjoint: a text occurs {where}")
            owner[text] = name
    public = set(public_texts)
    for name, texts in named_sets.items():
        if name in allowed_public:
            continue
        n = sum(1 for t in texts if t in public)
        if n:
            raise ValueError(f"adaptation sets overlap the public (pre-training) split: {n} text(s) of {name}")


def derived_seed(seed: int, purpose: str) -> int:
    """A seed for one generated stream of the study, from (``seed``, ``purpose``): far from the small
    integers a data seed usually is, so no stream repeats the public split's own stream."""
    digest = hashlib.sha256(f"empriv-adaptation-sets/{purpose}/{seed}".encode()).hexdigest()
    return int(digest[:15], 16)


# ----------------------------------------------------------------------------- generators


def fresh_public_texts(n: int, seed: int, exclude: Sequence[str] = (), forbidden: Sequence[str] = ()) -> list[str]:
    """``n`` distinct texts of the public generator under a seed derived from ``seed``, none in ``exclude``
    and none containing a ``forbidden`` string (generated again instead). Deterministic: the
    generator's stream is read from its start, longer each round, until ``n`` texts survive."""
    from empriv.data.synthetic import generate_public

    n = require_int("n", n, 1)
    excluded = set(exclude)
    stream = derived_seed(seed, "public-like")
    want = n + max(16, n // 10)
    for _ in range(_MAX_ROUNDS):
        out: list[str] = []
        seen: set[str] = set()
        for email in generate_public(want, stream, tuple(forbidden)):
            if email.text not in excluded and email.text not in seen:
                seen.add(email.text)
                out.append(email.text)
                if len(out) == n:
                    return out
        want *= 2
    raise ValueError(f"the public generator gave only {len(out)} distinct new texts of {n} wanted "
                     f"(from {want // 2} draws); lower the set sizes")


def _check_tofu_capacity(n_authors: int) -> None:
    from empriv.data.synthetic_tofu import FIRST_NAMES, LAST_NAMES

    capacity = len(FIRST_NAMES) * len(LAST_NAMES)
    if n_authors > capacity:
        raise ValueError(f"the ood sets need {n_authors} synthetic-tofu authors but the generator has "
                         f"{capacity} distinct names; lower the set sizes or raise ood_records_per_author")


def tofu_texts_by_author(n_authors: int, seed: int, records_per_author: int) -> list[list[str]]:
    """``n_authors`` synthetic-tofu authors (a seed derived from ``seed``), the first
    ``records_per_author`` of each author's (shuffled) 20 records as training texts."""
    from empriv.data.synthetic_tofu import generate_synthetic_tofu
    from empriv.data.tofu import training_text

    _check_tofu_capacity(n_authors)
    tofu = generate_synthetic_tofu(n_authors, derived_seed(seed, "tofu"))
    return [[training_text(r.question, r.answer) for r in tofu.author_records(i)[:records_per_author]]
            for i in range(n_authors)]


def _take_authors(blocks: list[list[str]], sizes: Sequence[int]) -> list[tuple[str, ...]]:
    """Consecutive whole authors for each size (the last author of a set cut to fit; its other
    records go nowhere), so no author has records in two sets."""
    out, k = [], 0
    for size in sizes:
        texts: list[str] = []
        while len(texts) < size:
            texts.extend(blocks[k][: size - len(texts)])
            k += 1
        out.append(tuple(texts))
    return out


# ----------------------------------------------------------------------------- the study's sets


def build_adaptation_sets(public_texts: Sequence[str], *, n_members: int, n_nonmembers: int, n_shadow: int,
                          n_population: int, n_probe_members: int, n_probe_nonmembers: int, seed: int,
                          ood_records_per_author: int = 1, forbidden: Sequence[str] = ()) -> AdaptationSets:
    """The iid and ood :class:`MiaSplit` (each of the four sizes, same for both datasets) and the
    pre-training probe, disjoint and checked (see the module docstring).

    ``public_texts``: the base's pre-training texts (the public split); the probe's members are a
    seeded sample of its distinct texts. ``forbidden``: strings no generated public-like text may
    contain (e.g. the corpus' secret values, :func:`empriv.data.synthetic.secret_values`).
    ``ood_records_per_author``: records taken from each synthetic-tofu author (1–20).
    """
    sizes = {name: require_int(name, value, 1) for name, value in (
        ("n_members", n_members), ("n_nonmembers", n_nonmembers), ("n_shadow", n_shadow),
        ("n_population", n_population), ("n_probe_members", n_probe_members),
        ("n_probe_nonmembers", n_probe_nonmembers))}
    require_int("seed", seed)
    per_author = require_int("ood_records_per_author", ood_records_per_author, 1, 20,
                             meaning="a synthetic-tofu author has 20 records")
    public = list(dict.fromkeys(public_texts))  # distinct, in order
    if sizes["n_probe_members"] > len(public):
        raise bad_input("n_probe_members", "more than the distinct public texts", sizes["n_probe_members"],
                        f"an integer in [1, {len(public)}]")
    role_sizes = [sizes["n_members"], sizes["n_nonmembers"], sizes["n_shadow"], sizes["n_population"]]
    n_authors = sum(math.ceil(s / per_author) for s in role_sizes)
    _check_tofu_capacity(n_authors)

    # iid sets and the probe's non-members: one stream of fresh public-like texts, sliced in order
    fresh = fresh_public_texts(sum(role_sizes) + sizes["n_probe_nonmembers"], seed, exclude=public,
                               forbidden=forbidden)
    iid_parts, k = [], 0
    for size in role_sizes:
        iid_parts.append(tuple(fresh[k : k + size]))
        k += size
    probe_nonmembers = tuple(fresh[k:])

    blocks = tofu_texts_by_author(n_authors, seed, per_author)
    ood_parts = _take_authors(blocks, role_sizes)

    rng = random.Random(derived_seed(seed, "probe-members"))
    probe_members = tuple(public[i] for i in sorted(rng.sample(range(len(public)), sizes["n_probe_members"])))

    sets = AdaptationSets(
        iid=MiaSplit("iid", SOURCES["iid"], *iid_parts),
        ood=MiaSplit("ood", SOURCES["ood"], *ood_parts),
        pretraining=PretrainingProbe(probe_members, probe_nonmembers),
        seed=int(seed),
        ood_records_per_author=per_author,
    )
    check_disjoint(sets.named_sets(), public, allowed_public=("pretraining/members",))
    return sets
