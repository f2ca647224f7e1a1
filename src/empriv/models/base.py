"""The tokenizer and base stages."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from empriv.config import ConfigError, Params
from empriv.data.splits import load_texts
from empriv.io import atomic_dir, write_json

log = logging.getLogger("empriv.base")

TOKENIZER_DIR = Path("models/tokenizer")
BASE_DIR = Path("models/base")


def make_tokenizer(params: Params, out_dir: str | Path = TOKENIZER_DIR) -> dict:
    from empriv.models.tokenizer import build_tokenizer

    tok = build_tokenizer(params.tokenizer.kind, load_texts("public"), params.tokenizer.vocab_size)
    with atomic_dir(out_dir) as tmp:
        tok.save(tmp)
    info = {"kind": tok.kind, "vocab_size": tok.vocab_size}
    log.info("tokenizer %s with %d tokens", tok.kind, tok.vocab_size)
    return info


def make_base(params: Params, out_dir: str | Path = BASE_DIR, metrics_path: str | Path = "metrics/base.json") -> dict:
    import torch

    from empriv.models.lm import encode_fixed, mean_token_nll
    from empriv.models.registry import build_tiny_gpt2, pretrain, resolve_device
    from empriv.models.tokenizer import Tokenizer

    b = params.base
    if b.name != "tiny-gpt2":
        raise ConfigError(f"base.name {b.name!r}: only 'tiny-gpt2' is built today (local paths and hub ids are not built yet)")
    tok = Tokenizer.load(TOKENIZER_DIR)
    device = resolve_device(params.runtime.device)
    t0 = time.time()
    pub_ids, pub_mask = encode_fixed(tok.encode_batch(load_texts("public")), tok.eos_id, b.seq_len)
    test_ids, test_mask = encode_fixed(tok.encode_batch(load_texts("test")), tok.eos_id, b.seq_len)
    model = build_tiny_gpt2(b, tok.vocab_size, tok.eos_id)
    losses = pretrain(model, pub_ids, pub_mask, b, device)
    model.to("cpu")
    test_nll = mean_token_nll(model, test_ids, test_mask, params.score.eval_batch_size)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
    metrics = {
        "name": b.name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "pretrain_steps": b.pretrain_steps,
        "pretrain_final_loss": losses[-1] if losses else None,
        "test_nll": test_nll,
        "test_perplexity": float(torch.exp(torch.tensor(test_nll))),
        "wall_time_s": time.time() - t0,
    }
    write_json(metrics_path, metrics)
    log.info("base %s: %d parameters, test perplexity %.2f", b.name, metrics["parameters"], metrics["test_perplexity"])
    return metrics
