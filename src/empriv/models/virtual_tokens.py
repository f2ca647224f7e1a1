"""Virtual tokens: a trainable table [P, W] broadcast over the batch (the prefix's and the soft prompt's
parameters), and its opacus per-sample-gradient rule.

Each sample's output is the table itself, so the per-sample gradient of the table is exactly the gradient that
flowed into that sample's copy (opacus' "backprops"); :func:`register_grad_samplers` registers that rule (once).
Used by :mod:`empriv.models.prefix`, :mod:`empriv.models.prompt` and DPZero's soft prompt; :class:`FrozenBaseLM` is
what the prefix- and prompt-tuned wrappers of a frozen base share.
"""

from __future__ import annotations

import torch
from torch import nn


class VirtualTokens(nn.Module):
    """A trainable table [P, W], returned broadcast to [B, P, W] for a batch of B samples.

    ``forward(batch)`` reads only ``batch.shape[0]`` (any batch-first tensor: token ids or embeddings);
    the opacus grad sampler registered for this class returns, for sample i, the gradient that reached
    sample i's copy of the table — its exact per-sample gradient.
    """

    def __init__(self, n_virtual: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_virtual, width))

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.weight.unsqueeze(0).expand(batch.shape[0], -1, -1)


def _virtual_tokens_grad_sample(layer: VirtualTokens, activations, backprops: torch.Tensor) -> dict:
    if not layer.weight.requires_grad:
        return {}
    return {layer.weight: backprops}


_registered = False


def register_grad_samplers() -> None:
    """Register :class:`VirtualTokens`' per-sample-gradient rule with opacus (idempotent)."""
    global _registered
    if _registered:
        return
    from opacus.grad_sample.utils import register_grad_sampler

    register_grad_sampler(VirtualTokens)(_virtual_tokens_grad_sample)
    _registered = True


def random_token_ids(vocab_size: int, n: int, init_seed: int | None) -> torch.Tensor:
    """``n`` vocabulary ids drawn uniformly (seeded by ``init_seed`` without touching torch's global state; None:
    the global state): the tokens whose activations or embeddings initialise a prefix or a soft prompt."""
    generator = None if init_seed is None else torch.Generator().manual_seed(init_seed)
    return torch.randint(0, vocab_size, (n,), generator=generator)


class FrozenBaseLM(nn.Module):
    """A frozen causal LM ``base`` under a wrapper that adds trainable virtual tokens (the prefix- and prompt-tuned
    LMs): the wrapper answers for the base's ``config`` and input embeddings. A subclass registers its trainable
    module after ``super().__init__(base)``, so the base's parameters come first in ``named_parameters()``."""

    def __init__(self, base: nn.Module):
        super().__init__()
        self.base = base

    @property
    def config(self):
        return self.base.config

    def get_input_embeddings(self) -> nn.Module:
        return self.base.get_input_embeddings()
