"""Full and LoRA fine-tuning: which parameters train.

- ``full``: every parameter of the base trains.
- ``lora``: low-rank adapters (peft) on ``train.lora.target_modules`` — by default the attention
  (and for GPT-2 also the MLP output) projections of the base's architecture
  (:data:`LORA_TARGET_MODULES`); only they train. Their random initialisation draws from the run's
  own ``init`` stream (:mod:`empriv.randomness`), so a LoRA run repeated gives identical weights.

GPT-2's ``Conv1D`` layers become ``nn.Linear`` first (:mod:`empriv.models.conv1d`). Saving and loading:
:mod:`empriv.models.adapters`.
"""

from __future__ import annotations

import torch
from torch import nn

from empriv.models.conv1d import conv1d_to_linear

METHODS = ("full", "lora")

# LoRA's default target modules per architecture (``config.model_type``): the attention projections
# (the research's LoRA adapts attention; GPT-2's ``c_proj`` names both the attention and the MLP output).
LORA_TARGET_MODULES = {
    "gpt2": ["c_attn", "c_proj"],
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mistral": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "qwen2": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "gemma": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "gpt_neox": ["query_key_value", "dense"],
    "opt": ["q_proj", "k_proj", "v_proj", "out_proj"],
}


def lora_target_modules(model: nn.Module, configured: list[str] | None) -> list[str]:
    """``train.lora.target_modules`` when set, else the default for the base's architecture."""
    if configured:
        return list(configured)
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type in LORA_TARGET_MODULES:
        return list(LORA_TARGET_MODULES[model_type])
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS

    if model_type in PEFT_DEFAULTS:
        return list(PEFT_DEFAULTS[model_type])
    raise ValueError(f"train.lora.target_modules is null and there is no default for architecture {model_type!r}: "
                     f"set it to the names of the linear layers to adapt (known defaults: {', '.join(sorted(LORA_TARGET_MODULES))})")


def prepare_for_finetuning(model: nn.Module, method: str, lora=None, *, init_seed: int | None = None) -> nn.Module:
    """Convert Conv1D layers and set up ``method``; returns the model to train.

    ``init_seed`` seeds the adapter's random initialisation (LoRA's A matrices) without touching
    torch's global random state; None draws from the global state (unseeded unless the caller seeded it).
    """
    if method not in METHODS:
        raise ValueError(f"train.method must be one of {', '.join(METHODS)}, got {method!r}")
    conv1d_to_linear(model)
    if method == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora_target_modules(model, lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    if init_seed is None:
        return get_peft_model(model, config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        return get_peft_model(model, config)


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
