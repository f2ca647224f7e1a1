"""The prepare stage: build the cleaned splits of the configured corpus."""

from __future__ import annotations

import logging
from pathlib import Path

from empriv.config import ConfigError, Params
from empriv.data.splits import PREPARED_DIR, write_split
from empriv.io import atomic_dir, write_json, write_jsonl

log = logging.getLogger("empriv.prepare")

PLANTED_SECRETS = "planted_secrets.jsonl"


def prepare(params: Params, out_dir: str | Path = PREPARED_DIR, metrics_path: str | Path = "metrics/prepare.json") -> dict:
    d = params.data
    if d.source != "synthetic":
        raise ConfigError(
            f"data.source {d.source!r}: loading real corpora is not built yet (only 'synthetic' runs today)"
        )
    from empriv.data.synthetic import generate_corpus

    corpus = generate_corpus(
        d.n_train, d.n_validation, d.n_test, d.n_public, d.seed, tuple(d.secret_frequencies)
    )
    with atomic_dir(out_dir) as tmp:
        for split in ("train", "validation", "test", "public"):
            write_split(split, [e.to_row() for e in getattr(corpus, split)], tmp)
        write_jsonl(
            Path(tmp) / PLANTED_SECRETS,
            [{"id": s.id, "kind": s.kind, "text": s.text, "planned_frequency": s.frequency} for s in corpus.secrets],
        )
    metrics = {
        "source": d.source,
        "n_train": len(corpus.train),
        "n_validation": len(corpus.validation),
        "n_test": len(corpus.test),
        "n_public": len(corpus.public),
        "n_secrets": len(corpus.secrets),
        "train_emails_with_secret": sum(1 for e in corpus.train if e.secret_ids),
    }
    write_json(metrics_path, metrics)
    log.info("prepared %d train / %d validation / %d test / %d public emails, %d planted secrets",
             metrics["n_train"], metrics["n_validation"], metrics["n_test"], metrics["n_public"], metrics["n_secrets"])
    return metrics
