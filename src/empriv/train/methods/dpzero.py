"""``dpzero``: black-box soft-prompt tuning with DPZero (:func:`empriv.train.dpzero.dpzero_prompt_tuning`; MeZO at
ε = ∞): P soft-prompt embeddings (``train.dpzero.n_prompt``) trained from two forward passes per step beside a frozen
base, σ from the run's accounting (the same as DP-SGD's for the same σ, q, T). With ``train.dpzero.kd``, DP-Flat's
black-box KD toward a MeZO-trained θ_nor. Record-level only; saved as an empriv virtual-token (prompt) adapter."""

from __future__ import annotations

import time

from empriv.config import ConfigError
from empriv.train.methods.base import Trained, TrainingMethod, public_or_fail, register


@register("dpzero")
class DPZero(TrainingMethod):
    def check(self, params, run, *, canaries=None) -> None:
        name = params.train.run_method
        if run.privacy_unit.user_level:
            raise ConfigError(f"cube.method {name!r}: DPZero trains record-level only, not cube.unit {run.unit!r}")
        if canaries is not None and getattr(canaries, "n_new_tokens", 0):
            raise ConfigError(f"audit.cube.method {name!r}: DPZero trains a soft prompt only, so new-token canaries "
                              "can never be learnt; audit it with canaries.design random, unigram, bigram or model")

    def prepare(self, params, base, *, init_seed: int):
        """The base, frozen: the soft prompt is a tensor beside it until training ends."""
        for p in base.parameters():
            p.requires_grad_(False)
        return base

    def train(self, job) -> Trained:
        return _train_dpzero(job)

    def release_event(self, params, run, *, sigma, sample_rate, steps):
        from empriv.privacy import events

        z = params.train.dpzero
        return events.dpzero_event(sigma, sample_rate, steps, kd_data=z.kd_data if z.kd else None,
                                   nor_steps=z.nor_steps)

    def optimizer(self, params) -> str:
        return "dpzero"

    def needs_public_split(self, params) -> bool:
        z = params.train.dpzero
        return z.kd and z.kd_data == "public"


def _train_dpzero(job) -> Trained:
    """Returns the prompt-tuned model (:class:`~empriv.models.adaptations.PromptTunedLM`)."""
    import torch

    from empriv.models.adaptations import PromptTunedLM, VirtualTokens, register_grad_samplers
    from empriv.randomness import RunStreams
    from empriv.train.checkpoint import params_digest
    from empriv.train.dp import TrainResult
    from empriv.train.dpzero import dpzero_prompt_tuning

    params, run, base, ids, mask, streams, device = (job.params, job.run, job.model, job.ids, job.mask, job.streams,
                                                     job.device)
    z = params.train.dpzero
    base.to(device)
    q = job.privacy["sample_rate"]
    mb = params.train.micro_batch_size if params.train.micro_batch_size != "auto" else 64
    kd_target, caveats, nor_losses = None, [], []
    if z.kd and z.nor_steps > 0:
        n_ids, n_mask = public_or_fail(job.public, "train.dpzero.kd_data") if z.kd_data == "public" else (ids, mask)
        nor_streams = RunStreams(key=streams.key + "|nor", seed=streams.seed)
        kd_target, nor_res = dpzero_prompt_tuning(
            base, n_ids.to(device), n_mask.to(device), n_prompt=z.n_prompt, steps=z.nor_steps,
            sample_rate=min(1.0, run.batch_size / n_ids.shape[0]), learning_rate=run.learning_rate, mu=z.mu,
            clip_norm=None, noise_multiplier=None, seed=run.seed, micro_batch_size=mb, streams=nor_streams)
        nor_losses = nor_res.losses
        if z.kd_data == "private":
            caveats.append("DPZero KD: theta_nor trained with MeZO on the private training data without noise "
                           "(published DP-Flat black-box variant; not covered by the guarantee)")

    def step_hook(step, facts):
        job.on_step(step, facts.loss, facts.batch_size)

    t0 = time.time()
    prompt, res = dpzero_prompt_tuning(
        base, ids.to(device), mask.to(device), n_prompt=z.n_prompt, steps=run.steps, sample_rate=q,
        learning_rate=run.learning_rate, mu=z.mu, clip_norm=params.train.clip_norm if run.private else None,
        noise_multiplier=job.noise_multiplier, seed=run.seed, micro_batch_size=mb,
        streams=streams, on_step=step_hook,
        checkpoint=None if job.checkpoint is None else job.checkpoint.with_identity(
            run=run.name, unit=run.unit, method=params.train.method, params=params_digest(params)),
        **({"kd_target": kd_target, "kd_lambda": z.kd_lambda} if kd_target is not None else {}))
    register_grad_samplers()
    table = VirtualTokens(z.n_prompt, prompt.shape[1])
    with torch.no_grad():
        table.weight.copy_(prompt.detach().cpu())
    model = PromptTunedLM(base.to("cpu"), table)
    for p in model.parameters():
        p.requires_grad_(False)
    result = TrainResult(losses=list(res.losses), batch_sizes=list(res.batch_sizes), empty_batches=res.empty_batches,
                         wall_time_s=time.time() - t0, precision="fp32", micro_batch_size=mb,
                         resumed_from_step=res.resumed_from_step)
    extra = {"dpzero": {"mu": z.mu, "n_prompt": z.n_prompt, "kd": z.kd, "kd_lambda": z.kd_lambda if z.kd else None,
                        "kd_data": z.kd_data if z.kd else None, "nor_losses": nor_losses,
                        "clipped_fractions": res.clipped_fractions}}
    return Trained(model, result, extra=extra, caveats=caveats, trainable_parameters=int(prompt.numel()))
