"""Black-box DP prompt tuning with DPZero (zeroth-order; DP-Flat's black-box setting, spec B6).

Only a soft input prompt θ ∈ R^{P×d} is trained: P virtual tokens whose embeddings are prepended
to the embeddings of every sequence. The language model is queried for losses only (no
backpropagation, no access to its weights), so the method fits a model behind an API that accepts
input embeddings. Each sample's loss L_i(θ) is the mean NLL of its real tokens, with the mask
convention of :func:`empriv.models.lm.encode_fixed` (``mask[i, t] = 1`` where token t is a real
token to predict); the virtual tokens are never predicted.

One DPZero step (Eq. 5 of the DP-Flat paper, with the per-sample clipping of the DPZero reference
implementation):

1. a Poisson batch B is drawn (each record joins with probability q, as in :mod:`empriv.train.dp`);
2. a direction z ~ N(0, I) of θ's shape is drawn from its own seeded stream;
3. per sample, the central finite difference d_i = (L_i(θ + μz) − L_i(θ − μz)) / (2μ), a scalar
   estimate of the directional derivative z·∇L_i(θ) (exact when L_i is quadratic);
4. each d_i is clipped to [−C, C]; the clipped values are summed over B, one scalar Gaussian noise
   N(0, σ²C²) is added, and the result is divided by the expected batch size b = q·n:
   ĝ = (Σ_{i∈B} clip_C(d_i) + N(0, σ²C²)) / b;
5. θ ← θ − η · ĝ · z.

An empty Poisson batch still draws z and the noise, updates θ with ĝ = noise / b and counts as a
step, as DP-SGD's empty batches do. ``noise_multiplier=None`` is non-private MeZO: no clipping, no
noise, ĝ is the mean of d_i over the realised batch (an empty batch leaves θ unchanged).

Difference from the DPZero reference code (Liang137/DPZero, ``optimizers/dpzero.py``): it adds noise of
std σC to the *mean* of the clipped differences (and draws a separate noise for each parameter tensor),
so its σ is not the noise multiplier of the accountant's subsampled Gaussian mechanism. Here the noise
is added once per step to the *sum*, with std σC, exactly as empriv's DP-SGD adds it to the summed
clipped gradients; σ therefore means the same thing in both trainers.

Why the accounting is DP-SGD's
------------------------------
Per step, the only quantity computed from private records is the scalar
s = Σ_{i∈B} clip_C(d_i) + N(0, σ²C²). The direction z is drawn from a stream that depends on the seed
only (public randomness, independent of the data); θ_t depends on the data only through the earlier
released scalars; b = q·n is a public constant. Conditioned on z and θ_t, adding or removing one record
changes Σ clip_C(d_i) by at most C (its own clipped term), so s is a Gaussian mechanism with
sensitivity C and noise std σC, applied to a Poisson subsample of rate q. That is the per-step
mechanism of DP-SGD with noise multiplier σ and sample rate q: DP-SGD releases a d-dimensional sum with
L2 sensitivity C and noise σC·I, and the privacy curve of a Gaussian mechanism depends only on the
ratio of sensitivity to noise std, not on the dimension. The update θ ← θ − η(s/b)z is
post-processing of (s, z), and T steps compose adaptively exactly as DP-SGD's do. Hence
:func:`calibrate_dpzero` is :func:`empriv.privacy.accounting.calibrate_noise_multiplier` with the
same (ε, δ, q, T), and gives the same σ. The guarantee is for add/remove-one-record adjacency
(replacing a record could move the sum by 2C).

What touches private data without noise: the per-step diagnostics in :class:`DPZeroResult` (the
batch losses, the realised batch sizes, the clipped fractions) are computed from the records without
noise, as :class:`empriv.train.dp.TrainResult`'s losses are; they are for monitoring, not for release.
The trained prompt and the released scalars ĝ carry the guarantee.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from empriv.checks import require_int, require_real

log = logging.getLogger("empriv.train")

#: The stream of the public perturbation directions z (a sub-stream name of :mod:`empriv.randomness`);
#: a run also draws from "sampler" (Poisson batches), "noise" (the scalar DP noise) and "init" (the prompt).
DIRECTION_STREAM = "noise:direction"


# ----------------------------------------------------------------------------- input checks


def _check_noise_multiplier(value) -> float | None:
    if value is None:
        return None
    return require_real("noise_multiplier", value, ge=0, meaning="None: non-private MeZO")


def _check_clip_norm(value, private: bool) -> float | None:
    if value is None and not private:
        return None
    return require_real("clip_norm", value, gt=0)


# ----------------------------------------------------------------------------- soft prompt


def init_soft_prompt(model, n_prompt: int, *, token_ids=None, generator: torch.Generator | None = None) -> torch.Tensor:
    """A soft prompt [n_prompt, d] (float32, on the model's device, detached).

    ``token_ids`` (n_prompt ids): the input embeddings of those tokens (a prompt initialised from
    words). Otherwise random: i.i.d. N(0, s²) entries, s the standard deviation of the model's input
    embedding table, drawn from ``generator`` (CPU; default seed 0) so the initial prompt lives on the
    scale of real token embeddings.
    """
    n_prompt = require_int("n_prompt", n_prompt, 1)
    table = model.get_input_embeddings().weight.detach()
    if token_ids is not None:
        ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
        if ids.numel() != n_prompt:
            raise ValueError(f"token_ids must hold n_prompt={n_prompt} ids, got {ids.numel()}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= table.shape[0]):
            raise ValueError(f"token_ids must lie in [0, {table.shape[0]}) (the vocabulary), got {ids.tolist()}")
        return table[ids.to(table.device)].float().clone()
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    scale = float(table.float().std())
    prompt = torch.randn((n_prompt, table.shape[1]), generator=generator, dtype=torch.float32) * scale
    return prompt.to(table.device)


def _check_prompt(model, prompt: torch.Tensor) -> None:
    d = model.get_input_embeddings().weight.shape[1]
    if prompt.dim() != 2 or prompt.shape[0] < 1 or prompt.shape[1] != d:
        raise ValueError(f"prompt must have shape [n_prompt >= 1, {d}] (the model's embedding width), "
                         f"got {list(prompt.shape)}")


def _check_length(model, n_prompt: int, seq_len: int) -> None:
    limit = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
    if limit is not None and n_prompt + seq_len > limit:
        raise ValueError(f"n_prompt + sequence length = {n_prompt} + {seq_len} = {n_prompt + seq_len} exceeds the "
                         f"model's {limit} positions")


@torch.no_grad()
def soft_prompt_losses(model, prompt: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, *,
                       micro_batch_size: int = 64) -> torch.Tensor:
    """Per-sample loss L_i(θ) with soft prompt θ = ``prompt`` prepended: [N] float32 on the CPU.

    Each sequence's input embeddings follow the P virtual tokens (positions 0..P−1, the real tokens
    P..P+L−1); the loss is the mean NLL of the real tokens to predict (``mask[:, 1:]``), the same
    quantity :func:`empriv.models.lm.per_sample_mean_nll` computes without a prompt (a sample without
    real tokens has loss 0). Runs in ``micro_batch_size`` chunks, without gradients; the model's
    train/eval mode is left as it is (call ``model.eval()`` for a deterministic loss).
    """
    _check_prompt(model, prompt)
    micro_batch_size = require_int("micro_batch_size", micro_batch_size, 1)
    if ids.shape != mask.shape or ids.dim() != 2:
        raise ValueError(f"ids and mask must both be [N, L], got {list(ids.shape)} and {list(mask.shape)}")
    n, seq_len = ids.shape
    n_prompt = prompt.shape[0]
    _check_length(model, n_prompt, seq_len)
    if n == 0:
        return torch.zeros(0)
    embed = model.get_input_embeddings()
    device = embed.weight.device
    soft = prompt.to(device=device, dtype=embed.weight.dtype)
    positions = torch.arange(n_prompt + seq_len, device=device).unsqueeze(0)
    out = []
    for start in range(0, n, micro_batch_size):
        b_ids = ids[start:start + micro_batch_size].to(device)
        b_mask = mask[start:start + micro_batch_size, 1:].to(device=device, dtype=torch.float32)
        m = b_ids.shape[0]
        inputs = torch.cat([soft.unsqueeze(0).expand(m, -1, -1), embed(b_ids)], dim=1)
        logits = model(inputs_embeds=inputs, position_ids=positions.expand(m, -1), use_cache=False).logits
        # position P+t predicts real token t+1, for t = 0..L−2
        pred = logits[:, n_prompt:-1].float()
        nll = F.cross_entropy(pred.reshape(-1, pred.shape[-1]), b_ids[:, 1:].reshape(-1),
                              reduction="none").view(m, -1)
        out.append(((nll * b_mask).sum(1) / b_mask.sum(1).clamp(min=1.0)).cpu())
    return torch.cat(out)


# ----------------------------------------------------------------------------- the DPZero step


@dataclass(frozen=True)
class FiniteDifferences:
    """Per-sample central differences d_i = (L_i(θ+μz) − L_i(θ−μz)) / (2μ) and the two losses."""

    d: torch.Tensor  # [B] float64
    loss_plus: torch.Tensor  # [B] L_i(θ + μz)
    loss_minus: torch.Tensor  # [B] L_i(θ − μz)


def finite_differences(per_sample_loss: Callable[[torch.Tensor], torch.Tensor], theta: torch.Tensor,
                       z: torch.Tensor, mu: float) -> FiniteDifferences:
    """Evaluate ``per_sample_loss`` (θ ↦ [B] losses of the sampled batch) at θ ± μz."""
    mu = require_real("mu", mu, gt=0)
    plus = torch.as_tensor(per_sample_loss(theta + mu * z)).detach().flatten().cpu()
    minus = torch.as_tensor(per_sample_loss(theta - mu * z)).detach().flatten().cpu()
    if plus.shape != minus.shape:
        raise ValueError(f"per_sample_loss returned {plus.numel()} losses at θ+μz but {minus.numel()} at θ−μz")
    d = (plus.double() - minus.double()) / (2.0 * mu)
    return FiniteDifferences(d=d, loss_plus=plus, loss_minus=minus)


def privatize_finite_differences(d: torch.Tensor, *, clip_norm: float | None, noise_multiplier: float | None,
                                 expected_batch_size: float, generator: torch.Generator | None) -> tuple[float, float]:
    """The released scalar ĝ and the fraction of clipped samples.

    Private (``noise_multiplier`` σ not None): ĝ = (Σ_i clip_C(d_i) + N(0, σ²C²)) / b, with
    clip_C(x) = min(max(x, −C), C) and b = ``expected_batch_size``; the noise is drawn from
    ``generator`` even when ``d`` is empty. Non-private (σ None, MeZO): ĝ = mean(d_i) over the realised
    batch, no clipping (0 for an empty batch; ``clip_norm`` is ignored and the clipped fraction is 0).
    """
    sigma = _check_noise_multiplier(noise_multiplier)
    d = torch.as_tensor(d, dtype=torch.float64).flatten()
    if sigma is None:
        return (float(d.mean()) if d.numel() else 0.0), 0.0
    c = require_real("clip_norm", clip_norm, gt=0)
    b = require_real("expected_batch_size", expected_batch_size, gt=0)
    clipped = d.clamp(-c, c)
    fraction = float((d.abs() > c).double().mean()) if d.numel() else 0.0
    noise = float(torch.randn((), generator=generator, dtype=torch.float64)) * sigma * c
    return (float(clipped.sum()) + noise) / b, fraction


@dataclass(frozen=True)
class DPZeroStep:
    """Facts of one step. ``loss`` is the batch mean of (L_i(θ+μz) + L_i(θ−μz)) / 2, which equals L(θ)
    up to O(μ²) and costs no extra forward pass (nan for an empty batch); un-noised, for monitoring."""

    loss: float
    batch_size: int
    clipped_fraction: float
    projected_gradient: float  # ĝ, the released scalar


def dpzero_step(per_sample_loss: Callable[[torch.Tensor], torch.Tensor], theta: torch.Tensor, *,
                learning_rate: float, mu: float, clip_norm: float | None, noise_multiplier: float | None,
                expected_batch_size: float, direction_generator: torch.Generator,
                noise_generator: torch.Generator | None) -> tuple[torch.Tensor, DPZeroStep]:
    """One DPZero (σ not None) or MeZO (σ None) step; returns (new θ, facts). ``theta`` is not modified.

    ``per_sample_loss(θ')`` returns the losses [B] of the sampled batch at θ' (B may be 0). z ~ N(0, I)
    of θ's shape is drawn (float32, on the CPU) from ``direction_generator`` every step, the noise from
    ``noise_generator`` (private steps only); then θ − η·ĝ·z.
    """
    lr = require_real("learning_rate", learning_rate, gt=0)
    mu = require_real("mu", mu, gt=0)
    sigma = _check_noise_multiplier(noise_multiplier)
    c = _check_clip_norm(clip_norm, sigma is not None)
    z = torch.randn(tuple(theta.shape), generator=direction_generator, dtype=torch.float32)
    z = z.to(device=theta.device, dtype=theta.dtype)
    fd = finite_differences(per_sample_loss, theta, z, mu)
    g_hat, fraction = privatize_finite_differences(fd.d, clip_norm=c, noise_multiplier=sigma,
                                                   expected_batch_size=expected_batch_size, generator=noise_generator)
    bsz = int(fd.d.numel())
    loss = float(((fd.loss_plus.double() + fd.loss_minus.double()) / 2).mean()) if bsz else math.nan
    new_theta = theta if (sigma is None and bsz == 0) else theta - lr * g_hat * z
    return new_theta, DPZeroStep(loss=loss, batch_size=bsz, clipped_fraction=fraction, projected_gradient=g_hat)


# ----------------------------------------------------------------------------- accounting


def calibrate_dpzero(epsilon, delta, sample_rate, steps, accountant="prv", *, tolerance=1e-3, cache=None):
    """Smallest σ for which T DPZero steps at sample rate q meet (ε, δ): a
    :class:`empriv.privacy.accounting.Calibration`.

    The released scalar per step is a Poisson-subsampled Gaussian mechanism with sensitivity C and
    noise std σC (module docstring), the mechanism of one DP-SGD step; so this is DP-SGD's calibration
    with the same arguments, and returns the same σ.
    """
    from empriv.privacy.accounting import calibrate_noise_multiplier

    return calibrate_noise_multiplier(epsilon, delta, sample_rate, steps, accountant, tolerance=tolerance, cache=cache)


def dpzero_epsilon(noise_multiplier, sample_rate, steps, delta, accountant="prv") -> float:
    """ε upper bound at δ of T DPZero steps with noise multiplier σ and sample rate q: the accountant on
    :func:`empriv.privacy.events.dpzero_event` (DP-SGD's event; KD's θ_nor is not counted here)."""
    from empriv.privacy.accounting import epsilon_of
    from empriv.privacy.events import dpzero_event

    return epsilon_of(dpzero_event(noise_multiplier, sample_rate, steps), delta, accountant)


# ----------------------------------------------------------------------------- training loop


@dataclass
class DPZeroResult:
    """What a DPZero / MeZO prompt-tuning run did. ``losses``, ``batch_sizes`` and ``clipped_fractions``
    are un-noised per-step diagnostics (module docstring); ``projected_gradients`` are the released ĝ."""

    n_prompt: int
    trainable_parameters: int  # n_prompt · d
    steps: int
    sample_rate: float  # q
    expected_batch_size: float  # b = q · n
    learning_rate: float  # η
    mu: float  # μ, the perturbation scale
    clip_norm: float | None  # C (None: non-private MeZO without clipping)
    noise_multiplier: float | None  # σ (None: non-private MeZO)
    private: bool  # σ > 0 (σ = 0 clips without noise: no guarantee)
    sampler: str = "poisson"
    losses: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    clipped_fractions: list[float] = field(default_factory=list)
    projected_gradients: list[float] = field(default_factory=list)
    empty_batches: int = 0
    wall_time_s: float = 0.0
    streams: dict = field(default_factory=dict)
    resumed_from_step: int | None = None  # steps a checkpoint had done when this run resumed (None: from step 0)

    def to_dict(self) -> dict:
        return asdict(self)


def dpzero_streams(seed: int):
    """Default streams of a DPZero run with ``seed`` (an :class:`empriv.randomness.RunStreams`); a pipeline
    passes its run's own streams instead so that no two configurations share a draw."""
    from empriv.randomness import RunStreams

    return RunStreams(key="purpose=train|method=dpzero-prompt", seed=int(seed))


def dpzero_prompt_tuning(
    model,
    ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    n_prompt: int,
    steps: int,
    sample_rate: float,
    learning_rate: float,
    mu: float,
    clip_norm: float | None,
    noise_multiplier: float | None,
    seed: int,
    init_token_ids=None,
    micro_batch_size: int = 64,
    streams=None,
    on_step: Callable[[int, DPZeroStep], None] | None = None,
    kd_target: torch.Tensor | None = None,
    kd_lambda: float = 0.0,
    checkpoint=None,
) -> tuple[torch.Tensor, DPZeroResult]:
    """Train a soft prompt on (``ids``, ``mask``) with DPZero (σ = ``noise_multiplier``) or MeZO (σ None).

    Returns (prompt [n_prompt, d], :class:`DPZeroResult`). The model is only queried for losses, in
    eval mode (no dropout, so θ+μz and θ−μz see the same function) and without gradients; its weights
    and ``requires_grad`` flags are left unchanged and its train/eval mode is restored at the end.
    Random streams (``streams``, default :func:`dpzero_streams` of ``seed``): "sampler" (Poisson
    batches), "init" (random prompt), "noise" (the scalar DP noise), ``"noise:direction"`` (z).
    ``on_step(step, facts)`` is called after every step.

    ``kd_target`` θ_nor (DP-Flat's black-box cross-model KD, spec B6): after each step θ also moves by
    −η·λ·(θ − θ_nor)/‖θ − θ_nor‖₂ (``kd_lambda`` λ; nothing where θ = θ_nor). The term depends on θ and θ_nor
    only, so given θ_nor it is post-processing of the released scalars; θ_nor trained on the private data is
    the published variant's caveat (the caller records it), on public data the strict one.

    ``checkpoint`` (:class:`empriv.train.checkpoint.Checkpointer`): save θ, the three streams (and the global ones),
    the curves and the step count every ``checkpoint.every`` steps; a re-run with the same settings, data and
    identity resumes from the latest intact checkpoint and ends bit-identical to an uninterrupted run (the steps,
    hence the accounting, counted once); the checkpoints are deleted when the loop completes.
    """
    from empriv.train.checkpoint import tensors_digest
    from empriv.train.loop import DPLoop
    from empriv.train.sampling import RecordSampling

    n_prompt = require_int("n_prompt", n_prompt, 1)
    steps = require_int("steps", steps, 1)
    q = require_real("sample_rate", sample_rate, gt=0, le=1)
    lr = require_real("learning_rate", learning_rate, gt=0)
    mu = require_real("mu", mu, gt=0)
    sigma = _check_noise_multiplier(noise_multiplier)
    c = _check_clip_norm(clip_norm, sigma is not None)
    micro_batch_size = require_int("micro_batch_size", micro_batch_size, 1)
    require_real("kd_lambda", kd_lambda, ge=0)
    if kd_target is not None and tuple(kd_target.shape) != (n_prompt, model.get_input_embeddings().weight.shape[1]):
        raise ValueError(f"kd_target must be a prompt of shape [{n_prompt}, d], got {list(kd_target.shape)}")
    if ids.dim() != 2 or ids.shape != mask.shape or ids.shape[0] < 1:
        raise ValueError(f"ids and mask must both be [N >= 1, L], got {list(ids.shape)} and {list(mask.shape)}")
    n = int(ids.shape[0])
    _check_length(model, n_prompt, int(ids.shape[1]))
    if streams is None:
        streams = dpzero_streams(seed)

    prompt = init_soft_prompt(model, n_prompt, token_ids=init_token_ids, generator=streams.generator("init"))
    sampler = streams.generator("sampler")
    directions = streams.generator(DIRECTION_STREAM)
    noise = streams.generator("noise") if sigma is not None else None
    b = q * n
    result = DPZeroResult(
        n_prompt=n_prompt, trainable_parameters=int(prompt.numel()), steps=steps, sample_rate=q,
        expected_batch_size=b, learning_rate=lr, mu=mu, clip_norm=c, noise_multiplier=sigma,
        private=bool(sigma), streams=streams.record(),
    )
    loop = DPLoop(sampling=RecordSampling(n, q), steps=steps, checkpoint=checkpoint,
                  curves=("losses", "batch_sizes", "clipped_fractions", "projected_gradients"), facts={
                      "loop": "dpzero", "n": n, "n_prompt": n_prompt, "steps": steps, "sample_rate": q,
                      "learning_rate": lr, "mu": mu, "clip_norm": c, "sigma": sigma,
                      "micro_batch_size": micro_batch_size, "streams": f"{streams.key}|seed={streams.seed}",
                      "data": tensors_digest(ids, mask), "init": tensors_digest(prompt),
                      "kd": None if kd_target is None else [tensors_digest(kd_target), float(kd_lambda)]})
    snapshot = loop.resume_point()
    if snapshot is not None:
        prompt = snapshot.tensors["prompt"].to(device=prompt.device, dtype=prompt.dtype)
    theta = {"prompt": prompt}

    def step(t: int, batch: torch.Tensor) -> dict:
        b_ids, b_mask = ids[batch], mask[batch]

        def batch_losses(point: torch.Tensor) -> torch.Tensor:
            return soft_prompt_losses(model, point, b_ids, b_mask, micro_batch_size=micro_batch_size)

        new, facts = dpzero_step(batch_losses, theta["prompt"], learning_rate=lr, mu=mu, clip_norm=c,
                                 noise_multiplier=sigma, expected_batch_size=b, direction_generator=directions,
                                 noise_generator=noise)
        if kd_target is not None and kd_lambda > 0:
            diff = new - kd_target.to(device=new.device, dtype=new.dtype)
            norm = float(diff.norm())
            if norm > 0:
                new = new - lr * kd_lambda * diff / norm
        theta["prompt"] = new
        return {"losses": facts.loss, "batch_sizes": facts.batch_size, "clipped_fractions": facts.clipped_fraction,
                "projected_gradients": facts.projected_gradient, "facts": facts}

    was_training = model.training
    model.eval()
    try:
        loop.run(step, generators={"sampler": sampler, "directions": directions, "noise": noise},
                 tensors=lambda: {"prompt": theta["prompt"].detach().cpu().clone()},
                 on_step=None if on_step is None else (lambda t, v: on_step(t, v["facts"])),
                 desc="dpzero prompt tuning", logger=log)
    finally:
        model.train(was_training)
    for name, values in loop.curves.items():
        setattr(result, name, values)
    result.empty_batches, result.wall_time_s, result.resumed_from_step = loop.empty, loop.wall_time_s, \
        loop.resumed_from_step
    return theta["prompt"], result


__all__ = [
    "DIRECTION_STREAM",
    "DPZeroResult",
    "DPZeroStep",
    "FiniteDifferences",
    "calibrate_dpzero",
    "dpzero_epsilon",
    "dpzero_prompt_tuning",
    "dpzero_step",
    "dpzero_streams",
    "finite_differences",
    "init_soft_prompt",
    "privatize_finite_differences",
    "soft_prompt_losses",
]
