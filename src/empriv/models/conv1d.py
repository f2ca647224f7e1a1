"""GPT-2's ``Conv1D`` layers ↔ ``nn.Linear`` (same function, transposed weight).

Converted before training, so opacus uses its fast per-sample-gradient hooks instead of a generic fallback; converted
back before a full model is saved, so saved weights load as a normal GPT-2.
"""

from __future__ import annotations

import torch
from torch import nn


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
