"""The prepare stage: build the cleaned splits of the configured corpus.

Every source writes the same files to ``data/prepared/``: ``train``, ``validation``, ``test`` and
``public`` (JSON lines of ``{"id", "text"}``), and, where the secrets are known by construction,
``planted_secrets.jsonl``. ``metrics/prepare.json`` holds the counts (never text).

- ``synthetic-enron`` (default): the built-in Enron-like generator (:mod:`empriv.data.synthetic`).
- ``enron``: the Kaggle ``emails.csv`` or a CMU maildir at ``data.path``, cleaned as in the
  research's appendix B.1 (:mod:`empriv.data.enron`); its secrets are mined at the secrets stage.
- ``synthetic-tofu`` / ``tofu``: fictitious-author Q/A records (generated, or the TOFU file at
  ``data.path``), split by author (first 90 % train); ``data.variant`` builds a TOFU variant of the
  training authors (paraphrases by the offline paraphraser).

``data.n_train`` training samples are used (an error names how many exist if there are fewer), and
at most ``n_validation`` / ``n_test``. The *public* split, used only to pre-train the tiny base and
the tokenizer, is always generated and secret-free. For the e-mail sources it is general English of
*other* genres (news, forum threads, recipes, chat, reviews, everyday and other-industry e-mails:
:func:`empriv.data.synthetic.generate_public`), so that fine-tuning on the Enron-like or real Enron
training split has something to learn; for TOFU, synthetic authors disjoint from the data's. A real
base model (GPU workstations) would not need it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from empriv.config import ConfigError, Params
from empriv.data.splits import PREPARED_DIR, write_split
from empriv.io import atomic_dir, write_json, write_jsonl

log = logging.getLogger("empriv.prepare")

PLANTED_SECRETS = "planted_secrets.jsonl"
TOFU_AUTHORS = "tofu_train_authors.jsonl"
PARAPHRASE_CACHE = Path("data/paraphrases.json")  # LLM paraphrases (a DVC output of prepare when used)  # original records of the training authors, for secret extraction
TOFU_TRAIN_FRACTION = 0.9


def _take(rows: list, n: int, what: str, field: str) -> list:
    if len(rows) < n:
        raise ConfigError(f"{field} = {n} but the corpus has only {len(rows)} {what}: set {field} <= {len(rows)}")
    return rows[:n]


def _rows(prefix: str, texts: list[str]) -> list[dict]:
    return [{"id": f"{prefix}-{i:06d}", "text": t} for i, t in enumerate(texts)]


def _synthetic_enron(params: Params) -> tuple[dict, list[dict], dict]:
    from empriv.data.synthetic import generate_corpus

    d = params.data
    corpus = generate_corpus(d.n_train, d.n_validation, d.n_test, d.n_public, d.seed, tuple(d.secret_frequencies))
    splits = {split: [e.to_row() for e in getattr(corpus, split)] for split in ("train", "validation", "test", "public")}
    planted = [{"id": s.id, "kind": s.kind, "text": s.text, "planned_frequency": s.frequency} for s in corpus.secrets]
    counts = {"train_emails_with_secret": sum(1 for e in corpus.train if e.secret_ids)}
    return splits, planted, counts


def _synthetic_enron_public(params: Params) -> list[dict]:
    """The public split of real Enron runs: the built-in general-English public texts (no e-mail
    of the fine-tuning family; see :func:`empriv.data.synthetic.generate_public`)."""
    from empriv.data.synthetic import generate_public

    d = params.data
    return [e.to_row() for e in generate_public(d.n_public, d.seed + 1)]


def _enron(params: Params) -> tuple[dict, list[dict], dict]:
    from empriv.data.enron import clean_enron, load_enron
    from empriv.models.tokenizer import load_gpt2

    d = params.data
    emails, report = load_enron(d.path)
    if report.n_malformed:
        log.warning("%d malformed Enron messages skipped (reasons in metrics/prepare.json)", report.n_malformed)
    gpt2 = load_gpt2()  # the research counts "< 30 tokens" in GPT-2 tokens
    cleaned = clean_enron(emails, lambda t: len(gpt2.encode(t)), top_n=d.top_n_people, seed=d.seed)
    splits = {
        "train": _rows("train", [e.body for e in _take(list(cleaned.train), d.n_train, "cleaned training emails", "data.n_train")]),
        "validation": _rows("validation", [e.body for e in list(cleaned.validation)[: d.n_validation]]),
        "test": _rows("test", [e.body for e in list(cleaned.test)[: d.n_test]]),
        "public": _synthetic_enron_public(params),
    }
    from empriv.data.enron import iter_raw_messages
    from empriv.data.units import build_user_records

    # User-level view (privacy unit = sender): statistics only, for the user-level DP work to come.
    units = build_user_records(iter_raw_messages(d.path))
    counts = {"load": report.as_metrics(), "cleaning": dict(cleaned.counts),
              "user_level": {"counts": dict(units.counts), **units.unit_stats}}
    return splits, [], counts


def _tofu(params: Params) -> tuple[dict, list[dict], dict]:
    from empriv.data.synthetic_tofu import generate_synthetic_tofu
    from empriv.data.tofu import RECORDS_PER_AUTHOR, extract_secrets, load_tofu, split_by_author, training_text

    d = params.data
    planted: list[dict] = []
    if d.source == "tofu":
        records = load_tofu(d.path)
        first_public = 10_000
    else:
        synth = generate_synthetic_tofu(d.n_authors, d.seed)
        records = synth.records
        first_public = d.n_authors
    split = split_by_author(records, TOFU_TRAIN_FRACTION)
    train_records = list(split.train)
    variant_info: dict = {}
    if d.variant is not None:
        from empriv.data.variants import CachedParaphraser, LLMParaphraser, OfflineParaphraser, build_variant

        genres = tuple(s.genre for s in extract_secrets(train_records) if s.genre)
        if d.paraphraser == "llm":  # GPU workstations; paraphrases cached beside the prepared data
            paraphraser = CachedParaphraser(LLMParaphraser(d.paraphraser_model, seed=d.seed), PARAPHRASE_CACHE)
        else:
            paraphraser = OfflineParaphraser(seed=d.seed, protect=genres)
        dataset = build_variant(d.variant, train_records, paraphraser, seed=d.seed)
        if isinstance(paraphraser, CachedParaphraser):
            paraphraser.save()
        train_records = list(dataset.records)
        variant_info = dataset.summary()
    if d.source == "synthetic-tofu":
        for author in synth.authors[: len(split.train_authors)]:
            planted.append({"id": f"author-{author.index:03d}", "kind": "author_genre", "name": author.name,
                            "genre": author.genre, "author": author.index})
    train = _take([training_text(r.question, r.answer) for r in train_records], d.n_train, "training records", "data.n_train")
    test_texts = [training_text(r.question, r.answer) for r in split.test]
    half = len(test_texts) // 2
    public = generate_synthetic_tofu(max(1, d.n_public // 20), d.seed + 7, first_index=first_public).records
    splits = {
        "train": _rows("train", train),
        "validation": _rows("validation", test_texts[:half][: d.n_validation]),
        "test": _rows("test", test_texts[half:][: d.n_test]),
        "public": _rows("public", [training_text(r.question, r.answer) for r in public]),
    }
    splits["tofu_authors"] = [{"author": k // RECORDS_PER_AUTHOR, "question": r.question, "answer": r.answer}
                              for k, r in enumerate(split.train)]
    counts = {"authors": len(split.train_authors) + len(split.test_authors), "train_authors": len(split.train_authors),
              "variant": d.variant, **({"variant_summary": variant_info} if variant_info else {})}
    return splits, planted, counts


SOURCES = {"synthetic-enron": _synthetic_enron, "enron": _enron, "synthetic-tofu": _tofu, "tofu": _tofu}


def prepare(params: Params, out_dir: str | Path = PREPARED_DIR, metrics_path: str | Path = "metrics/prepare.json") -> dict:
    d = params.data
    splits, planted, counts = SOURCES[d.source](params)
    with atomic_dir(out_dir) as tmp:
        for split in ("train", "validation", "test", "public"):
            write_split(split, splits[split], tmp)
        if planted:
            write_jsonl(Path(tmp) / PLANTED_SECRETS, planted)
        if "tofu_authors" in splits:
            write_jsonl(Path(tmp) / TOFU_AUTHORS, splits["tofu_authors"])
    metrics = {
        "source": d.source,
        "n_train": len(splits["train"]),
        "n_validation": len(splits["validation"]),
        "n_test": len(splits["test"]),
        "n_public": len(splits["public"]),
        "n_secrets": len(planted) if planted else None,
        **counts,
    }
    write_json(metrics_path, metrics)
    log.info("prepared %s: %d train / %d validation / %d test / %d public samples", d.source,
             metrics["n_train"], metrics["n_validation"], metrics["n_test"], metrics["n_public"])
    return metrics
