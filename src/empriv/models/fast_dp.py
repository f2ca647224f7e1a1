"""A fast exact DP-SGD gradient: per-sample norms by ghost norms or explicit per-sample gradients, the
clipped sum in the same backward pass ("book-keeping"), no padding waste.

What one step computes is exactly what :mod:`empriv.train.dp` computes with opacus' ``GradSampleModule`` and
``DPOptimizer``: every example's gradient g_i of its own loss (default: its mean token NLL,
:func:`empriv.models.lm.per_sample_mean_nll`), clipped by opacus' factor c_i = min(1, C / (‖g_i‖ + 10⁻⁶)),
summed, plus N(0, σ²C²) per coordinate, divided by the expected batch size b:

    p.grad = (Σ_i c_i g_i + N(0, σ²C²·I)) / b          for every trainable p.

The noise is one ``torch.normal(0, σC, p.shape, dtype=p.dtype, generator=generator)`` per trainable parameter,
in ``model.parameters()`` order (none when σC = 0), the draws opacus' ``DPOptimizer.add_noise`` makes: with the
same generator state the two steps agree up to float rounding.

How it is cheaper than opacus' hooks
------------------------------------
During the step every module that owns a trainable parameter runs through a small custom autograd function
(its ``forward`` is replaced on the instance for the duration of the step, then restored). The backward pass
of such a function computes only the gradient of its *input*; instead of the summed gradient of its
parameters it records, per example i, the layer's input a_i [T, d_in] and the gradient of its output
g_i [T, d_out] (T positions of the sequence). So the backward pass costs what a non-private one costs minus
the parameter-gradient products, and nothing is hooked per example. After the backward pass, for each
trainable parameter:

- ``nn.Linear`` weight: the per-example gradient is G_i = g_iᵀ a_i [d_out, d_in]. Its squared norm is either
  computed from G_i materialised for the whole micro-batch (one batched matmul, T·d_in·d_out per example;
  the clipped sum is then Σ_i c_i G_i, a cheap weighted sum), or by the *ghost norm*
  ‖g_iᵀ a_i‖² = Σ_{t,s} (a_t·a_s)(g_t·g_s), T²·(d_in + d_out) per example and only [T, T] of memory;
  the clipped sum is then one matmul (c ⊙ g)ᵀ a over all B·T positions — the matmul a non-private backward
  does anyway, with each example's rows scaled by its clip factor (no second backward pass).
  The choice is per parameter, by an operation count of the two (T after trimming), under a memory cap
  on the materialised per-example gradients (``max_explicit_elements``).
- ``nn.Embedding`` weight: G_i = Σ_t e_{x_t} g_tᵀ; ‖G_i‖² = Σ_{t,s} [x_t = x_s] (g_t·g_s) (ghost), or G_i
  materialised [V, d] by scattering the rows (small tables such as GPT-2's position embeddings).
- a bias, a LayerNorm or RMSNorm weight/bias: Σ_t g_t or Σ_t x̂_t ⊙ g_t, materialised (they are small).
- a *tied* weight (GPT-2 and SmolLM2 share the input embedding table and the LM head): the per-example
  gradient is the sum over its uses, G_i = G_i^head + G_i^emb, and its norm is not the sum of the uses'
  norms. Materialised, the uses are added into one per-example tensor. As ghost norms,
  ‖G^head + G^emb‖² = ‖G^head‖² + ‖G^emb‖² + 2⟨G^head, G^emb⟩ with the cross term
  ⟨gᵀa, Σ_t e_{x_t} eᵀ_t⟩ = Σ_{t,s} g_s[x_t] (a_s·e_t) (e_t: gradient reaching the embedding output at t),
  and likewise for two linear uses (Σ_{t,s} (a_t·a'_s)(g_t·g'_s)) or two embedding uses.
- LoRA (peft): the adapters' A and B are ``nn.Linear`` layers and are treated as such; frozen layers run
  untouched (their input gradient flows through autograd as usual).

All materialised per-example gradients of a micro-batch are written side by side into one [B, K] buffer (K: the
sizes of their parameters together), kept per model and reused by every micro-batch and step: the squared norms
are one reduction over it and the clipped sum of all of them one matrix-vector product cᵀ[G]. This arithmetic runs
without autograd (the recorded activations require grad).

A trainable parameter owned by any other kind of module is a ``ValueError`` naming the module. Every recorded
layer must see batch-first inputs (dimension 0 = the example): a layer fed a tensor shared by the whole batch
(e.g. position ids of shape [1, L] broadcast over the batch) cannot be split by example and is a ``ValueError``.

Padding
-------
With right padding and a causal model, the columns after a micro-batch's longest record carry no loss
and cannot influence earlier positions: :func:`trim_padding` cuts them before the forward pass (the losses
and gradients are unchanged up to float rounding; the tests check it). Records are also grouped into
micro-batches by length (``sort_by_length``), so short records share short micro-batches; each
example's loss, norm and clip factor is returned in the order the batch was given.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

import torch
from torch import nn

from empriv.checks import require_int, require_real
from empriv.models.recording import (  # noqa: F401  (re-exported)
    _HF_RMSNORM_NAMES,
    _recording,
    _Tape,
    unsupported_modules,
)

MODES = ("auto", "ghost", "explicit")


@dataclass(frozen=True)
class FastDPStats:
    """What one :func:`fast_dp_step` computed from the batch (un-noised: for monitoring, not release)."""

    losses: torch.Tensor  # [B] each example's loss
    per_sample_norms: torch.Tensor  # [B] ‖g_i‖ over all trainable parameters, before clipping
    clip_factors: torch.Tensor  # [B] min(1, C / (‖g_i‖ + 1e-6))
    explicit: tuple[str, ...] = ()  # trainable parameters whose per-example gradients were materialised
    ghost: tuple[str, ...] = ()  # trainable parameters whose norms came from ghost norms


# ----------------------------------------------------------------------------- padding


def trim_padding(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut right padding: keep the columns up to the last position any record's ``mask`` marks as a loss token.

    Exact for right-padded batches on causal models (what :func:`empriv.models.lm.encode_fixed` builds):
    a position's prediction depends only on earlier positions, and nothing after the last loss token is
    scored. At least two columns are kept (one next-token prediction), never more than given.
    """
    if ids.dim() != 2 or tuple(ids.shape) != tuple(mask.shape):
        raise ValueError(f"ids and mask must both be [B, L], got {list(ids.shape)} and {list(mask.shape)}")
    if ids.shape[0] == 0:
        return ids, mask
    used = torch.nonzero((mask != 0).any(dim=0))
    width = int(used.max()) + 1 if used.numel() else 0
    width = min(max(width, 2), ids.shape[1])
    return ids[:, :width], mask[:, :width]


def record_lengths(mask: torch.Tensor) -> torch.Tensor:
    """Per record: one past its last loss position (0 for a record without loss tokens)."""
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return ((mask != 0) * positions).amax(dim=1) if mask.shape[1] else torch.zeros(mask.shape[0], dtype=torch.long)



# ----------------------------------------------------------------------------- norms and clipped sums

#: Per model: one flat buffer the materialised per-example gradients are written into, reused by every micro-batch
#: and step (a fresh 10-100 MB tensor per micro-batch cost page faults: kernel time of the order of the clipping
#: itself on the tiny GPT-2). Freed with the model.
_BUFFERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _per_example_buffer(model: nn.Module, batch: int, width: int, dtype, device) -> torch.Tensor:
    """A [batch, width] tensor (contents undefined) backed by the model's reused buffer."""
    need = batch * width
    buf = _BUFFERS.get(model)
    if buf is None or buf.numel() < need or buf.dtype != dtype or buf.device != torch.device(device):
        buf = torch.empty(need, dtype=dtype, device=device)
        _BUFFERS[model] = buf
    return buf[:need].view(batch, width)


def _width(use: tuple) -> int:
    kind = use[0]
    if kind == "lin":
        return use[1].shape[-1] + use[2].shape[-1]
    return use[-1].shape[-1]


def _explicit_cheaper(uses: list[tuple], numel: int) -> bool:
    """Operation count per example: materialising G_i (and reading it for norm and sum) vs ghost norms
    (all pairs of uses) plus the clipped-sum products the ghost path computes afterwards."""
    explicit = 3 * numel
    ghost = 0
    for use in uses:
        if use[0] == "lin":
            t, d_in, d_out = use[1].shape[1], use[1].shape[-1], use[2].shape[-1]
            explicit += t * d_in * d_out
            ghost += t * d_in * d_out
        else:
            ghost += use[1].shape[1] * use[2].shape[-1]
    for j, u in enumerate(uses):
        for v in uses[j:]:
            ghost += u[-1].shape[1] * v[-1].shape[1] * (_width(u) + _width(v)) // 2
    return explicit <= ghost


def _as(t: torch.Tensor, dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


def _materialise(uses: list[tuple], param: torch.Tensor, batch: int, out: torch.Tensor) -> None:
    """Write each example's gradient of ``param``, summed over its uses, into ``out`` [B, numel] (a column block
    of the step's per-example gradient buffer: rows are examples, so the block is strided, never copied)."""
    dtype = out.dtype
    first = True
    for use in sorted(uses, key=lambda u: u[0] == "emb"):  # a dense use first: it initialises ``out``
        kind = use[0]
        if kind == "emb":
            ids, g = use[1], _as(use[2], dtype)
            if first:
                out.zero_()
            rows = torch.arange(batch, device=ids.device).unsqueeze(1).expand_as(ids)
            out.view(batch, param.shape[0], g.shape[-1]).index_put_((rows, ids), g, accumulate=True)
        elif kind == "lin":
            a, g = _as(use[1], dtype), _as(use[2], dtype)
            block = out.view(batch, g.shape[-1], a.shape[-1])
            if first:
                torch.bmm(g.transpose(1, 2), a, out=block)
            else:
                block.baddbmm_(g.transpose(1, 2), a)
        else:
            part = _as(use[1], dtype).sum(1) if kind == "sum" else (_as(use[1], dtype) * _as(use[2], dtype)).sum(1)
            if first:
                out.copy_(part)
            else:
                out.add_(part)
        first = False


def _inner(u: tuple, v: tuple, dtype) -> torch.Tensor:
    """[B]: ⟨G_i(u), G_i(v)⟩ for two uses ('lin' or 'emb') of one parameter, from their [T, ·] factors."""
    if u[0] == "emb" and v[0] == "lin":
        u, v = v, u
    if u[0] == "lin" and v[0] == "lin":
        aa = torch.bmm(_as(u[1], dtype), _as(v[1], dtype).transpose(1, 2))
        gg = torch.bmm(_as(u[2], dtype), _as(v[2], dtype).transpose(1, 2))
        return (aa * gg).sum((1, 2))
    if u[0] == "lin":  # linear (a, g: output row = vocabulary index) with embedding (ids, e)
        a, g = _as(u[1], dtype), _as(u[2], dtype)
        ids, e = v[1], _as(v[2], dtype)
        picked = torch.gather(g, 2, ids.unsqueeze(1).expand(-1, g.shape[1], -1))  # [B, s, t] = g_s[x_t]
        return (picked * torch.bmm(a, e.transpose(1, 2))).sum((1, 2))
    same = (u[1].unsqueeze(2) == v[1].unsqueeze(1)).to(dtype)
    return (same * torch.bmm(_as(u[2], dtype), _as(v[2], dtype).transpose(1, 2))).sum((1, 2))


def _ghost_sq_norm(uses: list[tuple], dtype) -> torch.Tensor:
    total = None
    for j, u in enumerate(uses):
        for k in range(j, len(uses)):
            term = _inner(u, uses[k], dtype)
            term = term if k == j else 2 * term
            total = term if total is None else total + term
    return total.clamp(min=0)


def _ghost_clipped_sum(uses: list[tuple], param: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    dtype = param.dtype
    out = torch.zeros(param.shape, dtype=dtype, device=param.device)
    c = factors.to(dtype).view(-1, 1, 1)
    for use in uses:
        if use[0] == "lin":
            a, g = _as(use[1], dtype), _as(use[2], dtype)
            out += (g * c).reshape(-1, g.shape[-1]).t().matmul(a.reshape(-1, a.shape[-1]))
        else:  # emb
            g = _as(use[2], dtype)
            out.index_add_(0, use[1].reshape(-1), (g * c).reshape(-1, g.shape[-1]))
    return out


# ----------------------------------------------------------------------------- the step


def fast_dp_step(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, clip_norm: float,
                 noise_multiplier: float, expected_batch_size: float, generator: torch.Generator | None,
                 micro_batch_size: int | None = None, trim: bool = True, sort_by_length: bool = True,
                 mode: str = "auto", max_explicit_elements: int = 1 << 25, forward_context=None,
                 per_sample_loss=None) -> FastDPStats:
    """One DP-SGD gradient over the batch (``ids``, ``mask``: [B, L]); leaves (Σ_i c_i g_i + noise) / b in ``p.grad``.

    ``micro_batch_size``: examples per forward/backward pass (None: all at once); the clipped sums of the
    micro-batches add up and the noise is drawn once. ``trim`` cuts each micro-batch's right padding
    (:func:`trim_padding`); ``sort_by_length`` groups records of similar length into micro-batches.
    ``mode``: "auto" chooses per parameter (operation count, memory cap ``max_explicit_elements`` on all
    materialised per-example gradients of a micro-batch together), "ghost" uses ghost norms wherever
    possible (linear and embedding weights), "explicit" materialises every per-example gradient.
    ``forward_context``: a callable returning a context manager the forward pass runs in (e.g. bf16
    autocast); per-example factors are cast to the parameters' dtype before norms and sums.
    ``per_sample_loss(model, ids, mask) -> [B]``: default :func:`empriv.models.lm.per_sample_mean_nll`.

    The model's train/eval mode is left as it is (the caller sets it). An empty batch gives noise / b.
    Returns the examples' losses, gradient norms and clip factors in the batch's order.
    """
    require_real("clip_norm", clip_norm, gt=0)
    require_real("noise_multiplier", noise_multiplier, ge=0)
    require_real("expected_batch_size", expected_batch_size, gt=0)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if micro_batch_size is not None:
        require_int("micro_batch_size", micro_batch_size, 1, meaning="None: the whole batch at once")
    if ids.dim() != 2 or tuple(ids.shape) != tuple(mask.shape):
        raise ValueError(f"ids and mask must both be [B, L], got {list(ids.shape)} and {list(mask.shape)}")
    if per_sample_loss is None:
        from empriv.models.lm import per_sample_mean_nll as per_sample_loss
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("the model has no trainable parameters")
    device = named[0][1].device
    n = ids.shape[0]
    summed = {id(p): torch.zeros(p.shape, dtype=p.dtype, device=p.device) for _, p in named}
    losses = torch.zeros(n, dtype=torch.float32)  # re-typed to the loss function's dtype below
    norms = torch.zeros(n, dtype=named[0][1].dtype)
    factors = torch.zeros(n, dtype=named[0][1].dtype)
    explicit_names, ghost_names = set(), set()
    if n:
        order = torch.argsort(record_lengths(mask), stable=True) if sort_by_length else torch.arange(n)
        step = n if micro_batch_size is None else micro_batch_size
        for start in range(0, n, step):
            rows = order[start:start + step]
            b_ids, b_mask = ids[rows], mask[rows]
            if trim:
                b_ids, b_mask = trim_padding(b_ids, b_mask)
            b_ids, b_mask = b_ids.to(device), b_mask.to(device)
            tape = _Tape()
            with _recording(model, tape), (forward_context() if forward_context else contextlib.nullcontext()):
                b_losses = per_sample_loss(model, b_ids, b_mask)
            b_losses.sum().backward()
            b_norms, b_factors = _clip_and_accumulate(model, named, tape, len(rows), clip_norm, mode,
                                                      max_explicit_elements, summed, explicit_names, ghost_names)
            if start == 0:
                losses = losses.to(b_losses.dtype)
            losses[rows] = b_losses.detach().to(losses.dtype).cpu()
            norms[rows] = b_norms.detach().to(norms.dtype).cpu()
            factors[rows] = b_factors.detach().to(factors.dtype).cpu()
    std = float(noise_multiplier) * float(clip_norm)
    for _, p in named:
        grad = summed[id(p)]
        if std > 0:  # opacus DPOptimizer's draw: one normal per parameter, its dtype, in parameters() order
            grad = grad + torch.normal(mean=0, std=std, size=p.shape, device=p.device, generator=generator,
                                       dtype=p.dtype)
        p.grad = (grad / expected_batch_size).view_as(p)
    return FastDPStats(losses=losses, per_sample_norms=norms, clip_factors=factors,
                       explicit=tuple(nm for nm, _ in named if nm in explicit_names),
                       ghost=tuple(nm for nm, _ in named if nm in ghost_names))


@torch.no_grad()
def _clip_and_accumulate(model, named, tape: _Tape, batch: int, clip_norm: float, mode: str, cap: int, summed: dict,
                         explicit_names: set, ghost_names: set) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example norms and clip factors of one micro-batch; adds its clipped sum into ``summed``.

    Runs without autograd: the recorded layer inputs still require grad (they are the forward pass's
    activations), and a graph built from them here would hang off every ``p.grad`` until it is released.
    Materialised per-example gradients go into one [B, K] buffer (K: their parameters' sizes together), so
    their norms are one reduction and their clipped sum one matrix-vector product."""
    dtype = named[0][1].dtype
    device = named[0][1].device
    sq = torch.zeros(batch, dtype=dtype, device=device)
    explicit_plans = []  # (param, uses, offset)
    ghost_plans = []  # (param, uses)
    width = 0
    budget = cap
    for name, p in named:
        uses = tape.uses.get(id(p))
        if not uses:  # not used by this forward: zero gradient
            continue
        seen = {u[-1].shape[0] for u in uses}
        if seen != {batch}:
            raise ValueError(f"fast DP step: parameter {name!r} saw inputs whose first dimension is {sorted(seen)}, "
                             f"not the micro-batch's {batch} examples: every layer must see batch-first inputs "
                             f"(e.g. pass "
                             f"position_ids of shape [B, L], not [1, L])")
        ghostable = all(u[0] in ("lin", "emb") for u in uses)
        size = batch * p.numel()
        if not ghostable:
            explicit = True
        elif mode == "ghost":
            explicit = False
        elif mode == "explicit":
            explicit = True
        else:
            explicit = size <= budget and _explicit_cheaper(uses, p.numel())
        if explicit:
            budget -= size
            explicit_plans.append((p, uses, width))
            width += p.numel()
            explicit_names.add(name)
        else:
            ghost_plans.append((p, uses))
            ghost_names.add(name)
    per_example = None
    if explicit_plans:
        per_example = _per_example_buffer(model, batch, width, dtype, device)
        for p, uses, offset in explicit_plans:
            _materialise(uses, p, batch, per_example[:, offset:offset + p.numel()])
        sq += torch.linalg.vector_norm(per_example, dim=1).pow(2)
    for p, uses in ghost_plans:
        sq += _ghost_sq_norm(uses, p.dtype).to(dtype)
    norms = sq.sqrt()
    factors = (clip_norm / (norms + 1e-6)).clamp(max=1.0)
    if per_example is not None:
        clipped = torch.mv(per_example.t(), factors.to(dtype))
        for p, _, offset in explicit_plans:
            summed[id(p)] += _as(clipped[offset:offset + p.numel()].view(p.shape), p.dtype)
    for p, uses in ghost_plans:
        summed[id(p)] += _ghost_clipped_sum(uses, p, factors)
    tape.uses.clear()
    return norms, factors
