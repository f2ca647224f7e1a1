"""Fine-tuning methods: which parameters train, and how they are saved.

- ``full``: every parameter of the base trains.
- ``lora``: low-rank adapters (peft) on ``train.lora.target_modules``; only they train.

GPT-2's ``Conv1D`` layers are converted to ``nn.Linear`` (same function, transposed weight) before
training, so opacus uses its fast per-sample-gradient hooks instead of a generic fallback; they
are converted back before a full model is saved, so saved weights load as a normal GPT-2.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

METHODS = ("full", "lora")


def _swap(model: nn.Module, predicate, make) -> int:
    count = 0
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if predicate(child):
                setattr(module, child_name, make(child))
                count += 1
    return count


def conv1d_to_linear(model: nn.Module) -> int:
    """Replace every HF ``Conv1D`` (y = x W + b, W: [in, out]) by an equivalent ``nn.Linear``."""
    from transformers.pytorch_utils import Conv1D

    def make(c: nn.Module) -> nn.Linear:
        n_in, n_out = c.weight.shape
        lin = nn.Linear(n_in, n_out, bias=True, device=c.weight.device, dtype=c.weight.dtype)
        with torch.no_grad():
            lin.weight.copy_(c.weight.t())
            lin.bias.copy_(c.bias)
        return lin

    return _swap(model, lambda m: isinstance(m, Conv1D), make)


def linear_to_conv1d(model: nn.Module, names: tuple[str, ...] = ("c_attn", "c_proj", "c_fc")) -> int:
    """Inverse of :func:`conv1d_to_linear` for GPT-2 blocks (only the Linear layers named in ``names``)."""
    from transformers.pytorch_utils import Conv1D

    def make(lin: nn.Linear) -> nn.Module:
        c = Conv1D(lin.out_features, lin.in_features)
        with torch.no_grad():
            c.weight.copy_(lin.weight.t())
            c.bias.copy_(lin.bias)
        return c.to(lin.weight.device)

    swapped = 0
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if child_name in names and type(child) is nn.Linear:
                setattr(module, child_name, make(child))
                swapped += 1
    return swapped


def prepare_for_finetuning(model: nn.Module, method: str, lora=None) -> nn.Module:
    """Convert Conv1D layers and set up ``method``; returns the model to train."""
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
        target_modules=list(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def save_finetuned(model: nn.Module, method: str, directory: str | Path) -> None:
    """Save full weights (as a standard GPT-2) or the LoRA adapter, as safetensors."""
    if method == "full":
        linear_to_conv1d(model)
        model.save_pretrained(str(directory), safe_serialization=True)
        conv1d_to_linear(model)
    else:
        model.save_pretrained(str(directory), safe_serialization=True)


def load_finetuned(directory: str | Path, base_directory: str | Path) -> nn.Module:
    """Load what :func:`save_finetuned` wrote: a full model, or base + LoRA adapter merged."""
    from empriv.models.registry import load_model

    directory = Path(directory)
    if (directory / "adapter_config.json").exists():
        from peft import PeftModel

        base = load_model(base_directory)
        conv1d_to_linear(base)
        model = PeftModel.from_pretrained(base, str(directory)).merge_and_unload()
        model.eval()
        return model
    return load_model(directory)
