"""The secrets stage: the secrets of the corpus → data/secrets.jsonl + metrics/secrets.json.

- ``synthetic-enron``: the generator's planted secrets.
- ``enron``: mined from the training split (token n-grams, :func:`mine_secret_candidates`); the
  model-based filters of the research need the cube's non-private runs and ACR, so they are
  recorded as not run (``filters`` in the metrics).
- ``synthetic-tofu`` (planted truth) and ``tofu`` (extracted from the training authors' records):
  one (author, genre) secret per training author. Its prompt asks the attribute question in the
  training format — ``Question: What genre does {author} write in?`` then ``Answer:`` — and its
  continuation is the genre; exposure-gap controls swap in other genres.
"""

from __future__ import annotations

import logging
from pathlib import Path

from empriv.config import ConfigError, Params
from empriv.data.prepare import PLANTED_SECRETS, TOFU_AUTHORS
from empriv.data.splits import PREPARED_DIR, load_texts
from empriv.io import read_jsonl, write_json, write_jsonl

log = logging.getLogger("empriv.secrets")

SECRETS_PATH = Path("data/secrets.jsonl")
HELDOUT_DIR = Path("data/heldout")  # validation/test without any sample that contains a secret
# What of a secret record may leave the machine (metrics, W&B): never its text.
PUBLIC_FIELDS = ("id", "kind", "token_length", "prompt_tokens", "continuation_tokens", "occurrences", "frequency", "in_window_fraction")


def _tofu_secrets(params: Params, train_texts: list[str], tok) -> tuple[list[dict], dict]:
    from empriv.data.tofu import QARecord, attribute_prompt, extract_secrets, training_text

    rows = read_jsonl(Path(PREPARED_DIR) / TOFU_AUTHORS)
    records = [QARecord(r["question"], r["answer"]) for r in rows]
    planted_path = Path(PREPARED_DIR) / PLANTED_SECRETS
    if planted_path.exists():
        pairs = [(p["author"], p["name"], p["genre"]) for p in read_jsonl(planted_path)]
        how = "planted"
    else:
        pairs = [(s.author, s.name, s.genre) for s in extract_secrets(records)]
        how = "extracted"
    complete = [(a, n, g) for a, n, g in pairs if n and g]
    n = len(train_texts)
    out = []
    for author, name, genre in complete:
        # Sample-level occurrences in the training split as used (data.n_train, variants): texts
        # naming both the author and the genre. An author cut off by data.n_train has none.
        occurrences = sum(1 for t in train_texts if name in t and genre.lower() in t.lower())
        if not any(name in t for t in train_texts):
            continue
        prompt = training_text(attribute_prompt(name), "").rstrip()
        continuation = f" {genre}"
        out.append({
            "id": f"author-{author:03d}", "kind": "author_genre", "text": prompt + continuation, "prompt": prompt,
            "continuation": continuation, "split_by": "attribute_prompt", "genre": genre, "name": name,
            "token_length": len(tok.encode(prompt + continuation)), "prompt_tokens": len(tok.encode(prompt)),
            "continuation_tokens": len(tok.encode(continuation)), "occurrences": occurrences,
            "frequency": occurrences / n if n else 0.0, "in_window_fraction": None,
        })
    info = {"how": how, "authors": len(pairs), "with_name_and_genre": len(complete), "in_training_split": len(out),
            "filters": [{"name": "revealed by all non-private runs (greedy)", "ran": False}]}
    return out, info


def _enron_secrets(params: Params, train_texts: list[str], tok) -> tuple[list[dict], dict]:
    from empriv.secrets.mining import mine_secret_candidates, secret_records

    sp = params.secrets
    candidates = mine_secret_candidates(train_texts, tok, n=sp.ngram, top_k=sp.top_k, min_count=sp.min_count)
    fitting = [c for c in candidates if c.token_length + 1 <= params.base.seq_len]
    records = secret_records(
        [{"id": c.id, "kind": "mined", "text": c.text} for c in fitting], train_texts, tok, params.base.seq_len,
        sp.split_rule, sp.min_continuation_chars, _overrides(params),
    )
    # A secret whose occurrences sit beyond the training window is never trained on: nothing to measure.
    seen = [r for r in records if (r["in_window_fraction"] or 0.0) >= sp.min_in_window_fraction]
    if records and not seen:
        raise ConfigError(f"none of the {len(records)} mined secrets has >= secrets.min_in_window_fraction = "
                          f"{sp.min_in_window_fraction} of its occurrences inside the {params.base.seq_len}-token window "
                          "(raise base.seq_len, or lower secrets.min_in_window_fraction)")
    info = {"mined": len(candidates), "longer_than_window": len(candidates) - len(fitting),
            "outside_window": len(records) - len(seen), "min_in_window_fraction": sp.min_in_window_fraction,
            "filters": [{"name": "verbatim by non-private model", "ran": False},
                        {"name": "ACR >= 1.5 (non-private)", "ran": False},
                        {"name": "not verbatim by base", "ran": False},
                        {"name": "ACR <= 0.5 (base)", "ran": False}]}
    return seen, info


def _overrides(params: Params):
    from empriv.secrets.mining import load_overrides

    return load_overrides(params.secrets.overrides)


def make_secrets(params: Params, out_path: str | Path = SECRETS_PATH, metrics_path: str | Path = "metrics/secrets.json",
                 heldout_dir: str | Path = HELDOUT_DIR) -> list[dict]:
    from empriv.models.base import TOKENIZER_DIR
    from empriv.models.tokenizer import Tokenizer
    from empriv.secrets.mining import secret_records

    tok = Tokenizer.load(TOKENIZER_DIR)
    train_texts = load_texts("train")
    source = params.data.source
    info: dict = {}
    if source == "synthetic-enron":
        planted = Path(PREPARED_DIR) / PLANTED_SECRETS
        if not planted.exists():
            raise ConfigError(f"{planted} does not exist: run the prepare stage first (dvc repro prepare)")
        records = secret_records(
            read_jsonl(planted), train_texts, tok, params.base.seq_len, params.secrets.split_rule,
            params.secrets.min_continuation_chars, _overrides(params),
        )
        too_long = [f"{r['id']} ({r['token_length']} tokens)" for r in records if r["token_length"] + 1 > params.base.seq_len]
        if too_long:
            raise ConfigError(
                f"secrets {', '.join(too_long)} do not fit the training window: base.seq_len = {params.base.seq_len} must be "
                "> 1 + the longest secret's token length (raise base.seq_len or tokenizer.vocab_size)"
            )
        for split in ("validation", "test", "public"):
            texts = load_texts(split)
            leaked = [r["id"] for r in records if any(r["text"] in t for t in texts)]
            if leaked:
                raise ValueError(f"secrets {leaked} occur in the {split} split, which must contain no secret")
    elif source == "enron":
        records, info = _enron_secrets(params, train_texts, tok)
    else:
        records, info = _tofu_secrets(params, train_texts, tok)
    if not records:
        raise ConfigError(f"no secret found in the {source} training split: nothing to measure")
    from empriv.data.enron import drop_secret_samples
    from empriv.io import atomic_dir

    held_out = {}
    with atomic_dir(heldout_dir) as tmp:
        for split in ("validation", "test"):
            rows = read_jsonl(Path(PREPARED_DIR) / f"{split}.jsonl")
            kept = drop_secret_samples(rows, [r["text"] for r in records], text=lambda row: row["text"])
            held_out[split] = {"dropped": len(rows) - len(kept), "kept": len(kept)}
            write_jsonl(Path(tmp) / f"{split}.jsonl", kept)
    write_jsonl(out_path, records)
    write_json(metrics_path, {"n_secrets": len(records), **info, "held_out_samples_with_a_secret": held_out,
                              "secrets": [{k: r[k] for k in PUBLIC_FIELDS} for r in records]})
    low = [r["id"] for r in records if r["in_window_fraction"] is not None and r["in_window_fraction"] < 1.0]
    if low:
        log.warning("secrets %s are cut off by the %d-token window in some samples", low, params.base.seq_len)
    log.info("%d secrets, frequencies %.3f%%–%.3f%%", len(records),
             100 * min(r["frequency"] for r in records), 100 * max(r["frequency"] for r in records))
    return records
