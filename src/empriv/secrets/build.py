"""The secrets of a corpus, as records with their prompt/continuation split (the library half of the
``secrets`` stage; :mod:`empriv.pipeline.secrets` loads the inputs and writes).

- ``synthetic-enron``: the generator's planted secrets (:func:`planted_secrets`).
- ``enron``: mined from the training split (token n-grams, :func:`mined_secrets`). Degenerate
  candidates (:func:`empriv.secrets.candidates.degenerate_reason`), candidates longer than the window, with
  too few occurrences inside it, or occurring in the public split (then they are public text, which the
  base model was pre-trained on, not a secret) are rejected and counted. The model-based filters of the
  research need the cube's non-private runs and ACR: they run at the ``filter`` stage.
- ``synthetic-tofu`` (planted truth) and ``tofu`` (extracted from the training authors' records):
  one (author, genre) secret per training author (:func:`tofu_secrets`). Its prompt asks the attribute
  question in the training format — ``Question: What genre does {author} write in?`` then ``Answer:`` —
  and its continuation is the genre; exposure-gap controls swap in other genres.

:func:`leak_text` is what of a secret may occur in no held-out or public sample (the string; for TOFU the
author's name); :func:`held_out` drops the validation/test samples that contain one.
"""

from __future__ import annotations

from collections.abc import Sequence

from empriv.config import ConfigError

# What of a secret record may leave the machine (metrics, W&B): never its text.
PUBLIC_FIELDS = ("id", "kind", "token_length", "prompt_tokens", "continuation_tokens", "occurrences", "frequency",
                 "in_window_fraction")


def leak_text(record: dict) -> str:
    """The text of ``record`` that must not occur outside the training split."""
    return record["name"] if record.get("kind") == "author_genre" else record["text"]


def public_view(record: dict) -> dict:
    return {k: record[k] for k in PUBLIC_FIELDS}


def planted_secrets(planted: Sequence[dict], train_texts: Sequence[str], tokenizer, seq_len: int, split_rule: str,
                    min_continuation_chars: int, overrides: dict | None = None) -> list[dict]:
    """Records of the synthetic generator's planted secrets; each must fit the training window."""
    from empriv.secrets.records import secret_records

    records = secret_records(planted, train_texts, tokenizer, seq_len, split_rule, min_continuation_chars, overrides)
    too_long = [f"{r['id']} ({r['token_length']} tokens)" for r in records if r["token_length"] + 1 > seq_len]
    if too_long:
        raise ConfigError(
            f"secrets {', '.join(too_long)} do not fit the training window: base.seq_len = {seq_len} must be "
            "> 1 + the longest secret's token length (raise base.seq_len or tokenizer.vocab_size)"
        )
    return records


def mined_secrets(train_texts: Sequence[str], public_texts: Sequence[str], tokenizer, seq_len: int, *, ngram: int,
                  top_k: int, min_count: int, split_rule: str, min_continuation_chars: int, min_in_window_fraction: float,
                  overrides: dict | None = None, id_prefix: str = "enron") -> tuple[list[dict], dict]:
    """(records, info) of the secrets mined from ``train_texts`` (see the module docstring)."""
    from empriv.secrets.leaks import find_leaks
    from empriv.secrets.candidates import reject_degenerate
    from empriv.secrets.mining import mine_secret_candidates
    from empriv.secrets.records import secret_records

    candidates = mine_secret_candidates(train_texts, tokenizer, n=ngram, top_k=top_k, min_count=min_count,
                                        id_prefix=id_prefix)
    rows = [{"id": c.id, "kind": "mined", "text": c.text, "token_length": c.token_length} for c in candidates]
    rows, rejected = reject_degenerate(rows)
    fitting = [r for r in rows if r["token_length"] + 1 <= seq_len]
    in_public = {lk.secret_id for lk in find_leaks({r["id"]: r["text"] for r in fitting}, {"public": public_texts})}
    fresh = [{k: r[k] for k in ("id", "kind", "text")} for r in fitting if r["id"] not in in_public]
    overrides = {k: v for k, v in (overrides or {}).items()}
    unknown = set(overrides) - {c.id for c in candidates}
    if unknown:
        raise ConfigError(f"secrets.overrides names unknown secret ids {sorted(unknown)}")
    kept_ids = {r["id"] for r in fresh}
    records = secret_records(fresh, train_texts, tokenizer, seq_len, split_rule, min_continuation_chars,
                             {k: v for k, v in overrides.items() if k in kept_ids})
    records, rejected_after = reject_degenerate(records)  # the continuation is known only now
    rejected = {k: rejected[k] + rejected_after[k] for k in rejected}
    # A secret whose occurrences sit beyond the training window is never trained on: nothing to measure.
    seen = [r for r in records if (r["in_window_fraction"] or 0.0) >= min_in_window_fraction]
    if records and not seen:
        raise ConfigError(f"none of the {len(records)} mined secrets has >= secrets.min_in_window_fraction = "
                          f"{min_in_window_fraction} of its occurrences inside the {seq_len}-token window "
                          "(raise base.seq_len, or lower secrets.min_in_window_fraction)")
    info = {"mined": len(candidates), "rejected_degenerate": rejected,
            "longer_than_window": len(rows) - len(fitting), "in_public_split": len(in_public),
            "outside_window": len(records) - len(seen), "min_in_window_fraction": min_in_window_fraction,
            "filters": [{"name": "verbatim by non-private model", "ran": False},
                        {"name": "ACR >= 1.5 (non-private)", "ran": False},
                        {"name": "not verbatim by base", "ran": False},
                        {"name": "ACR <= 0.5 (base)", "ran": False}]}
    return seen, info


def pattern_secrets(train_texts: Sequence[str], public_texts: Sequence[str], tokenizer, seq_len: int, *, top_k: int,
                    min_count: int, split_rule: str, min_continuation_chars: int, min_in_window_fraction: float,
                    overrides: dict | None = None) -> tuple[list[dict], dict]:
    """(records, info) of the PII-like secrets of ``train_texts`` (:mod:`empriv.secrets.patterns`): the ``top_k``
    most frequent in >= ``min_count`` records, with their context; those longer than the window, occurring in the
    public split or with too few occurrences inside the window are left out and counted."""
    from empriv.secrets.leaks import find_leaks
    from empriv.secrets.patterns import pattern_candidates
    from empriv.secrets.records import secret_records

    rows, found = pattern_candidates(train_texts, top_k=top_k, min_count=min_count)
    lengths = [len(tokenizer.encode(r["text"])) for r in rows]
    fitting = [r for r, n in zip(rows, lengths) if n + 1 <= seq_len]
    in_public = {lk.secret_id for lk in find_leaks({r["id"]: r["text"] for r in fitting}, {"public": public_texts})}
    fresh = [{k: r[k] for k in ("id", "kind", "text")} for r in fitting if r["id"] not in in_public]
    overrides = dict(overrides or {})
    unknown = set(overrides) - {r["id"] for r in rows}
    if unknown:
        raise ConfigError(f"secrets.overrides names unknown secret ids {sorted(unknown)} (allowed: ids the patterns "
                          f"give, pii-000 … pii-{max(len(rows), 1) - 1:03d})")
    kept_ids = {r["id"] for r in fresh}
    records = secret_records(fresh, train_texts, tokenizer, seq_len, split_rule, min_continuation_chars,
                             {k: v for k, v in overrides.items() if k in kept_ids})
    seen = [r for r in records if (r["in_window_fraction"] or 0.0) >= min_in_window_fraction]
    info = {"secret_kind": "patterns", **found, "longer_than_window": len(rows) - len(fitting),
            "in_public_split": len(in_public), "outside_window": len(records) - len(seen),
            "min_in_window_fraction": min_in_window_fraction}
    return seen, info


def given_secrets(given: dict[str, tuple[str, str]], train_texts: Sequence[str], tokenizer,
                  seq_len: int) -> tuple[list[dict], dict]:
    """(records, info) of the user's own secrets (``secrets.overrides`` as the list of secrets: ``{id, prompt,
    continuation}``, the secret prompt + continuation); each must occur in the training split and fit the window,
    else a :class:`ConfigError` with one line per secret naming its id (never its text)."""
    from empriv.secrets.records import secret_records

    if not given:
        raise ConfigError("data.secret_kind: given needs secrets.overrides, a JSONL of {id, prompt, continuation} "
                          "(got none; allowed: a file with at least one secret)")
    problems = []
    for sid, (prompt, continuation) in given.items():
        text = prompt + continuation
        if not any(text in t for t in train_texts):
            problems.append(f"secrets.overrides: secret {sid} occurs in no record of the training split (allowed: a "
                            "string of the training data)")
        elif len(tokenizer.encode(text)) + 1 > seq_len:
            problems.append(f"secrets.overrides: secret {sid} is longer than the {seq_len}-token window (allowed: "
                            "a secret that fits base.seq_len - 1 tokens)")
    if problems:
        raise ConfigError(*problems)
    rows = [{"id": sid, "kind": "given", "text": p + c} for sid, (p, c) in given.items()]
    records = secret_records(rows, train_texts, tokenizer, seq_len, overrides=dict(given))
    return records, {"secret_kind": "given", "given": len(given)}


def tofu_secrets(author_records: Sequence, planted: Sequence[dict] | None, train_texts: Sequence[str],
                 tokenizer) -> tuple[list[dict], dict]:
    """(records, info): one (author → genre) secret per training author named in the training split.
    ``author_records``: the training authors' original :class:`~empriv.data.tofu.QARecord` s (for
    extraction); ``planted``: the generator's truth (synthetic-tofu), or None to extract."""
    from empriv.data.tofu import attribute_prompt, extract_secrets, training_text

    if planted:
        pairs = [(p["author"], p["name"], p["genre"]) for p in planted]
        how = "planted"
    else:
        pairs = [(s.author, s.name, s.genre) for s in extract_secrets(list(author_records))]
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
            "token_length": len(tokenizer.encode(prompt + continuation)), "prompt_tokens": len(tokenizer.encode(prompt)),
            "continuation_tokens": len(tokenizer.encode(continuation)), "occurrences": occurrences,
            "frequency": occurrences / n if n else 0.0, "in_window_fraction": None,
        })
    info = {"how": how, "authors": len(pairs), "with_name_and_genre": len(complete), "in_training_split": len(out),
            "filters": [{"name": "revealed by all non-private runs (greedy)", "ran": False}]}
    return out, info


def held_out(rows: Sequence[dict], records: Sequence[dict]) -> list[dict]:
    """The rows (``{"id", "text"}``) that contain no secret's :func:`leak_text`."""
    from empriv.data.enron import drop_secret_samples

    return drop_secret_samples(rows, [leak_text(r) for r in records], text=lambda row: row["text"])
