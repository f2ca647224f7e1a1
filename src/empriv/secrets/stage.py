"""The secrets stage: planted (synthetic) secrets → data/secrets.jsonl + metrics/secrets.json."""

from __future__ import annotations

import logging
from pathlib import Path

from empriv.config import ConfigError, Params
from empriv.data.prepare import PLANTED_SECRETS
from empriv.data.splits import PREPARED_DIR, load_texts
from empriv.io import read_jsonl, write_json, write_jsonl

log = logging.getLogger("empriv.secrets")

SECRETS_PATH = Path("data/secrets.jsonl")
# What of a secret record may leave the machine (metrics, W&B): never its text.
PUBLIC_FIELDS = ("id", "kind", "token_length", "prompt_tokens", "continuation_tokens", "occurrences", "frequency", "in_window_fraction")


def make_secrets(params: Params, out_path: str | Path = SECRETS_PATH, metrics_path: str | Path = "metrics/secrets.json") -> list[dict]:
    from empriv.models.base import TOKENIZER_DIR
    from empriv.models.tokenizer import Tokenizer
    from empriv.secrets.mining import load_overrides, secret_records

    planted = Path(PREPARED_DIR) / PLANTED_SECRETS
    if not planted.exists():
        raise ConfigError(f"{planted} does not exist: the secrets of data.source {params.data.source!r} must be mined (not built yet)")
    tok = Tokenizer.load(TOKENIZER_DIR)
    records = secret_records(
        read_jsonl(planted),
        load_texts("train"),
        tok,
        params.base.seq_len,
        params.secrets.split_rule,
        params.secrets.min_continuation_chars,
        load_overrides(params.secrets.overrides),
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
    write_jsonl(out_path, records)
    write_json(metrics_path, {"n_secrets": len(records), "secrets": [{k: r[k] for k in PUBLIC_FIELDS} for r in records]})
    low = [r["id"] for r in records if r["in_window_fraction"] < 1.0]
    if low:
        log.warning("secrets %s are cut off by the %d-token window in some emails", low, params.base.seq_len)
    log.info("%d secrets, frequencies %.3f%%–%.3f%%", len(records),
             100 * min(r["frequency"] for r in records), 100 * max(r["frequency"] for r in records))
    return records
