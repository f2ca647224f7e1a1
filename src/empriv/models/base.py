"""Building the tokenizer and the base model from objects (the stages are empriv.pipeline.tokenizer/base)."""

from __future__ import annotations

import logging
from pathlib import Path

from empriv.config import ConfigError, Params

log = logging.getLogger("empriv.base")


def tokenizer_for(params: Params, public_texts: list[str] | None):
    """The BPE trained on ``public_texts`` (tiny-gpt2), GPT-2's BPE, or a pre-trained base's own tokenizer."""
    from empriv.models.registry import is_pretrained
    from empriv.models.tokenizer import build_tokenizer, load_pretrained_tokenizer

    if is_pretrained(params.base.name):
        return load_pretrained_tokenizer(params.base.name)
    kind = "bpe" if params.tokenizer.kind == "auto" else params.tokenizer.kind
    if public_texts is None:
        raise ValueError(f"tokenizer kind {kind!r} is built from the public split: pass its texts")
    return build_tokenizer(kind, public_texts, params.tokenizer.vocab_size)


def write_pretrained_base(params: Params, out_dir: Path, tokenizer) -> tuple[object, dict]:
    """Write a pre-trained base into ``out_dir`` as fp32 safetensors; returns (model, facts for the metrics).
    SmolLM2 is checked for sanity (perplexity on plain English, "... France is" → Paris)."""
    import torch

    from empriv.models.registry import hf_from_pretrained, load_model

    name = params.base.name
    if name == "smollm2-135m":
        from empriv.models.smollm2 import build_smollm2

        facts = build_smollm2(out_dir)
    else:
        from transformers import AutoModelForCausalLM

        hf = hf_from_pretrained(AutoModelForCausalLM, name, what="weights", dtype=torch.float32)
        hf.save_pretrained(str(out_dir), safe_serialization=True)
        facts = {"source": name, "architecture": hf.config.model_type}
    model = load_model(out_dir)
    if name == "smollm2-135m":
        from transformers import AutoTokenizer

        from empriv.models.smollm2 import sanity_check

        check = sanity_check(model, AutoTokenizer.from_pretrained(str(out_dir)))
        facts.update(sanity_perplexity=check["perplexity"], sanity_completion=check["completion"])
    vocab = model.get_input_embeddings().weight.shape[0]
    if vocab < tokenizer.vocab_size:
        raise ConfigError(f"base.name {name!r}: the model has {vocab} token embeddings but its tokenizer "
                          f"{tokenizer.vocab_size} tokens (rebuild the tokenizer: dvc repro tokenizer)")
    return model, facts


def pretrain_tiny_base(params: Params, tokenizer, public_texts: list[str], device) -> tuple[object, list[float]]:
    """tiny-gpt2 built for ``tokenizer`` and pre-trained on ``public_texts``; returns (model on the CPU, losses)."""
    from empriv.models.lm import encode_fixed
    from empriv.models.registry import build_tiny_gpt2, pretrain

    b = params.base
    pub_ids, pub_mask = encode_fixed(tokenizer.encode_batch(public_texts), tokenizer.eos_id, b.seq_len)
    model = build_tiny_gpt2(b, tokenizer.vocab_size, tokenizer.eos_id)
    losses = pretrain(model, pub_ids, pub_mask, b, device)
    return model.to("cpu"), losses
