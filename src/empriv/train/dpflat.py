"""DP-Flat (Chen et al.): flatness-aware DP prefix tuning — the training loop (:func:`dpflat_train`) over the three
components of :mod:`empriv.train.flatness`. Spec: ``specs/user-level-dp-and-dp-flat.md`` B1–B5, B7. The pipeline
trains it for a prefix-tuned ``cube.method`` with any ``train.dpflat`` switch on (:mod:`empriv.train.finetune`).

Three components, each a switch of :class:`empriv.config.DPFlatParams` (``train.dpflat``, the one definition of
the settings and their defaults):

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

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from empriv.checks import require_int, require_real
from empriv.config import DPFlatParams
from empriv.models.adaptations import PrefixTunedLM, dp_step
from empriv.train.checkpoint import trainable_named
from empriv.train.flatness import (
    AWP_PUBLISHED_CAVEAT,
    DEFAULT_ETAS,
    add_kd_gradient,
    awp_perturbation,
    check_etas,
    eliminate_prefix_layers,
    perturbed_dp_step,
    require_prefix,
    train_nonprivate_copy,
    unnoised_batch_gradient,
)

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


def check_dpflat(config: DPFlatParams, *, steps: int, n_prefix_layers: int | None) -> None:
    """What :class:`~empriv.config.DPFlatParams` cannot check alone: E ≤ T and the kept layers within the prefix's."""
    require_int("awp_steps", config.awp_steps, 0, steps, meaning="E, at most T")
    if config.layer_elimination:
        if n_prefix_layers is None:
            raise ValueError("layer_elimination needs a prefix-tuned model (method 'prefix'), got another adaptation")
        require_int("target_layers", config.target_layers, 1, n_prefix_layers,
                    meaning="at most the prefix's layer count")


def dpflat_train(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, config: DPFlatParams, steps: int,
                 sample_rate: float, noise_multiplier: float | None, clip_norm: float, lr: float,
                 sampler_generator: torch.Generator, noise_generator: torch.Generator | None = None,
                 nor_generator: torch.Generator | None = None,
                 public_ids: torch.Tensor | None = None, public_mask: torch.Tensor | None = None,
                 elimination_rows: torch.Tensor | None = None, checkpoint=None, etas: Sequence[float] = DEFAULT_ETAS,
                 ascent: bool = False, stop_when_not_decreasing: bool = False) -> DPFlatResult:
    """DP-Flat white-box pipeline (spec B5, Algorithm 1) on a prefix-tuned model and private data (ids, mask), with
    the switches and settings of ``config`` (``train.dpflat``; ``nor_steps`` counts only with ``kd`` on):

    1. (``layer_elimination``) greedy elimination on the private data or, strict, the public data;
    2. (``kd``) w_nor = w, trained ``nor_steps`` non-privately (private or public data);
    3. T = ``steps`` DP-Adam steps over Poisson batches (rate q, ``sampler_generator``): the DP gradient
       (:func:`dp_step`, clip C, σ = ``noise_multiplier``, b = q·n) at w + v for t ≤ E (``awp``), at w
       otherwise, then + λ(w − w_nor)/‖w − w_nor‖₂ (``kd``), then an Adam step (lr η).

    ``elimination_rows``: the indices of the records (of the private or the public data, as ``elimination_data``
    says) on which the layer sharpness is measured; None: all of them (``config.elimination_samples`` is the
    caller's to draw). ``etas``, ``ascent``, ``stop_when_not_decreasing``: the sharpness of the elimination
    (:func:`eliminate_prefix_layers`). ``noise_multiplier=None``: non-private
    (σ = 0, still clipped; recorded as such). Each random stream has
    its own generator (Poisson sampler, DP noise, w_nor's batches when ``nor_batch_size`` is set); a pipeline
    passes its run's streams (:class:`empriv.randomness.RunStreams`). Public data (``public_ids``/``public_mask``)
    is needed when ``elimination_data`` or ``kd_data`` is ``"public"``.

    The DP steps run in :class:`empriv.train.loop.DPLoop` over :class:`~empriv.train.sampling.RecordSampling`.
    ``checkpoint`` (:class:`empriv.train.checkpoint.Checkpointer`): every ``checkpoint.every`` DP steps, save the
    trainable weights, Adam's state, the sampler/noise streams (and the global ones), the last released gradient
    (strict AWP's direction) and the curves. A re-run with the same settings, data, starting weights and identity
    redoes the elimination and w_nor (deterministic: their own data and streams), then resumes the DP steps from
    the latest intact checkpoint, bit-identical to an uninterrupted run; the checkpoints go when the loop ends.
    """
    from empriv.train.checkpoint import load_trainable_state, tensors_digest, trainable_digest
    from empriv.train.checkpoint import trainable_state as saved_trainable
    from empriv.train.loop import DPLoop
    from empriv.train.sampling import RecordSampling

    steps = require_int("steps", steps, 1)
    sample_rate = require_real("sample_rate", sample_rate, gt=0, le=1)
    if noise_multiplier is not None:
        require_real("noise_multiplier", noise_multiplier, ge=0)
    require_real("clip_norm", clip_norm, gt=0)
    require_real("lr", lr, gt=0)
    check_etas(etas)
    check_dpflat(config, steps=steps, n_prefix_layers=len(model.prefix.layers) if isinstance(model, PrefixTunedLM)
                 else None)
    require_prefix(model, "DP-Flat training")
    nor_steps = config.nor_steps if config.kd else 0
    needs_public = (config.layer_elimination and config.elimination_data == "public") or \
                   (nor_steps > 0 and config.kd_data == "public")
    if needs_public and (public_ids is None or public_mask is None or public_ids.shape[0] == 0):
        raise ValueError("public_ids/public_mask must hold public sequences when elimination_data or kd_data is "
                         "'public', got none")

    caveats: list[str] = []
    elimination = None
    if config.layer_elimination:
        e_ids, e_mask = (public_ids, public_mask) if config.elimination_data == "public" else (ids, mask)
        if elimination_rows is not None:
            e_ids, e_mask = e_ids[elimination_rows], e_mask[elimination_rows]
        res = eliminate_prefix_layers(model, e_ids, e_mask, target_layers=config.target_layers, etas=etas,
                                      ascent=ascent, stop_when_not_decreasing=stop_when_not_decreasing,
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
        copy = train_nonprivate_copy(model, n_ids, n_mask, steps=nor_steps, lr=config.nor_lr,
                                     batch_size=config.nor_batch_size, generator=nor_generator,
                                     data_source=config.kd_data)
        w_nor, nor_losses = copy.weights, copy.losses
        if copy.caveat and nor_steps > 0:
            caveats.append(copy.caveat)
    if config.awp and config.awp_steps > 0 and config.awp_variant == "published":
        caveats.append(AWP_PUBLISHED_CAVEAT)

    def trainable() -> list:  # of the model being trained (after the elimination, if any)
        return trainable_named(model, what="call prepare_adaptation first")

    sigma = 0.0 if noise_multiplier is None else float(noise_multiplier)
    n = ids.shape[0]
    b = sample_rate * n
    params = [p for _, p in trainable()]
    optimizer = torch.optim.Adam(params, lr=lr)
    dp = dict(clip_norm=clip_norm, noise_multiplier=sigma, generator=noise_generator, expected_batch_size=b)
    loop = DPLoop(sampling=RecordSampling(n, sample_rate), steps=steps, curves=("losses", "kd_distances"),
                  checkpoint=checkpoint, facts={
                      "loop": "dpflat", "config": config.model_dump(mode="json"), "nor_steps": nor_steps,
                      "sharpness": [list(etas), ascent, stop_when_not_decreasing],
                      "n": int(n), "steps": steps, "sample_rate": sample_rate, "sigma": noise_multiplier,
                      "clip_norm": clip_norm, "lr": lr, "data": tensors_digest(ids, mask),
                      "kept_layers": list(model.prefix.layers), "trainable": trainable_digest(model),
                      "start": tensors_digest(*(p.detach() for _, p in trainable())),
                      "w_nor": None if w_nor is None else tensors_digest(*w_nor.values())})
    released: dict[str, dict[str, torch.Tensor] | None] = {"gradient": None}  # the last released (noisy) gradient
    snapshot = loop.resume_point()
    if snapshot is not None:
        load_trainable_state(model, snapshot.tensors["trainable"])
        optimizer.load_state_dict(snapshot.tensors["optimizer"])
        previous = snapshot.tensors.get("previous_noisy")
        released["gradient"] = None if previous is None else {k: v.to(ids.device) for k, v in previous.items()}

    def step(t: int, batch: torch.Tensor) -> dict:  # t counts from 0, Algorithm 1's steps from 1
        bi, bm = ids[batch], mask[batch]
        optimizer.zero_grad(set_to_none=True)
        if config.awp and t + 1 <= config.awp_steps:
            if config.awp_variant == "published":
                g = unnoised_batch_gradient(model, bi, bm)
            else:
                g = released["gradient"] if released["gradient"] is not None else \
                    {n_: torch.zeros_like(p) for n_, p in trainable()}
            v = awp_perturbation(model, g, config.gamma)
            stats = perturbed_dp_step(model, bi, bm, v, **dp)
        else:
            stats = dp_step(model, bi, bm, **dp)
        released["gradient"] = {n_: p.grad.detach().clone() for n_, p in trainable()}
        values = {"losses": float(stats.losses.mean()) if stats.losses.numel() else float("nan")}
        if config.kd:
            values["kd_distances"] = add_kd_gradient(model, w_nor, config.kd_lambda)
        optimizer.step()
        return values

    def tensors() -> dict:
        out = {"trainable": saved_trainable(model), "optimizer": optimizer.state_dict()}
        if released["gradient"] is not None:
            out["previous_noisy"] = {k: v.detach().cpu() for k, v in released["gradient"].items()}
        return out

    loop.run(step, generators={"sampler": sampler_generator, "noise": noise_generator}, tensors=tensors)
    switches = {"awp": config.awp, "awp_variant": config.awp_variant, "awp_steps": config.awp_steps,
                "gamma": config.gamma, "layer_elimination": config.layer_elimination,
                "target_layers": config.target_layers, "elimination_data": config.elimination_data,
                "kd": config.kd, "kd_lambda": config.kd_lambda, "kd_data": config.kd_data,
                "nor_steps": nor_steps, "private": noise_multiplier is not None}
    return DPFlatResult(model=model, losses=loop.curves["losses"], switches=switches, caveats=caveats,
                        kept_layers=tuple(model.prefix.layers), elimination=elimination,
                        kd_distances=loop.curves["kd_distances"], nor_losses=nor_losses,
                        trainable_parameters=sum(p.numel() for p in params), empty_batches=loop.empty,
                        noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps,
                        resumed_from_step=loop.resumed_from_step)
