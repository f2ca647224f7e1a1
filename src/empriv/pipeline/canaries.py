"""canaries: the audit canaries of ``params.canaries`` for the base's tokenizer → data/canaries/ (canaries.jsonl,
meta.json) and records/canaries.json (counts and lengths, never token ids).

m = ``canaries.n_canaries`` audit canaries whatever the draw; each is a member independently with probability
1/2 (``membership`` and ``n_members`` are recorded). Before anything is written, the leak check looks for every
canary that text could contain (all its tokens in the tokenizer's vocabulary — new-token canaries cannot occur
anywhere) as a token sequence in the train, validation, test and public splits: a non-member seen in training,
or any canary in pre-training or held-out text, would bias the audit. One found stops the stage with one line.

A user-level unit in ``audit.cube.unit`` (``group-k5-…``, ``userwise-k5-…``) adds, per distinct k, m canary *units*
of k records each (:func:`empriv.audit.user_level.generate_user_canaries`: one secret and one Bernoulli(½)
membership per unit, k prefixes) in ``data/canaries/user-k<k>/``, leak-checked the same way; their counts are under
``user_level`` in records/canaries.json.
"""

from __future__ import annotations

import logging
from pathlib import Path

from empriv import paths
from empriv.config import ConfigError, Params
from empriv.pipeline.common import load_texts, load_tokenizer

log = logging.getLogger("empriv.secrets")

LEAK_SPLITS = ("train", "validation", "test", "public")


def check_canary_leaks(canary_set, tokenizer, prepared_dir: Path = paths.PREPARED_DIR,
                       encoded: dict | None = None) -> dict:
    """Raise :class:`empriv.secrets.leaks.LeakError` if a canary occurs in a split; the check's record."""
    from empriv.secrets.canaries import checkable_sequences
    from empriv.secrets.leaks import check_no_leaks, find_token_leaks, leak_summary

    sequences = checkable_sequences(canary_set, tokenizer.vocab_size)
    if not sequences:
        return leak_summary([], {}, 0)
    encoded = dict(encoded or {})
    for split in LEAK_SPLITS:
        if split not in encoded:
            encoded[split] = tokenizer.encode_batch(load_texts(split, prepared_dir))
    leaks = find_token_leaks(sequences, encoded)
    check_no_leaks(leaks, "canary")
    return leak_summary(leaks, {s: len(v) for s, v in encoded.items()}, len(sequences))


def main(params: Params, out_dir: str | Path = paths.CANARIES_DIR, metrics_path: str | Path = paths.CANARIES_METRICS,
         prepared_dir: str | Path = paths.PREPARED_DIR):
    from empriv.io import write_json
    from empriv.pipeline.staged_outputs import StagedOutputs
    from empriv.secrets.canaries import _generate_from_params
    from empriv.io import ensure_writable
    from empriv.stage import set_threads

    ensure_writable(out_dir, metrics_path)  # before the base model scores every canary
    set_threads(params)
    cp = params.canaries
    tok = load_tokenizer()
    encoded: dict = {}
    if cp.design in ("unigram", "bigram"):
        encoded["train"] = tok.encode_batch(load_texts("train", prepared_dir))
    if cp.prefix == "test":
        encoded["test"] = tok.encode_batch(load_texts("test", prepared_dir))
    base = None
    if cp.design == "model":
        from empriv.pipeline.common import load_base

        base = load_base()
        if base.get_input_embeddings().weight.shape[0] != tok.vocab_size:
            raise ConfigError(f"the base model's vocabulary ({base.get_input_embeddings().weight.shape[0]}) "
                              f"differs from the tokenizer's ({tok.vocab_size}): rebuild the base (dvc repro base)")
    try:
        cs = _generate_from_params(cp, tok.vocab_size, tok.eos_id, encoded.get("train"), encoded.get("test"), base,
                                   params.base.seq_len)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    leak_record = check_canary_leaks(cs, tok, Path(prepared_dir), encoded)
    user_sets = {k: user_canaries(params, k, tok, encoded.get("train"), base) for k in params.user_audit_ks()}
    user_summary = {f"k{k}": {**uc.public_summary(), "leak_check": check_canary_leaks(uc.canary_set, tok,
                                                                                     Path(prepared_dir), encoded)}
                    for k, uc in user_sets.items()}
    summary = {**cs.public_summary(), "leak_check": leak_record, **({"user_level": user_summary} if user_summary else {})}
    with StagedOutputs() as out:  # the canaries and their record replaced together (no partial outputs)
        tmp = out.directory(out_dir)
        cs.save(tmp)
        for k, uc in user_sets.items():
            uc.save(Path(tmp) / user_canaries_dirname(k))
        write_json(out.file(metrics_path), summary)
    log.info("canaries: %d (%d members, %s) + %d population, design %s, prefix %s, loss %s; %d checked for leaks",
             len(cs.audit), len(cs.members), cs.extra.get("membership"), len(cs.population), cs.design, cs.prefix,
             cs.loss, leak_record["n_checked"])
    for k, uc in user_sets.items():
        log.info("user-level canaries (k=%d): %d units (%d members) × %d records", k, uc.n_units,
                 len(uc.member_units), k)
    return cs


def user_canaries_dirname(k: int) -> str:
    return f"user-k{k}"


def user_canaries(params: Params, k: int, tok, train_tokens, base):
    """m = ``canaries.n_canaries`` canary units of k records each, drawn with the record-level canaries' design."""
    from empriv.audit.user_level import generate_user_canaries

    cp = params.canaries
    try:
        return generate_user_canaries(design=cp.design, n_units=cp.n_canaries, records_per_unit=k,
                                      vocab_size=tok.vocab_size, eos_id=tok.eos_id, seed=cp.seed,
                                      prefix_length=cp.prefix_length, secret_length=cp.secret_length, loss=cp.loss,
                                      pool_size=cp.pool_size, train_token_lists=train_tokens, base_model=base,
                                      seq_len=params.base.seq_len)
    except ValueError as err:
        raise ConfigError(f"canaries (user level, k={k}): {err}") from None


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/canaries.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
