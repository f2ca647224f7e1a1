"""DP-Flat (Chen et al.): flatness-aware DP prefix tuning, as library functions on top of
:func:`empriv.models.adaptations.dp_step`. Spec: ``specs/user-level-dp-and-dp-flat.md`` B1–B5, B7.
Not wired into the pipeline.

Three components, each a switch of :class:`DPFlatConfig`:

**Within-layer (AWP, spec B2).** During the first E steps the DP gradient is taken at w + v and applied
to w (Eq. 1: w ← (w + v) − η∇_{w+v}L(w + v) − v). Per weight block l (one prefix layer's columns of a
flat prefix table, otherwise one parameter tensor),

    v_l = γ · ‖w_l‖ · g_l / ‖g_l‖        (v_l = 0 where ‖g_l‖ = 0)

where g is, in the ``published`` variant, the mean un-clipped, un-noised gradient of the batch at w
(the paper adds noise "only ... to the final gradient"): v touches private data without noise and is
not covered by the guarantee (:data:`AWP_PUBLISHED_CAVEAT` is recorded). The ``strict`` variant uses the
previous step's released noisy gradient (v = 0 at the first step): post-processing, full guarantee.

**Cross-layer (spec B3, Definition 3.2, Algorithm 1 lines 2–15).** Sharpness of prefix w on data D:

    S(w) = max_{η ∈ grid} (L(w′_η) − L(w)) / (1 + L(w)),   w′_η = w − η ∇L(w | D),  grid ⊂ [0, 1]

(η = 0 is in the grid, so S ≥ 0; ``ascent=True`` uses w + η∇L, the Keskar-style reading). Greedy
elimination: with the prefix at every layer, per round and for every remaining layer i, compute
S(w_{−i}) (Eq. 2: the prefix without layer i, the other layers' values unchanged) and permanently
delete the layer with the smallest S (first such layer on ties, as Algorithm 1's strict ``<``); stop
at ``target_layers`` layers, or (``stop_when_not_decreasing``) when the best S(w_{−i}) is not below
the current S(w). Computed at the initialisation, no training. On private data it is recorded as a
caveat (∇L(w | D) without noise); the strict variant runs it on public data.

**Cross-model KD (spec B4).** A copy w_nor (same architecture and initialisation, after layer
selection) trained non-privately with SGD (Algorithm 1 lines 16–19), and the term λ‖w − w_nor‖₂ (the
L2 norm over all trainable parameters, not squared; Eq. 3–4) whose gradient

    λ (w − w_nor) / ‖w − w_nor‖₂         (0 where w = w_nor)

is added to ``p.grad`` *after* :func:`dp_step` has replaced it with the clipped noisy sum: a
regulariser added to the loss would go through per-sample clipping and be divided by b (diluted),
and in opacus it is overwritten outright. The term depends on w and w_nor only, not on any record
beyond w_nor, so it costs no privacy budget given w_nor; w_nor trained on the private data is
recorded as a caveat (:data:`KD_PRIVATE_CAVEAT`); the strict variant trains it on public data.

Accounting (spec B7): only the T noisy steps are accounted (Poisson rate q, σ); everything listed in
``caveats`` touched private data without noise and is outside that guarantee.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from empriv.models.adaptations import PrefixEncoder, PrefixTunedLM, dp_step
from empriv.models.lm import per_sample_mean_nll

AWP_VARIANTS = ("published", "strict")
DATA_SOURCES = ("private", "public")

AWP_PUBLISHED_CAVEAT = "AWP: v computed from un-noised gradients: not covered by the DP guarantee"
ELIMINATION_PRIVATE_CAVEAT = ("layer elimination: sharpness computed from un-noised gradients of the private data: "
                              "not covered by the DP guarantee")
KD_PRIVATE_CAVEAT = "KD: w_nor trained without noise on the private data: not covered by the DP guarantee"

#: Default η grid of the sharpness (spec B3 [impl]: 11 points in [0, 1]).
DEFAULT_ETAS = tuple(i / 10 for i in range(11))


# ----------------------------------------------------------------------------- validation


def _check_real(name: str, value, *, minimum: float, strict: bool) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) \
        and (value > minimum if strict else value >= minimum)
    if not ok:
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum:g}, got {value!r}")
    return float(value)


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_choice(name: str, value, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _require_prefix(model, what: str) -> PrefixTunedLM:
    if not isinstance(model, PrefixTunedLM):
        raise ValueError(f"{what} needs a prefix-tuned model (prepare_adaptation(..., 'prefix')), "
                         f"got {type(model).__name__}")
    return model


def _trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("the model has no trainable parameters (call prepare_adaptation first)")
    return named


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
    gamma = _check_real("gamma", gamma, minimum=0.0, strict=True)
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
    lam = _check_real("kd_lambda", lam, minimum=0.0, strict=False)
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
    steps = _check_int("nor_steps", steps, 0)
    lr = _check_real("nor_lr", lr, minimum=0.0, strict=True)
    data_source = _check_choice("kd_data", data_source, DATA_SOURCES)
    if batch_size is not None:
        batch_size = _check_int("nor_batch_size", batch_size, 1)
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


def _check_etas(etas) -> tuple[float, ...]:
    values = tuple(etas)
    if not values or any(isinstance(e, bool) or not isinstance(e, numbers.Real) or not 0 <= e <= 1 for e in values):
        raise ValueError(f"etas must be a non-empty list of step sizes in [0, 1], got {list(values)!r}")
    return values


def line_sharpness(loss_fn: Callable[[], torch.Tensor], params: Sequence[torch.Tensor], *,
                   etas: Sequence[float] = DEFAULT_ETAS, ascent: bool = False) -> float:
    """Definition 3.2 approximated on the gradient line: max_η (L(w ∓ η∇L(w)) − L(w)) / (1 + L(w)), with η = 0
    always included (so ≥ 0). ``loss_fn()`` evaluates L at the current ``params`` (tensors requiring grad);
    they are restored bit-exactly afterwards."""
    etas = _check_etas(etas)
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
    _require_prefix(model, "prefix sharpness")
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
    model = _require_prefix(model, "prefix layer selection")
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
    if isinstance(target_layers, bool) or not isinstance(target_layers, numbers.Integral) \
            or not 1 <= target_layers <= len(current):
        raise ValueError(f"target_layers must be an integer in [1, {len(current)}] (the prefix's layer count), "
                         f"got {target_layers!r}")
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
    model = _require_prefix(model, "DP-Flat layer elimination")
    data_source = _check_choice("elimination_data", data_source, DATA_SOURCES)
    etas = _check_etas(etas)

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


# ----------------------------------------------------------------------------- the training loop


@dataclass(frozen=True)
class DPFlatConfig:
    """The DP-Flat switches and their settings (spec B5). All off = DP-trained prefix tuning."""

    awp: bool = False
    awp_variant: str = "published"  # "published" (v from the un-noised batch gradient) | "strict" (previous noisy one)
    awp_steps: int = 0  # E: AWP during steps 1..E (Algorithm 1's warm-up, counted in steps)
    gamma: float = 0.01  # γ: AWP radius relative to ‖w_l‖ (not given by the paper)
    layer_elimination: bool = False
    target_layers: int | None = None  # layers kept by the elimination
    elimination_data: str = "private"  # "private" (published) | "public" (strict)
    etas: tuple[float, ...] = DEFAULT_ETAS
    ascent: bool = False
    stop_when_not_decreasing: bool = False
    kd: bool = False
    kd_lambda: float = 0.01  # λ (paper: 0.01 in every experiment)
    kd_data: str = "private"  # "private" (published) | "public" (strict)
    nor_steps: int = 0  # T_nor, non-private SGD steps of w_nor
    nor_lr: float = 0.1
    nor_batch_size: int | None = None

    def validate(self, *, steps: int, n_prefix_layers: int | None) -> None:
        _check_choice("awp_variant", self.awp_variant, AWP_VARIANTS)
        _check_choice("elimination_data", self.elimination_data, DATA_SOURCES)
        _check_choice("kd_data", self.kd_data, DATA_SOURCES)
        _check_real("kd_lambda", self.kd_lambda, minimum=0.0, strict=False)
        _check_real("gamma", self.gamma, minimum=0.0, strict=True)
        e = _check_int("awp_steps", self.awp_steps, 0)
        if e > steps:
            raise ValueError(f"awp_steps (E) must be in [0, T={steps}], got {e}")
        _check_int("nor_steps", self.nor_steps, 0)
        _check_real("nor_lr", self.nor_lr, minimum=0.0, strict=True)
        _check_etas(self.etas)
        if self.layer_elimination:
            if n_prefix_layers is None:
                raise ValueError("layer_elimination needs a prefix-tuned model (method 'prefix'), got another adaptation")
            t = self.target_layers
            if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 1 <= t <= n_prefix_layers:
                raise ValueError(f"target_layers must be an integer in [1, {n_prefix_layers}] (the prefix's layer "
                                 f"count), got {t!r}")


@dataclass
class DPFlatResult:
    model: nn.Module  # the trained prefix-tuned model (restricted to the kept layers if eliminated)
    losses: list[float]  # per step: mean per-sample NLL of the batch (at w + v during AWP), NaN for empty batches
    switches: dict
    caveats: list[str]
    kept_layers: tuple[int, ...] | None
    elimination: dict | None
    kd_distances: list[float] = field(default_factory=list)  # ‖w − w_nor‖₂ per step (KD on)
    nor_losses: list[float] = field(default_factory=list)
    trainable_parameters: int = 0
    empty_batches: int = 0
    noise_multiplier: float | None = None
    sample_rate: float = 0.0
    steps: int = 0
    resumed_from_step: int | None = None  # DP steps a checkpoint had done when this run resumed (None: from 0)

    def record(self) -> dict:
        """JSON-friendly metadata of the run (no model)."""
        out = {k: getattr(self, k) for k in ("losses", "switches", "caveats", "kd_distances", "nor_losses",
                                          "trainable_parameters", "empty_batches", "noise_multiplier",
                                          "sample_rate", "steps", "elimination")}
        out["kept_layers"] = list(self.kept_layers) if self.kept_layers is not None else None
        return out


def dpflat_train(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, config: DPFlatConfig, steps: int,
                 sample_rate: float, noise_multiplier: float | None, clip_norm: float, lr: float,
                 sampler_generator: torch.Generator, noise_generator: torch.Generator | None = None,
                 nor_generator: torch.Generator | None = None,
                 public_ids: torch.Tensor | None = None, public_mask: torch.Tensor | None = None,
                 elimination_rows: torch.Tensor | None = None, checkpoint=None) -> DPFlatResult:
    """DP-Flat white-box pipeline (spec B5, Algorithm 1) on a prefix-tuned model and private data (ids, mask):

    1. (``layer_elimination``) greedy elimination on the private data or, strict, the public data;
    2. (``kd``) w_nor = w, trained ``nor_steps`` non-privately (private or public data);
    3. T = ``steps`` DP-Adam steps over Poisson batches (rate q, ``sampler_generator``): the DP gradient
       (:func:`dp_step`, clip C, σ = ``noise_multiplier``, b = q·n) at w + v for t ≤ E (``awp``), at w
       otherwise, then + λ(w − w_nor)/‖w − w_nor‖₂ (``kd``), then an Adam step (lr η).

    ``elimination_rows``: the indices of the records (of the private or the public data, as ``elimination_data``
    says) on which the layer sharpness is measured; None: all of them. ``noise_multiplier=None``: non-private
    (σ = 0, still clipped; recorded as such). Each random stream has
    its own generator (Poisson sampler, DP noise, w_nor's batches when ``nor_batch_size`` is set); a pipeline
    passes its run's streams (:class:`empriv.randomness.RunStreams`). Public data (``public_ids``/``public_mask``)
    is needed when ``elimination_data`` or ``kd_data`` is ``"public"``.

    ``checkpoint`` (:class:`empriv.train.checkpoint.Checkpointer`): every ``checkpoint.every`` DP steps, save the
    trainable weights, Adam's state, the sampler/noise streams (and the global ones), the last released gradient
    (strict AWP's direction) and the curves. A re-run with the same settings, data, starting weights and identity
    redoes the elimination and w_nor (deterministic: their own data and streams), then resumes the DP steps from
    the latest intact checkpoint, bit-identical to an uninterrupted run; the checkpoints go when the loop ends.
    """
    from empriv.train.sampling import poisson_batches

    steps = _check_int("steps", steps, 1)
    sample_rate = _check_real("sample_rate", sample_rate, minimum=0.0, strict=True)
    if sample_rate > 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if noise_multiplier is not None:
        _check_real("noise_multiplier", noise_multiplier, minimum=0.0, strict=False)
    _check_real("clip_norm", clip_norm, minimum=0.0, strict=True)
    _check_real("lr", lr, minimum=0.0, strict=True)
    prefix_layers = len(model.prefix.layers) if isinstance(model, PrefixTunedLM) else None
    config.validate(steps=steps, n_prefix_layers=prefix_layers)
    _require_prefix(model, "DP-Flat training")
    needs_public = (config.layer_elimination and config.elimination_data == "public") or \
                   (config.kd and config.nor_steps > 0 and config.kd_data == "public")
    if needs_public and (public_ids is None or public_mask is None or public_ids.shape[0] == 0):
        raise ValueError("public_ids/public_mask must hold public sequences when elimination_data or kd_data is "
                         "'public', got none")

    caveats: list[str] = []
    elimination = None
    if config.layer_elimination:
        e_ids, e_mask = (public_ids, public_mask) if config.elimination_data == "public" else (ids, mask)
        if elimination_rows is not None:
            e_ids, e_mask = e_ids[elimination_rows], e_mask[elimination_rows]
        res = eliminate_prefix_layers(model, e_ids, e_mask, target_layers=config.target_layers, etas=config.etas,
                                      ascent=config.ascent, stop_when_not_decreasing=config.stop_when_not_decreasing,
                                      data_source=config.elimination_data)
        model = res.model
        if res.caveat:
            caveats.append(res.caveat)
        elimination = {"kept": list(res.kept), "removed": res.removed, "initial_sharpness": res.initial_sharpness,
                       "final_sharpness": res.final_sharpness,
                       "rounds": [{"scores": {str(k): v for k, v in r["scores"].items()}, "removed": r["removed"]}
                                  for r in res.rounds]}

    w_nor, nor_losses = None, []
    if config.kd:
        n_ids, n_mask = (public_ids, public_mask) if config.kd_data == "public" else (ids, mask)
        copy = train_nonprivate_copy(model, n_ids, n_mask, steps=config.nor_steps, lr=config.nor_lr,
                                     batch_size=config.nor_batch_size, generator=nor_generator,
                                     data_source=config.kd_data)
        w_nor, nor_losses = copy.weights, copy.losses
        if copy.caveat and config.nor_steps > 0:
            caveats.append(copy.caveat)
    if config.awp and config.awp_steps > 0 and config.awp_variant == "published":
        caveats.append(AWP_PUBLISHED_CAVEAT)

    sigma = 0.0 if noise_multiplier is None else float(noise_multiplier)
    n = ids.shape[0]
    b = sample_rate * n
    params = [p for _, p in _trainable(model)]
    optimizer = torch.optim.Adam(params, lr=lr)
    dp = dict(clip_norm=clip_norm, noise_multiplier=sigma, generator=noise_generator, expected_batch_size=b)
    losses, distances, empty = [], [], 0
    previous_noisy: dict[str, torch.Tensor] | None = None
    generators = {"sampler": sampler_generator, "noise": noise_generator}
    start, fingerprint = 0, None
    if checkpoint is not None:
        from empriv.train.checkpoint import load_trainable_state, restore_rng, tensors_digest, trainable_digest

        fingerprint = checkpoint.fingerprint({
            "loop": "dpflat", "config": {k: (list(v) if isinstance(v, tuple) else v)
                                         for k, v in vars(config).items()},
            "n": int(n), "steps": steps, "sample_rate": sample_rate, "sigma": noise_multiplier,
            "clip_norm": clip_norm, "lr": lr, "data": tensors_digest(ids, mask),
            "kept_layers": list(model.prefix.layers), "trainable": trainable_digest(model),
            "start": tensors_digest(*(p.detach() for _, p in _trainable(model))),
            "w_nor": None if w_nor is None else tensors_digest(*w_nor.values())})
        snapshot = checkpoint.load(fingerprint)
        if snapshot is not None:
            st = snapshot.state
            if len(st["losses"]) != snapshot.step:
                raise ValueError(f"checkpoint {snapshot.path} records {len(st['losses'])} losses for "
                                 f"{snapshot.step} steps")
            load_trainable_state(model, snapshot.tensors["trainable"])
            optimizer.load_state_dict(snapshot.tensors["optimizer"])
            restore_rng(snapshot.tensors["rng"], st["rng"], generators)
            previous_noisy = snapshot.tensors.get("previous_noisy")
            if previous_noisy is not None:
                previous_noisy = {k: v.to(ids.device) for k, v in previous_noisy.items()}
            losses, distances, empty = list(st["losses"]), list(st["kd_distances"]), int(st["empty_batches"])
            start = snapshot.step
    batches = poisson_batches(n, sample_rate, steps - start, sampler_generator) if start < steps else iter(())
    for t, batch in enumerate(batches, start=start + 1):
        bi, bm = ids[batch], mask[batch]
        empty += int(batch.numel() == 0)
        optimizer.zero_grad(set_to_none=True)
        if config.awp and t <= config.awp_steps:
            if config.awp_variant == "published":
                g = unnoised_batch_gradient(model, bi, bm)
            else:
                g = previous_noisy if previous_noisy is not None else {n_: torch.zeros_like(p) for n_, p in
                                                                       _trainable(model)}
            v = awp_perturbation(model, g, config.gamma)
            stats = perturbed_dp_step(model, bi, bm, v, **dp)
        else:
            stats = dp_step(model, bi, bm, **dp)
        previous_noisy = {n_: p.grad.detach().clone() for n_, p in _trainable(model)}  # the released gradient
        if config.kd:
            distances.append(add_kd_gradient(model, w_nor, config.kd_lambda))
        optimizer.step()
        losses.append(float(stats.losses.mean()) if stats.losses.numel() else float("nan"))
        if checkpoint is not None and checkpoint.due(t, steps):
            from empriv.train.checkpoint import capture_rng, trainable_state as saved_trainable

            rng_tensors, rng_state = capture_rng(generators)
            tensors = {"trainable": saved_trainable(model), "optimizer": optimizer.state_dict(), "rng": rng_tensors}
            if previous_noisy is not None:
                tensors["previous_noisy"] = {k: v.detach().cpu() for k, v in previous_noisy.items()}
            checkpoint.save(t, fingerprint, tensors, {"losses": losses, "kd_distances": distances,
                                                      "empty_batches": empty, "rng": rng_state})
    if checkpoint is not None and checkpoint.clear_on_completion:
        checkpoint.clear()

    switches = {"awp": config.awp, "awp_variant": config.awp_variant, "awp_steps": config.awp_steps,
                "gamma": config.gamma, "layer_elimination": config.layer_elimination,
                "target_layers": config.target_layers, "elimination_data": config.elimination_data,
                "kd": config.kd, "kd_lambda": config.kd_lambda, "kd_data": config.kd_data,
                "nor_steps": config.nor_steps, "private": noise_multiplier is not None}
    return DPFlatResult(model=model, losses=losses, switches=switches, caveats=caveats,
                        kept_layers=tuple(model.prefix.layers), elimination=elimination, kd_distances=distances,
                        nor_losses=nor_losses, trainable_parameters=sum(p.numel() for p in params),
                        empty_batches=empty, noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps,
                        resumed_from_step=start or None)
