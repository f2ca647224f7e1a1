"""Fused kernels for the training and scoring passes: the same functions as the modules they replace, in fewer
passes over memory (results equal to float rounding; tests/models/test_kernels.py checks values and gradients).

- :class:`WeightedTokenNLL`: Σ_t w_t · (−log softmax(z_t)[y_t]) per sample; its backward writes
  w_t·(softmax(z_t) − onehot(y_t)) straight into one new tensor (exp of the saved log-softmax, scaled, minus w_t at
  the targets). PyTorch's ``cross_entropy`` backward first fills a zero tensor of the logits' size, scatters into
  it, then runs the log-softmax backward over two such tensors: on the tiny GPT-2 (vocabulary 2,048, 64 tokens)
  the loss was ~20 % of a training step.
- :func:`fuse_activations`: GPT-2's ``gelu_new`` (``NewGELUActivation``: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))
  written as six tensor operations, each a pass over the activations, forward and backward) becomes
  ``F.gelu(x, approximate="tanh")``, the same formula as one kernel. The saved config still says ``gelu_new``:
  a saved model loads and computes the same function anywhere.

benchmarks/dp_step.py measures the step with both against the step without (``--kernels plain``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class WeightedTokenNLL(torch.autograd.Function):
    """``(logits [N, L, V] float, targets [N, L] int64, weights [N, L]) → Σ_t weights·NLL [N]``; no gradient
    to ``targets`` or ``weights``."""

    @staticmethod
    def forward(ctx, logits, targets, weights):
        log_probs = torch.log_softmax(logits, -1)
        nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(log_probs, targets, weights)
        return (nll * weights).sum(-1)

    @staticmethod
    def backward(ctx, grad_out):
        log_probs, targets, weights = ctx.saved_tensors
        coef = (weights * grad_out.unsqueeze(-1)).unsqueeze(-1)
        grad = log_probs.exp().mul_(coef)  # softmax · w, then − w at each target
        grad.scatter_add_(-1, targets.unsqueeze(-1), -coef)
        return grad, None, None


def weighted_token_nll(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-sample Σ_t weights[:, t] · (−log p(targets[:, t] | logits[:, t])) with the fused backward."""
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or weights.shape != targets.shape:
        raise ValueError(f"logits must be [N, L, V] with targets and weights [N, L], got {list(logits.shape)}, "
                         f"{list(targets.shape)} and {list(weights.shape)}")
    return WeightedTokenNLL.apply(logits, targets, weights.to(logits.dtype))


class TanhGELU(nn.Module):
    """``gelu_new`` as one kernel (``F.gelu(x, approximate="tanh")``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


def fuse_activations(model: nn.Module) -> int:
    """Replace every ``NewGELUActivation`` (GPT-2's ``gelu_new``) of ``model`` by :class:`TanhGELU`; returns how
    many. Other activations are left as they are."""
    count = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child).__name__ == "NewGELUActivation":
                setattr(module, name, TanhGELU())
                count += 1
    return count
