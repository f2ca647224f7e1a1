"""``prefix``: P trainable key/value vectors per attention layer (``train.prefix``: flat or produced by an MLP, on all
layers or a chosen few), the base frozen; saved as an empriv virtual-token adapter.

DP-Flat is a *mode* of this method, not a method of its own: any of its switches on (``train.dpflat``: AWP, layer
elimination, KD) trains the same prefix-tuned model with DP-Flat's loop (:func:`empriv.train.dpflat.dpflat_train`,
DP-Adam over the same Poisson batches and σ as the run's accounting) instead of the standard DP-SGD loop; all off, it
is plain DP prefix tuning — the baseline DP-Flat is measured against. Its runs are named (``train.variants``, e.g.
``dpflat-strict``) and recorded (``adaptation: prefix`` + ``dpflat_settings``) as prefix runs.
"""

from __future__ import annotations

import time

from empriv.config import ConfigError
from empriv.train.methods.base import Trained, TrainingMethod, adapt, public_or_fail, register


def _needs_public(f) -> bool:
    return (f.layer_elimination and f.elimination_data == "public") or (f.kd and f.kd_data == "public")


@register("prefix")
class PrefixTuning(TrainingMethod):
    def check(self, params, run, *, canaries=None) -> None:
        if params.train.dpflat.enabled and run.privacy_unit.user_level:
            raise ConfigError(f"cube.method {params.train.run_method!r}: DP-Flat trains record-level only, not "
                              f"cube.unit {run.unit!r}")

    def prepare(self, params, base, *, init_seed: int):
        p = params.train.prefix
        return adapt(params, base, "prefix", init_seed=init_seed, n_virtual=p.n_virtual, layers=p.layers,
                     reparameterize=p.reparameterize, hidden=p.hidden)

    def train(self, job) -> Trained:
        if not job.params.train.dpflat.enabled:
            return super().train(job)
        return _train_dpflat(job)

    def facts(self, params) -> dict:
        facts = super().facts(params)
        if params.train.dpflat.enabled:
            facts["dpflat_settings"] = params.train.dpflat.model_dump()
        return facts

    def release_event(self, params, run, *, sigma, sample_rate, steps):
        f = params.train.dpflat
        if not f.enabled:
            return super().release_event(params, run, sigma=sigma, sample_rate=sample_rate, steps=steps)
        from empriv.privacy import events

        return events.dpflat_event(
            sigma, sample_rate, steps, elimination_data=f.elimination_data if f.layer_elimination else None,
            kd_data=f.kd_data if f.kd else None, nor_steps=f.nor_steps if f.kd else 0,
            awp_variant=f.awp_variant if f.awp else None, awp_steps=f.awp_steps)

    def optimizer(self, params) -> str:
        return "adam" if params.train.dpflat.enabled else params.train.optimizer

    def needs_public_split(self, params) -> bool:
        return _needs_public(params.train.dpflat)


def _train_dpflat(job) -> Trained:
    """DP-Flat (empriv.train.dpflat) on a prefix-tuned model: AWP, layer elimination and KD as switched in
    ``train.dpflat``; DP-Adam over the same Poisson batches and σ as the run's accounting."""
    import torch

    from empriv.train.checkpoint import params_digest
    from empriv.train.dp import TrainResult
    from empriv.train.dpflat import dpflat_train
    from empriv.train.sampling import poisson_batches

    params, run, model, ids, mask, privacy, streams, device = (job.params, job.run, job.model, job.ids, job.mask,
                                                               job.privacy, job.streams, job.device)
    f = params.train.dpflat
    needs_public = _needs_public(f)
    pub_ids, pub_mask = public_or_fail(job.public, "train.dpflat elimination_data/kd_data") if needs_public \
        else (None, None)
    model.to(device)
    rows = None
    if f.layer_elimination and f.elimination_samples is not None:
        pool = (pub_ids if f.elimination_data == "public" else ids).shape[0]
        if f.elimination_samples < pool:  # a seeded subset of the records (its own stream): the sharpness estimate
            rows = torch.randperm(pool, generator=streams.generator("sampler:elimination"))[:f.elimination_samples]
    t0 = time.time()
    res = dpflat_train(model, ids.to(device), mask.to(device), config=f, steps=run.steps, elimination_rows=rows,
                       sample_rate=privacy["sample_rate"], noise_multiplier=job.noise_multiplier,
                       clip_norm=params.train.clip_norm, lr=run.learning_rate,
                       sampler_generator=streams.generator("sampler"),
                       noise_generator=streams.generator("noise", device=device),
                       nor_generator=streams.generator("sampler:nor"),
                       public_ids=None if pub_ids is None else pub_ids.to(device),
                       public_mask=None if pub_mask is None else pub_mask.to(device),
                       checkpoint=None if job.checkpoint is None else job.checkpoint.with_identity(
                           run=run.name, unit=run.unit, method=params.train.method, params=params_digest(params),
                           streams=f"{streams.key}|seed={streams.seed}"))
    # the sampler stream feeds nothing but the Poisson batches inside dpflat_train: replaying it gives their sizes
    sizes = [int(b.numel()) for b in poisson_batches(ids.shape[0], privacy["sample_rate"], run.steps,
                                                     streams.generator("sampler"))]
    result = TrainResult(losses=list(res.losses), batch_sizes=sizes, empty_batches=res.empty_batches,
                         wall_time_s=time.time() - t0, precision=params.runtime.precision,
                         resumed_from_step=res.resumed_from_step)
    for step, (loss, size) in enumerate(zip(res.losses, sizes)):
        job.on_step(step, loss, size)
    record = res.record()
    caveats = [f"DP-Flat: {c}" for c in res.caveats]
    if not run.private:
        caveats.append("DP-Flat at eps = inf: clipped, no noise")
    extra = {"dpflat": {**{k: record[k] for k in ("switches", "kept_layers", "elimination", "kd_distances", "nor_losses")},
                        "elimination_samples": None if rows is None else int(rows.numel())},
             "dpflat_strict": not res.caveats}
    return Trained(res.model, result, extra=extra, caveats=caveats)
