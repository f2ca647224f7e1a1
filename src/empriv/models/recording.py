"""The recording forward of the fast DP step (:mod:`empriv.models.fast_dp`): custom autograd functions for
``nn.Linear``, ``nn.Embedding``, GPT-2's ``Conv1D`` and the affine part of LayerNorm/RMSNorm record, per trainable
parameter, the activations and output gradients one backward pass sees (a :class:`_Tape`), from which the step
computes per-example norms and clipped sums; :func:`unsupported_modules` names what it cannot record."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

#: RMSNorm classes of transformers with LlamaRMSNorm's forward (float32 normalisation, then weight · x̂).
_HF_RMSNORM_NAMES = frozenset({"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm"})

class _Tape:
    """Per trainable parameter (by id): the uses recorded in one backward pass."""

    def __init__(self):
        self.uses: dict[int, list[tuple]] = {}

    def add(self, param, use: tuple) -> None:
        if param is not None and param.requires_grad:
            self.uses.setdefault(id(param), []).append(use)


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, tape):
        ctx.tape = tape
        ctx.weight_ref, ctx.bias_ref = weight, bias
        ctx.save_for_backward(x, weight)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        grad_x = g.matmul(weight.to(g.dtype)) if ctx.needs_input_grad[0] else None
        batch = g.shape[0]
        g3 = g.reshape(batch, -1, g.shape[-1])
        ctx.tape.add(ctx.weight_ref, ("lin", x.reshape(batch, -1, x.shape[-1]), g3))
        ctx.tape.add(ctx.bias_ref, ("sum", g3))
        return grad_x, None, None, None


class _EmbeddingFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, padding_idx, tape):
        ctx.tape, ctx.weight_ref, ctx.padding_idx = tape, weight, padding_idx
        ctx.save_for_backward(ids)
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx, g):
        (ids,) = ctx.saved_tensors
        batch = g.shape[0]
        ids2 = ids.reshape(batch, -1)
        g3 = g.reshape(batch, -1, g.shape[-1])
        if ctx.padding_idx is not None:  # the padding row receives no gradient
            g3 = g3.masked_fill((ids2 == ctx.padding_idx).unsqueeze(-1), 0.0)
        ctx.tape.add(ctx.weight_ref, ("emb", ids2, g3))
        return None, None, None, None


class _AffineFn(torch.autograd.Function):
    """y = x̂ ⊙ w + b (a normalisation layer's elementwise affine part)."""

    @staticmethod
    def forward(ctx, xhat, weight, bias, tape):
        ctx.tape, ctx.weight_ref, ctx.bias_ref = tape, weight, bias
        ctx.save_for_backward(xhat, weight)
        out = xhat if weight is None else weight * xhat
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, g):
        xhat, weight = ctx.saved_tensors
        grad_xhat = None
        if ctx.needs_input_grad[0]:
            grad_xhat = (g if weight is None else g * weight).to(xhat.dtype)
        batch = g.shape[0]
        width = ctx.weight_ref.numel() if ctx.weight_ref is not None else ctx.bias_ref.numel()
        g3 = g.reshape(batch, -1, width)
        ctx.tape.add(ctx.weight_ref, ("mul", xhat.reshape(batch, -1, width), g3))
        ctx.tape.add(ctx.bias_ref, ("sum", g3))
        return grad_xhat, None, None, None


def _recording_forward(module: nn.Module, name: str, tape: _Tape):
    """The replacement ``forward`` of a module that owns trainable parameters (ValueError if unsupported)."""
    if type(module) is nn.Linear or isinstance(module, nn.Linear):
        def forward(x):
            return _LinearFn.apply(x, module.weight, module.bias, tape)
        return forward
    if isinstance(module, nn.Embedding):
        if module.max_norm is not None or module.scale_grad_by_freq or module.sparse:
            raise ValueError(f"fast DP step: embedding {name!r} uses max_norm/scale_grad_by_freq/sparse, "
                             f"which it does not support")

        def forward(ids):
            return _EmbeddingFn.apply(ids, module.weight, module.padding_idx, tape)
        return forward
    if isinstance(module, nn.LayerNorm):
        def forward(x):
            xhat = F.layer_norm(x, module.normalized_shape, None, None, module.eps)
            return _AffineFn.apply(xhat, module.weight, module.bias, tape)
        return forward
    if isinstance(module, nn.RMSNorm):
        def forward(x):
            xhat = F.rms_norm(x, module.normalized_shape, None, module.eps)
            return _AffineFn.apply(xhat, module.weight, None, tape)
        return forward
    if type(module).__name__ in _HF_RMSNORM_NAMES:
        def forward(x):
            dtype = x.dtype
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
            return _AffineFn.apply(h.to(dtype), module.weight, None, tape)
        return forward
    supported = ", ".join(["nn.Linear", "nn.Embedding", "nn.LayerNorm", "nn.RMSNorm", *sorted(_HF_RMSNORM_NAMES)])
    raise ValueError(f"fast DP step: module {name!r} of type {type(module).__name__} owns trainable parameters; "
                     f"supported: {supported}")


def unsupported_modules(model: nn.Module) -> list[str]:
    """Names (and types) of the modules owning a trainable parameter that :func:`fast_dp_step` cannot record (e.g.
    the virtual-token tables of prefix and prompt tuning); [] when the fast step takes the model."""
    out = []
    for name, module in model.named_modules():
        if not any(p.requires_grad for p in module.parameters(recurse=False)):
            continue
        ok = isinstance(module, (nn.Linear, nn.Embedding, nn.LayerNorm, nn.RMSNorm)) \
            or type(module).__name__ in _HF_RMSNORM_NAMES
        if isinstance(module, nn.Embedding) and (module.max_norm is not None or module.scale_grad_by_freq
                                                 or module.sparse):
            ok = False
        if not ok or "forward" in module.__dict__:
            out.append(f"{name or '<root>'} ({type(module).__name__})")
    return out


@contextlib.contextmanager
def _recording(model: nn.Module, tape: _Tape):
    patched = []
    try:
        for name, module in model.named_modules():
            if not any(p.requires_grad for p in module.parameters(recurse=False)):
                continue
            if "forward" in module.__dict__:
                raise ValueError(f"fast DP step: module {name!r} already has an instance-level forward "
                                 f"(another wrapper or hook library): cannot record it")
            module.forward = _recording_forward(module, name, tape)
            patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward

