"""The three flatness components of DP-Flat (Chen et al.), as library functions on top of
:func:`empriv.models.adaptations.dp_step`; :mod:`empriv.train.dpflat` trains with them (the formulas, the caveats and
the accounting are in its docstring). Spec: ``specs/user-level-dp-and-dp-flat.md`` B2–B4.

- within-layer: :func:`weight_blocks`, :func:`unnoised_batch_gradient`, :func:`awp_perturbation`,
  :func:`perturbed_dp_step` (AWP);
- cross-model: :func:`add_kd_gradient`, :func:`train_nonprivate_copy` (KD toward w_nor);
- cross-layer: :func:`line_sharpness`, :func:`prefix_sharpness`, :func:`restrict_prefix_layers`,
  :func:`greedy_elimination`, :func:`eliminate_prefix_layers` (sharpness-guided layer elimination).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from empriv.checks import require_int, require_real
from empriv.models.adaptations import PrefixEncoder, PrefixTunedLM, dp_step
from empriv.models.lm import per_sample_mean_nll
from empriv.train.checkpoint import trainable_named

AWP_VARIANTS = ("published", "strict")
DATA_SOURCES = ("private", "public")

AWP_PUBLISHED_CAVEAT = "AWP: v computed from un-noised gradients: not covered by the DP guarantee"
ELIMINATION_PRIVATE_CAVEAT = ("layer elimination: sharpness computed from un-noised gradients of the private data: "
                              "not covered by the DP guarantee")
KD_PRIVATE_CAVEAT = "KD: w_nor trained without noise on the private data: not covered by the DP guarantee"

#: Default η grid of the sharpness (spec B3 [impl]: 11 points in [0, 1]).
DEFAULT_ETAS = tuple(i / 10 for i in range(11))


# ----------------------------------------------------------------------------- validation


def check_choice(name: str, value, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def require_prefix(model, what: str) -> PrefixTunedLM:
    if not isinstance(model, PrefixTunedLM):
        raise ValueError(f"{what} needs a prefix-tuned model (prepare_adaptation(..., 'prefix')), "
                         f"got {type(model).__name__}")
    return model


def _trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return trainable_named(model, what="call prepare_adaptation first")


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of the trainable parameters, by name (w, or w_nor)."""
    return {n: p.detach().clone() for n, p in _trainable(model)}


# ----------------------------------------------------------------------------- within-layer: AWP


def weight_blocks(model: nn.Module) -> list[tuple[str, slice | None]]:
    """The blocks l over which AWP normalises: (parameter name, column slice or None for the whole tensor).

    A flat prefix table [P, n_sel·2·kv·hd] is split into its n_sel layers' column blocks (spec B2: "per
    layer" = per prefix layer); every other trainable tensor (reparameterisation MLP, prompt, head) is one block.
    """
    blocks = []
    encoders = {name: m for name, m in model.named_modules() if isinstance(m, PrefixEncoder)}
    for name, p in _trainable(model):
        owner = name.rsplit(".", 2)[0] if name.endswith("table.weight") else None
        enc = encoders.get(owner) if owner is not None else None
        if enc is not None and not enc.reparameterize:
            width = 2 * enc.kv_heads * enc.head_dim
            blocks.extend((name, slice(j * width, (j + 1) * width)) for j in range(len(enc.layers)))
        else:
            blocks.append((name, None))
    return blocks


def unnoised_batch_gradient(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """g = ∇_w mean_i ℓ(w; x_i): the batch's raw gradient (no clipping, no noise); ``p.grad`` is left as it was.

    An empty batch gives zeros. Private data through this function is NOT covered by the DP guarantee.
    """
    named = _trainable(model)
    if ids.shape[0] == 0:
        return {n: torch.zeros_like(p) for n, p in named}
    was_training = model.training
    model.train()
    try:
        loss = per_sample_mean_nll(model, ids, mask).mean()
        grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    finally:
        model.train(was_training)
    return {n: (g.detach() if g is not None else torch.zeros_like(p)) for (n, p), g in zip(named, grads)}


def awp_perturbation(model: nn.Module, gradient: dict[str, torch.Tensor], gamma: float) -> dict[str, torch.Tensor]:
    """v with v_l = γ·‖w_l‖·g_l/‖g_l‖ per block l of :func:`weight_blocks` (v_l = 0 where ‖g_l‖ = 0)."""
    gamma = require_real("gamma", gamma, gt=0)
    params = dict(_trainable(model))
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    for name, cols in weight_blocks(model):
        if name not in gradient:
            raise ValueError(f"gradient has no entry for trainable parameter {name!r}")
        w = params[name].detach()
        g = gradient[name].to(w)
        if cols is not None:
            w, g = w[:, cols], g[:, cols]
        g_norm = g.norm()
        if float(g_norm) == 0.0:
            continue
        block = gamma * w.norm() * g / g_norm
        if cols is None:
            v[name] = block
        else:
            v[name][:, cols] = block
    return v


@torch.no_grad()
def _shift(params: dict[str, nn.Parameter], delta: dict[str, torch.Tensor]) -> None:
    for n, p in params.items():
        p.add_(delta[n])


def perturbed_dp_step(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, v: dict[str, torch.Tensor], **dp_kwargs):
    """:func:`dp_step` at w + v, with w restored bit-exactly afterwards: ``p.grad`` = the DP gradient at w + v
    (spec B2 Eq. 1: it is applied to w). ``dp_kwargs``: ``clip_norm``, ``noise_multiplier``, ``generator``,
    ``expected_batch_size``. Returns dp_step's stats (losses at w + v)."""
    params = dict(_trainable(model))
    saved = {n: p.detach().clone() for n, p in params.items()}
    _shift(params, v)
    try:
        return dp_step(model, ids, mask, **dp_kwargs)
    finally:
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(saved[n])


# ----------------------------------------------------------------------------- cross-model: KD


def add_kd_gradient(model: nn.Module, w_nor: dict[str, torch.Tensor], lam: float) -> float:
    """Add ∇_w λ‖w − w_nor‖₂ = λ(w − w_nor)/‖w − w_nor‖₂ to ``p.grad`` (call AFTER :func:`dp_step`).

    The norm is over all trainable parameters together; where w = w_nor nothing is added (subgradient 0).
    A parameter without ``.grad`` gets the term as its gradient. Returns ‖w − w_nor‖₂.
    """
    lam = require_real("kd_lambda", lam, ge=0)
    named = _trainable(model)
    missing = [n for n, _ in named if n not in w_nor]
    if missing:
        raise ValueError(f"w_nor has no entry for trainable parameter(s) {missing}")
    diffs = {n: p.detach() - w_nor[n].to(p) for n, p in named}
    norm = float(torch.sqrt(sum((d.double() ** 2).sum() for d in diffs.values())))
    if lam == 0.0 or norm == 0.0:
        return norm
    for n, p in named:
        term = lam * diffs[n] / norm
        p.grad = term.clone() if p.grad is None else p.grad + term
    return norm


@dataclass
class NonPrivateCopy:
    """w_nor: the trainable weights after ``steps`` of non-private SGD from the model's current w."""

    weights: dict[str, torch.Tensor]
    losses: list[float]
    data_source: str
    caveat: str | None


def train_nonprivate_copy(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, steps: int, lr: float,
                          batch_size: int | None = None, generator: torch.Generator | None = None,
                          data_source: str = "private") -> NonPrivateCopy:
    """Algorithm 1 lines 16–19: w_nor = w, then ``steps`` of w_nor ← w_nor − η∇L(D | w_nor) (plain SGD,
    full batch or uniformly drawn batches of ``batch_size``). The model's own w is restored afterwards.

    ``data_source`` says what ``ids`` are: ``"private"`` (published variant; :data:`KD_PRIVATE_CAVEAT`
    recorded) or ``"public"`` (strict variant).
    """
    steps = require_int("nor_steps", steps, 0)
    lr = require_real("nor_lr", lr, gt=0)
    data_source = check_choice("kd_data", data_source, DATA_SOURCES)
    if batch_size is not None:
        batch_size = require_int("nor_batch_size", batch_size, 1)
    if steps and ids.shape[0] == 0:
        raise ValueError("train_nonprivate_copy needs at least one sequence, got 0")
    params = dict(_trainable(model))
    saved = {n: p.detach().clone() for n, p in params.items()}
    losses = []
    was_training = model.training
    model.train()
    try:
        for _ in range(steps):
            if batch_size is None or batch_size >= ids.shape[0]:
                bi, bm = ids, mask
            else:
                pick = torch.randperm(ids.shape[0], generator=generator)[:batch_size]
                bi, bm = ids[pick], mask[pick]
            loss = per_sample_mean_nll(model, bi, bm).mean()
            grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
            with torch.no_grad():
                for p, g in zip(params.values(), grads):
                    if g is not None:
                        p.sub_(lr * g)
            losses.append(float(loss.detach()))
        weights = {n: p.detach().clone() for n, p in params.items()}
    finally:
        model.train(was_training)
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(saved[n])
    return NonPrivateCopy(weights=weights, losses=losses, data_source=data_source,
                          caveat=KD_PRIVATE_CAVEAT if data_source == "private" else None)


# ----------------------------------------------------------------------------- cross-layer: sharpness, elimination


def check_etas(etas) -> tuple[float, ...]:
    values = tuple(etas)
    if not values or any(isinstance(e, bool) or not isinstance(e, numbers.Real) or not 0 <= e <= 1 for e in values):
        raise ValueError(f"etas must be a non-empty list of step sizes in [0, 1], got {list(values)!r}")
    return values


def line_sharpness(loss_fn: Callable[[], torch.Tensor], params: Sequence[torch.Tensor], *,
                   etas: Sequence[float] = DEFAULT_ETAS, ascent: bool = False) -> float:
    """Definition 3.2 approximated on the gradient line: max_η (L(w ∓ η∇L(w)) − L(w)) / (1 + L(w)), with η = 0
    always included (so ≥ 0). ``loss_fn()`` evaluates L at the current ``params`` (tensors requiring grad);
    they are restored bit-exactly afterwards."""
    etas = check_etas(etas)
    params = list(params)
    base_loss = loss_fn()
    grads = torch.autograd.grad(base_loss, params, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g.detach() for p, g in zip(params, grads)]
    l0 = float(base_loss.detach())
    sign = 1.0 if ascent else -1.0
    saved = [p.detach().clone() for p in params]
    worst = 0.0
    try:
        for eta in etas:
            with torch.no_grad():
                for p, w, g in zip(params, saved, grads):
                    p.copy_(w + sign * eta * g)
                worst = max(worst, float(loss_fn()) - l0)
    finally:
        with torch.no_grad():
            for p, w in zip(params, saved):
                p.copy_(w)
    return worst / (1.0 + l0)


def prefix_sharpness(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *,
                     etas: Sequence[float] = DEFAULT_ETAS, ascent: bool = False) -> float:
    """S(w) of a prefix-tuned model's trainable prefix on (ids, mask): L = the mean per-sample NLL over all of it."""
    require_prefix(model, "prefix sharpness")
    if ids.shape[0] == 0:
        raise ValueError("prefix sharpness needs at least one sequence, got 0")
    params = [p for _, p in _trainable(model)]
    was_training = model.training
    model.train()
    try:
        return line_sharpness(lambda: per_sample_mean_nll(model, ids, mask).mean(), params, etas=etas, ascent=ascent)
    finally:
        model.train(was_training)


def restrict_prefix_layers(model: nn.Module, keep: Sequence[int]) -> PrefixTunedLM:
    """w restricted to layers ``keep`` (a subset of the prefix's layers), the kept layers' values unchanged.

    A new :class:`PrefixTunedLM` on the same (shared, frozen) base with a new encoder: flat prefixes keep
    their layers' table columns; a reparameterised prefix keeps its embedding and first Linear and the
    rows of its output Linear that produce the kept layers.
    """
    model = require_prefix(model, "prefix layer selection")
    enc = model.prefix
    keep = tuple(sorted(set(int(k) for k in keep)))
    if not keep or any(k not in enc.layers for k in keep):
        raise ValueError(f"keep must be a non-empty subset of the prefix's layers {list(enc.layers)}, got {list(keep)}")
    width = 2 * enc.kv_heads * enc.head_dim
    cols = torch.cat([torch.arange(enc.layers.index(k) * width, (enc.layers.index(k) + 1) * width) for k in keep])
    ref = next(enc.parameters())
    if enc.reparameterize:
        hidden, embed_dim = enc.mlp[0].out_features, enc.embedding.weight.shape[1]
    else:
        hidden, embed_dim = 1, 1
    new = PrefixEncoder(enc.n_virtual, keep, enc.kv_heads, enc.head_dim, reparameterize=enc.reparameterize,
                        hidden=hidden, embed_dim=embed_dim).to(device=ref.device, dtype=ref.dtype)
    with torch.no_grad():
        if enc.reparameterize:
            new.embedding.weight.copy_(enc.embedding.weight)
            new.mlp[0].load_state_dict(enc.mlp[0].state_dict())
            new.mlp[2].weight.copy_(enc.mlp[2].weight[cols.to(ref.device)])
            new.mlp[2].bias.copy_(enc.mlp[2].bias[cols.to(ref.device)])
        else:
            new.table.weight.copy_(enc.table.weight[:, cols.to(ref.device)])
    new.train(enc.training)
    out = PrefixTunedLM(model.base, new)
    out.train(model.training)
    return out


def greedy_elimination(layers: Sequence[int], sharpness_of: Callable[[tuple[int, ...]], float], *,
                       target_layers: int, stop_when_not_decreasing: bool = False) -> "EliminationResult":
    """Algorithm 1 lines 2–15 over any score: from ``layers``, per round remove the layer i whose removal gives
    the smallest ``sharpness_of(layers − {i})`` (first on ties), until ``target_layers`` remain (or, with
    ``stop_when_not_decreasing``, until the best score is not below the current set's)."""
    current = tuple(sorted(int(i) for i in layers))
    require_int("target_layers", target_layers, 1, len(current), meaning="at most the prefix's layer count")
    current_score = sharpness_of(current)
    initial = current_score
    rounds = []
    while len(current) > target_layers:
        scores = {i: sharpness_of(tuple(j for j in current if j != i)) for i in current}
        best_layer, best = None, math.inf
        for i in current:  # Algorithm 1: strict "<" keeps the first layer on ties
            if scores[i] < best:
                best_layer, best = i, scores[i]
        if stop_when_not_decreasing and not best < current_score:
            rounds.append({"scores": scores, "removed": None})
            break
        rounds.append({"scores": scores, "removed": best_layer})
        current = tuple(j for j in current if j != best_layer)
        current_score = best
    return EliminationResult(kept=current, removed=[r["removed"] for r in rounds if r["removed"] is not None],
                             rounds=rounds, initial_sharpness=initial, final_sharpness=current_score)


@dataclass
class EliminationResult:
    kept: tuple[int, ...]
    removed: list[int]  # in order of removal
    rounds: list[dict]  # per round: {"scores": {layer i: S(w_-i)}, "removed": layer or None (stopped)}
    initial_sharpness: float
    final_sharpness: float
    model: PrefixTunedLM | None = None
    data_source: str = "private"
    caveat: str | None = None


def eliminate_prefix_layers(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, target_layers: int,
                            etas: Sequence[float] = DEFAULT_ETAS, ascent: bool = False,
                            stop_when_not_decreasing: bool = False, data_source: str = "private") -> EliminationResult:
    """Sharpness-guided greedy elimination of prefix layers on (ids, mask) (spec B3); ``result.model`` is the
    prefix restricted to ``result.kept`` (same base). ``data_source``: ``"private"`` (published; caveat
    recorded) or ``"public"`` (strict variant)."""
    model = require_prefix(model, "DP-Flat layer elimination")
    data_source = check_choice("elimination_data", data_source, DATA_SOURCES)
    etas = check_etas(etas)

    def score(keep: tuple[int, ...]) -> float:
        return prefix_sharpness(restrict_prefix_layers(model, keep), ids, mask, etas=etas, ascent=ascent)

    result = greedy_elimination(model.prefix.layers, score, target_layers=target_layers,
                                stop_when_not_decreasing=stop_when_not_decreasing)
    result.model = restrict_prefix_layers(model, result.kept)
    for p in result.model.base.parameters():
        p.requires_grad_(False)
    result.data_source = data_source
    result.caveat = ELIMINATION_PRIVATE_CAVEAT if data_source == "private" else None
    return result
