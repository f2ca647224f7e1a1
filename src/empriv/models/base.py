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
    """The BPE trained on the public split (tiny-gpt2), GPT-2's BPE, or a pre-trained base's own tokenizer."""
    from empriv.models.registry import is_pretrained
    from empriv.models.tokenizer import build_tokenizer, load_pretrained_tokenizer

    if is_pretrained(params.base.name):
        tok = load_pretrained_tokenizer(params.base.name)
    else:
        kind = "bpe" if params.tokenizer.kind == "auto" else params.tokenizer.kind
        tok = build_tokenizer(kind, load_texts("public"), params.tokenizer.vocab_size)
    with atomic_dir(out_dir) as tmp:
        tok.save(tmp)
    info = {"kind": tok.kind, "vocab_size": tok.vocab_size}
    log.info("tokenizer %s with %d tokens", tok.kind, tok.vocab_size)
    return info


def _pretrained_base(params: Params, out_dir: Path) -> dict:
    """Write a pre-trained base into ``out_dir`` (fp32 safetensors + tokenizer); returns facts for the metrics."""
    import torch

    from empriv.models.registry import hf_from_pretrained

    name = params.base.name
    if name == "smollm2-135m":
        from empriv.models.smollm2 import build_smollm2

        return build_smollm2(out_dir)
    from transformers import AutoModelForCausalLM

    model = hf_from_pretrained(AutoModelForCausalLM, name, what="weights", dtype=torch.float32)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    return {"source": name, "architecture": model.config.model_type}


def make_base(params: Params, out_dir: str | Path = BASE_DIR, metrics_path: str | Path = "metrics/base.json") -> dict:
    """Build the base: tiny-gpt2 pre-trained on the public split, or a pre-trained model written as fp32
    safetensors; with the tokenizer beside it. Metrics: size, test NLL on the held-out test split."""
    import torch

    from empriv.models.lm import encode_fixed, mean_token_nll
    from empriv.models.registry import build_tiny_gpt2, is_pretrained, load_model, pretrain, resolve_device
    from empriv.models.tokenizer import Tokenizer, copy_hf_tokenizer

    b = params.base
    tok = Tokenizer.load(TOKENIZER_DIR)
    device = resolve_device(params.runtime.device)
    t0 = time.time()
    test_ids, test_mask = encode_fixed(tok.encode_batch(load_texts("test")), tok.eos_id, b.seq_len)
    losses: list[float] = []
    facts: dict = {}
    with atomic_dir(out_dir) as tmp:
        if is_pretrained(b.name):
            facts = _pretrained_base(params, tmp)
            model = load_model(tmp)
            if b.name == "smollm2-135m":  # a sane build: ~7-8 perplexity on plain English, "... France is" → Paris
                from transformers import AutoTokenizer

                from empriv.models.smollm2 import sanity_check

                check = sanity_check(model, AutoTokenizer.from_pretrained(str(tmp)))
                facts.update(sanity_perplexity=check["perplexity"], sanity_completion=check["completion"])
            vocab = model.get_input_embeddings().weight.shape[0]
            if vocab < tok.vocab_size:
                raise ConfigError(f"base.name {b.name!r}: the model has {vocab} token embeddings but its tokenizer "
                                  f"{tok.vocab_size} tokens (rebuild the tokenizer: dvc repro tokenizer)")
        else:
            pub_ids, pub_mask = encode_fixed(tok.encode_batch(load_texts("public")), tok.eos_id, b.seq_len)
            model = build_tiny_gpt2(b, tok.vocab_size, tok.eos_id)
            losses = pretrain(model, pub_ids, pub_mask, b, device)
            model.to("cpu")
            model.save_pretrained(tmp, safe_serialization=True)
        copy_hf_tokenizer(TOKENIZER_DIR, tmp)
        test_nll = mean_token_nll(model.to(device), test_ids, test_mask, params.score.eval_batch_size)
        model.to("cpu")
    metrics = {
        "name": b.name,
        "pretrained": is_pretrained(b.name),
        "parameters": sum(p.numel() for p in model.parameters()),
        "pretrain_steps": 0 if is_pretrained(b.name) else b.pretrain_steps,
        "pretrain_final_loss": losses[-1] if losses else None,
        "test_nll": test_nll,
        "test_perplexity": float(torch.exp(torch.tensor(test_nll))),
        "wall_time_s": time.time() - t0,
        **{k: v for k, v in facts.items() if isinstance(v, (int, float, str, bool)) or v is None},
    }
    write_json(metrics_path, metrics)
    log.info("base %s: %d parameters, test perplexity %.2f", b.name, metrics["parameters"], metrics["test_perplexity"])
    return metrics
