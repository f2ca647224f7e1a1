"""prepare: the raw corpus (or the built-in generators) → data/prepared/{train,validation,test,public}.jsonl
(+ planted_secrets.jsonl, tofu_train_authors.jsonl) and records/prepare.json.

Before anything is written, the leak check (:mod:`empriv.secrets.leaks`) looks for every secret known
at this point — the planted secrets of synthetic-enron, the training authors' names of TOFU — in the
public, validation and test splits; one found stops the stage with a one-line error naming the secret
ids, splits and counts (never the text), and no file is touched.
"""

from __future__ import annotations

import logging
from pathlib import Path

from empriv import paths
from empriv.config import Params

log = logging.getLogger("empriv.prepare")


def build(params: Params, caches: list | None = None):
    """Load the raw inputs of ``data.source`` and build the splits (a :class:`PreparedData`); LLM paraphrase
    caches the build used are appended to ``caches`` (the caller saves them once the data passed its checks)."""
    from empriv.data import prepare as prep

    d = params.data
    if d.source == "synthetic-enron":
        return prep.synthetic_enron(d)
    if d.source == "enron":
        from empriv.data.enron import iter_raw_messages, load_enron
        from empriv.data.units import build_user_records
        from empriv.models.tokenizer import load_gpt2

        emails, report = load_enron(d.path)
        if report.n_malformed:
            log.warning("%d malformed Enron messages skipped (reasons in %s)", report.n_malformed, paths.PREPARE_METRICS)
        gpt2 = load_gpt2()  # the research counts "< 30 tokens" in GPT-2 tokens
        units = build_user_records(iter_raw_messages(d.path))
        return prep.enron(d, emails, report, lambda t: len(gpt2.encode(t)), units)
    if d.source == "text":
        return build_text(params)
    records = None
    if d.source == "tofu":
        from empriv.data.tofu import load_tofu

        records = load_tofu(d.path)
    return prep.tofu(d, records, _paraphraser_factory(params, caches if caches is not None else []))


TEXT_MANIFEST = "text_corpus.json"  # data/prepared/: what the secrets stage needs to know of a text corpus


def build_text(params: Params):
    """``data.source: text``: the records of ``data.path`` (and of ``data.public_path``, ``data.public: file``;
    :mod:`empriv.data.text`) as prepared splits."""
    from empriv.data.text import load_text_corpus, text_prepared

    d = params.data
    records, load = load_text_corpus(d.path, text_format=d.text_format, text_field=d.text_field,
                                     user_field=d.user_field, split_field=d.split_field,
                                     allow_public=d.public == "split")
    public = None
    if d.public == "file":  # the same format and text field as the corpus; every record is public
        public = load_text_corpus(d.public_path, text_format=d.text_format, text_field=d.text_field)
    tokenizer = None
    if d.max_tokens is not None:
        from empriv.models.tokenizer import load_gpt2

        tokenizer = load_gpt2()  # lengths in GPT-2 tokens: fixed before any tokenizer of the run exists
    data = text_prepared(d, records, load, tokenizer, public)
    dropped = (data.counts.get("public") or {}).get("dropped_private_overlap")
    if dropped:
        log.warning("%d public record(s) dropped: the same text (up to whitespace) is a record of data.path (count in "
                    "%s)", dropped, paths.PREPARE_METRICS)
    return data


def _paraphraser_factory(params: Params, caches: list):
    d = params.data
    if d.variant is None or d.paraphraser != "llm":
        return None  # the library's default: the offline paraphraser protecting the genres

    def make(genres):  # GPU workstations; paraphrases cached beside the prepared data
        from empriv.data.variants import CachedParaphraser, LLMParaphraser

        cached = CachedParaphraser(LLMParaphraser(d.paraphraser_model, seed=d.seed), paths.PARAPHRASE_CACHE)
        caches.append(cached)
        return cached

    return make


def check_leaks(data) -> dict:
    """Raise :class:`empriv.secrets.leaks.LeakError` if a secret of ``data`` occurs in a checked split;
    return the check's record (counts only)."""
    from empriv.data.prepare import CHECKED_SPLITS
    from empriv.secrets.leaks import check_no_leaks, find_leaks, leak_summary

    private = data.private_texts()
    splits = {split: data.texts(split) for split in CHECKED_SPLITS}
    leaks = find_leaks(private, splits) if private else []
    check_no_leaks(leaks, "author name" if data.private_names else "secret")
    return leak_summary(leaks, {s: len(t) for s, t in splits.items()}, len(private))


def main(params: Params, out_dir: str | Path = paths.PREPARED_DIR, metrics_path: str | Path = paths.PREPARE_METRICS) -> dict:
    from empriv.io import write_json, write_jsonl
    from empriv.pipeline.staged_outputs import StagedOutputs

    caches: list = []
    data = build(params, caches)
    leak_record = check_leaks(data)
    for cache in caches:
        cache.save()
    out_dir = Path(out_dir)
    metrics = {**data.metrics(), "leak_check": leak_record}
    with StagedOutputs() as out:  # the splits and their record replaced together (no partial outputs)
        tmp = out.directory(out_dir)
        for split in paths.SPLITS:
            write_jsonl(paths.split_path(split, tmp), data.splits[split])
        if data.planted:
            write_jsonl(Path(tmp) / paths.PLANTED_SECRETS.name, data.planted)
        if data.tofu_authors:
            write_jsonl(Path(tmp) / paths.TOFU_AUTHORS.name, data.tofu_authors)
        if data.source == "text":  # the secrets stage reads the secret choice here (it depends on data/prepared)
            write_json(Path(tmp) / TEXT_MANIFEST, {"secret_kind": params.data.secret_kind})
        write_json(out.file(metrics_path), metrics)
    log.info("prepared %s: %d train / %d validation / %d test / %d public samples; no secret in %s",
             data.source, metrics["n_train"], metrics["n_validation"], metrics["n_test"], metrics["n_public"],
             "/".join(leak_record["splits"]))
    return metrics


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/prepare.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
