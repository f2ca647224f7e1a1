"""Building the cleaned splits of a corpus (the library half of the ``prepare`` stage).

Every source gives the same :class:`PreparedData`: rows ``{"id", "text"}`` of the ``train``,
``validation``, ``test`` and ``public`` splits, and, where the secrets are known by construction,
the planted secrets; counts for the metrics (never text). The stage module
(:mod:`empriv.pipeline.prepare`) loads raw files, calls these builders, checks for leaks and writes.

- ``synthetic-enron`` (default): the built-in Enron-like generator (:mod:`empriv.data.synthetic`).
- ``enron``: the Kaggle ``emails.csv`` or a CMU maildir (loaded by the stage), cleaned as in the
  research's appendix B.1 (:mod:`empriv.data.enron`); its secrets are mined at the secrets stage.
- ``synthetic-tofu`` / ``tofu``: fictitious-author Q/A records (generated, or the TOFU records the
  stage loaded), split by author (first 90 % train); ``data.variant`` builds a TOFU variant of the
  training authors (paraphrases by the paraphraser the stage passes in).

``data.n_train`` training samples are used (an error names how many exist if there are fewer), and
at most ``n_validation`` / ``n_test``. The *public* split, used only to pre-train the tiny base and
the tokenizer, is always generated and secret-free. For the e-mail sources it is general English of
*other* genres (:func:`empriv.data.synthetic.generate_public`), so that fine-tuning on the Enron-like
or real Enron training split has something to learn; for TOFU, synthetic authors whose names differ
from every author of the data (:func:`empriv.data.synthetic_tofu.generate_synthetic_tofu`'s
``exclude_names``). A real base model (GPU workstations) would not need it.

What the leak check compares (:meth:`PreparedData.private_texts`): the planted secrets' texts
(synthetic-enron) and the training authors' names (TOFU) must occur in no public, validation or test
sample. Real Enron has no secret before mining: the secrets stage checks its mined secrets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from empriv.config import ConfigError

TOFU_TRAIN_FRACTION = 0.9
SPLITS = ("train", "validation", "test", "public")
CHECKED_SPLITS = ("public", "validation", "test")  # where no secret may occur


@dataclass
class PreparedData:
    """The prepared splits of one source, and what the metrics and the secrets stage need of it."""

    source: str
    splits: dict[str, list[dict]]
    planted: list[dict] = field(default_factory=list)  # synthetic sources: the secrets, known by construction
    tofu_authors: list[dict] = field(default_factory=list)  # TOFU: original records of the training authors
    counts: dict = field(default_factory=dict)
    private_names: dict[str, str] = field(default_factory=dict)  # TOFU: author id → name of every training author

    def texts(self, split: str) -> list[str]:
        return [row["text"] for row in self.splits[split]]

    def private_texts(self) -> dict[str, str]:
        """id → the text that must occur in no public / validation / test sample."""
        if self.private_names:
            return dict(self.private_names)
        return {p["id"]: p["text"] for p in self.planted if p.get("text")}

    def metrics(self) -> dict:
        from empriv.data.units import unit_id_statistics

        units = [row["unit"] for row in self.splits["train"] if "unit" in row]
        return {
            "source": self.source,
            **{f"n_{split}": len(self.splits[split]) for split in SPLITS},
            "n_secrets": len(self.planted) if self.planted else None,
            **self.counts,
            **({"train_units": unit_id_statistics(units)} if units else {}),
        }


def with_units(rows: list[dict], units: Sequence[str]) -> list[dict]:
    """``rows`` (the training split) with each record's privacy unit id (``unit``) added."""
    if len(rows) != len(units):
        raise ValueError(f"{len(units)} unit ids for {len(rows)} training records")
    return [{**row, "unit": str(u)} for row, u in zip(rows, units)]


def opaque_unit_ids(keys: Sequence[str], prefix: str = "user") -> list[str]:
    """Unit ids that name no one: ``<prefix>00012``, numbered by first appearance of each key (e.g. a sender's
    address), so the prepared data, records and logs carry no address as a unit id."""
    order: dict[str, int] = {}
    for k in keys:
        order.setdefault(k, len(order))
    width = len(str(max(len(order) - 1, 0)))
    return [f"{prefix}{order[k]:0{width}d}" for k in keys]


def _n_train_minimum() -> int:
    from empriv.config import DataParams

    return next(m.ge for m in DataParams.model_fields["n_train"].metadata if getattr(m, "ge", None) is not None)


MIN_N_TRAIN = _n_train_minimum()  # DataParams.n_train's lower bound, defined there once


def _take(rows: list, n: int, what: str, field_name: str) -> list:
    if len(rows) < n:
        if len(rows) < MIN_N_TRAIN:  # no allowed n_train fits: the corpus is what must change
            raise ConfigError(f"{field_name} = {n} but the corpus has only {len(rows)} {what}, fewer than "
                              f"{field_name}'s minimum {MIN_N_TRAIN} (allowed: a corpus with at least {MIN_N_TRAIN} {what})")
        raise ConfigError(f"{field_name} = {n} but the corpus has only {len(rows)} {what} (allowed: {field_name} <= "
                          f"{len(rows)})")
    return rows[:n]


def _rows(prefix: str, texts: Sequence[str]) -> list[dict]:
    return [{"id": f"{prefix}-{i:06d}", "text": t} for i, t in enumerate(texts)]


def synthetic_enron(data) -> PreparedData:
    """``data``: the ``data`` params section (sizes, seed, secret_frequencies)."""
    from empriv.data.synthetic import generate_corpus

    d = data
    corpus = generate_corpus(d.n_train, d.n_validation, d.n_test, d.n_public, d.seed, tuple(d.secret_frequencies))
    from empriv.data.units import synthetic_unit_ids

    splits = {split: [e.to_row() for e in getattr(corpus, split)] for split in SPLITS}
    # privacy units: a heavy-tailed number of emails per synthetic user, shaped like Enron's senders
    splits["train"] = with_units(splits["train"], synthetic_unit_ids(len(splits["train"]), d.seed + 11))
    planted = [{"id": s.id, "kind": s.kind, "text": s.text, "planned_frequency": s.frequency} for s in corpus.secrets]
    counts = {"train_emails_with_secret": sum(1 for e in corpus.train if e.secret_ids)}
    return PreparedData("synthetic-enron", splits, planted, counts=counts)


def enron_public(data) -> list[dict]:
    """The public split of real Enron runs: the built-in general-English public texts (no e-mail of
    the fine-tuning family; see :func:`empriv.data.synthetic.generate_public`)."""
    from empriv.data.synthetic import generate_public

    return [e.to_row() for e in generate_public(data.n_public, data.seed + 1)]


def enron(data, emails: Sequence, report, count_tokens: Callable[[str], int], units=None) -> PreparedData:
    """Real Enron: ``emails`` and ``report`` from :func:`empriv.data.enron.load_enron`; ``count_tokens``
    counts GPT-2 tokens (the research's "< 30 tokens" rule); ``units`` the user-level view
    (:func:`empriv.data.units.build_user_records`), statistics only."""
    from empriv.data.enron import clean_enron

    d = data
    cleaned = clean_enron(emails, count_tokens, top_n=d.top_n_people, seed=d.seed)
    train = _take(list(cleaned.train), d.n_train, "cleaned training emails", "data.n_train")
    splits = {
        # privacy unit = sender, under an opaque id (no address leaves the raw corpus as a unit id)
        "train": with_units(_rows("train", [e.body for e in train]), opaque_unit_ids([e.sender for e in train])),
        "validation": _rows("validation", [e.body for e in list(cleaned.validation)[: d.n_validation]]),
        "test": _rows("test", [e.body for e in list(cleaned.test)[: d.n_test]]),
        "public": enron_public(d),
    }
    counts: dict[str, Any] = {"load": report.as_metrics(), "cleaning": dict(cleaned.counts)}
    if units is not None:  # the user-level view (privacy unit = sender), for the user-level DP work to come
        counts["user_level"] = {"counts": dict(units.counts), **units.unit_stats}
    return PreparedData("enron", splits, [], counts=counts)


def tofu(data, records: Sequence | None = None, make_paraphraser: Callable[[tuple[str, ...]], Any] | None = None) -> PreparedData:
    """TOFU sources. ``records``: the real TOFU records (``data.source: tofu``), or None to generate them
    (``synthetic-tofu``). ``make_paraphraser(protected_genres)`` builds the paraphraser of
    ``data.variant`` (None: the offline paraphraser)."""
    from empriv.data.synthetic_tofu import generate_synthetic_tofu
    from empriv.data.tofu import (RECORDS_PER_AUTHOR, extract_author_name, extract_secrets, group_by_author,
                                  split_by_author, training_text)

    d = data
    planted: list[dict] = []
    synth = None
    if records is None:
        synth = generate_synthetic_tofu(d.n_authors, d.seed)
        records = synth.records
        first_public = d.n_authors
    else:
        first_public = 10_000
    split = split_by_author(records, TOFU_TRAIN_FRACTION)
    train_records = list(split.train)
    # privacy unit = author (author i owns records [20i, 20(i+1)) of the raw list)
    train_units = [f"author-{split.train_authors[k // RECORDS_PER_AUTHOR]:03d}" for k in range(len(train_records))]
    variant_info: dict = {}
    if d.variant is not None:
        from empriv.data.variants import OfflineParaphraser, build_variant

        genres = tuple(s.genre for s in extract_secrets(train_records) if s.genre)
        paraphraser = make_paraphraser(genres) if make_paraphraser else OfflineParaphraser(seed=d.seed, protect=genres)
        dataset = build_variant(d.variant, train_records, paraphraser, seed=d.seed)
        train_records = list(dataset.records)
        train_units = [f"author-{a:03d}" for a in dataset.authors]
        variant_info = dataset.summary()
    n_train_authors = len(split.train_authors)
    if synth is not None:
        for author in synth.authors[:n_train_authors]:
            planted.append({"id": f"author-{author.index:03d}", "kind": "author_genre", "name": author.name,
                            "genre": author.genre, "author": author.index})
        private = {p["id"]: p["name"] for p in planted}
        data_names = [a.name for a in synth.authors]
    else:  # names as the secrets stage extracts them (an author whose name is not found has no secret)
        names = [extract_author_name(g) for g in group_by_author(records)]
        private = {f"author-{i:03d}": names[i] for i in split.train_authors if names[i]}
        data_names = [n for n in names if n]
    train = _take([training_text(r.question, r.answer) for r in train_records], d.n_train, "training records", "data.n_train")
    test_texts = [training_text(r.question, r.answer) for r in split.test]
    half = len(test_texts) // 2
    # Public authors are fictitious and named differently from every author of the data.
    public = generate_synthetic_tofu(max(1, d.n_public // 20), d.seed + 7, first_index=first_public,
                                     exclude_names=data_names).records
    splits = {
        "train": with_units(_rows("train", train), train_units[: len(train)]),
        "validation": _rows("validation", test_texts[:half][: d.n_validation]),
        "test": _rows("test", test_texts[half:][: d.n_test]),
        "public": _rows("public", [training_text(r.question, r.answer) for r in public]),
    }
    tofu_authors = [{"author": k // RECORDS_PER_AUTHOR, "question": r.question, "answer": r.answer}
                    for k, r in enumerate(split.train)]
    counts = {"authors": n_train_authors + len(split.test_authors), "train_authors": n_train_authors,
              "variant": d.variant, **({"variant_summary": variant_info} if variant_info else {})}
    return PreparedData(d.source, splits, planted, tofu_authors, counts, private)
