"""Per-sample gradients of an adapted model and one DP-SGD step, checked by the tests against a naive loop.

Per-sample gradients
--------------------
The trainable prefix / prompt tensors live in :class:`~empriv.models.virtual_tokens.VirtualTokens`, a small
module whose output is its [P, W] table broadcast to [B, P, W] (B read off the batch it is given). Its opacus grad
sampler is registered in :mod:`empriv.models.virtual_tokens`: each sample's output is the table itself, so the
per-sample gradient of the table is exactly the gradient that flowed into that sample's copy (opacus' "backprops"). The reparameterised
prefix runs its MLP on the broadcast [B, P, d] embeddings, so the MLP's ``nn.Linear`` layers get their
per-sample gradients from opacus' own Linear hooks; the head is an ``nn.Linear``; LoRA and full use
opacus' hooks on the converted GPT-2 ``nn.Linear`` layers (Conv1D → Linear, :mod:`empriv.models.conv1d`). So
:func:`per_sample_gradients` is one forward and one backward through
``opacus.GradSampleModule(loss_reduction="sum")`` on the summed per-sample mean NLL
(:func:`empriv.models.lm.per_sample_mean_nll`), as :mod:`empriv.train.dp` does; modules without an
opacus grad sampler (Llama's RMSNorm under ``last_block``) fall back to opacus' functorch path.

:func:`dp_step` clips each sample's gradient over all trainable parameters to norm C with opacus'
factor min(1, C / (‖g_i‖ + 10⁻⁶)), sums, adds N(0, σ²C²) per coordinate (one ``torch.normal`` per
trainable parameter, in ``model.parameters()`` order, as opacus' ``DPOptimizer`` draws it) and divides
by the expected batch size b, leaving the result in ``p.grad``. With the same generator state it
reproduces the ``DPOptimizer`` step of :mod:`empriv.train.dp`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from empriv.models.virtual_tokens import register_grad_samplers


def _trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("the model has no trainable parameters (call prepare_adaptation first)")
    return named


def _check_batch(ids: torch.Tensor, mask: torch.Tensor) -> None:
    if ids.dim() != 2 or tuple(ids.shape) != tuple(mask.shape):
        raise ValueError(f"ids and mask must both be [B, L], got {list(ids.shape)} and {list(mask.shape)}")


def _per_sample(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor):
    """(names, params, per-sample gradients [B, *shape] per parameter, per-sample losses [B])."""
    from opacus import GradSampleModule

    from empriv.models.lm import model_device, per_sample_mean_nll

    register_grad_samplers()
    _check_batch(ids, mask)
    inner = model._module if isinstance(model, GradSampleModule) else model
    named = _trainable(inner)
    names = [n for n, _ in named]
    params = [p for _, p in named]
    if ids.shape[0] == 0:
        zeros = [torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device) for p in params]
        return names, params, zeros, torch.zeros(0)
    device = model_device(inner)
    saved = [p.grad for p in params]
    was_training = inner.training
    wrapped = not isinstance(model, GradSampleModule)
    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum") if wrapped else model
    try:
        for p in params:
            p.grad = None
            p.grad_sample = None
        inner.train()
        with warnings.catch_warnings():
            # opacus' hooks fire on modules whose input (token ids) needs no gradient: harmless.
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            losses = per_sample_mean_nll(gsm, ids.to(device), mask.to(device))
            losses.sum().backward()
        grads = [p.grad_sample.detach() for p in params]
    finally:
        inner.train(was_training)
        if wrapped:
            gsm._close()
        else:
            for p in params:
                p.grad_sample = None
        for p, g in zip(params, saved):
            p.grad = g
    return names, params, grads, losses.detach()


def per_sample_gradients(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per trainable parameter (by name): the [B, *shape] gradients of each sample's mean NLL.

    One forward/backward through opacus' ``GradSampleModule`` (``model`` may already be one), in train
    mode (restored afterwards); ``p.grad`` is left as it was. An empty batch gives [0, *shape] zeros.
    """
    names, _, grads, _ = _per_sample(model, ids, mask)
    return dict(zip(names, grads))


@dataclass(frozen=True)
class DPStepStats:
    """What one :func:`dp_step` computed from the batch (un-noised: for monitoring, not release)."""

    losses: torch.Tensor  # [B] per-sample mean NLL
    per_sample_norms: torch.Tensor  # [B] ‖g_i‖ over all trainable parameters, before clipping
    clip_factors: torch.Tensor  # [B] min(1, C / (‖g_i‖ + 1e-6))


def dp_step(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, clip_norm: float, noise_multiplier: float,
            generator: torch.Generator | None, expected_batch_size: float) -> DPStepStats:
    """One DP-SGD gradient: p.grad = (Σ_i clip_C(g_i) + N(0, σ²C²·I)) / b for every trainable p.

    g_i is sample i's gradient over all trainable parameters, clipped by opacus' factor
    min(1, C / (‖g_i‖ + 10⁻⁶)); the noise is drawn per parameter in ``model.parameters()`` order with
    ``torch.normal(0, σC, p.shape, generator=generator)`` (none drawn when σ = 0), as opacus'
    ``DPOptimizer`` does; b = ``expected_batch_size``. An empty batch gives noise / b.
    """
    from empriv.checks import require_real

    require_real("clip_norm", clip_norm, gt=0)
    require_real("noise_multiplier", noise_multiplier, ge=0)
    require_real("expected_batch_size", expected_batch_size, gt=0)
    _, params, grads, losses = _per_sample(model, ids, mask)
    n = ids.shape[0]
    if n:
        norms = torch.stack([g.reshape(n, -1).norm(2, dim=-1) for g in grads], dim=1).norm(2, dim=1)
        factors = (clip_norm / (norms + 1e-6)).clamp(max=1.0)
    else:
        norms = factors = torch.zeros(0)
    std = float(noise_multiplier) * float(clip_norm)
    for p, g in zip(params, grads):
        summed = torch.einsum("i,i...->...", factors.to(device=g.device, dtype=p.dtype), g.to(p.dtype)) if n \
            else torch.zeros_like(p)
        if std > 0:
            summed = summed + torch.normal(mean=0.0, std=std, size=tuple(p.shape), device=p.device,
                                           generator=generator, dtype=p.dtype)
        p.grad = (summed / expected_batch_size).view_as(p)
    return DPStepStats(losses=losses, per_sample_norms=norms.detach(), clip_factors=factors.detach())
