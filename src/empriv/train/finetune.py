"""One DP fine-tuning path for the cube's runs and the audit's runs.

:func:`calibrate` finds σ for a run's (ε, δ); :func:`train_model` takes the base model and the encoded
training records, calibrates, sets up the method, runs the DP loop and logs its curve to the configuration's
W&B run (:mod:`empriv.tracking`); it returns the
model and its metrics and saves nothing (the stage layer, :mod:`empriv.pipeline.train` and
:mod:`empriv.pipeline.audit`, loads the inputs and writes the outputs). The audit passes a
:class:`~empriv.secrets.canaries.CanarySet`, whose member canaries then join the training records.
The runs' random streams are kept apart by ``job_type`` (:mod:`empriv.randomness`).
"""

from __future__ import annotations

import logging
import math
import time

from empriv.config import ConfigError, Params, RunConfig

log = logging.getLogger("empriv.train")


def calibrate(params: Params, run: RunConfig, n: int, cache=None) -> dict:
    """σ for the run's (ε, δ) with the configured accountant, and the ε that PRV and RDP report at σ."""
    delta = params.delta_for(n)
    q = run.batch_size / n
    out = {"delta": delta, "sample_rate": q, "steps": run.steps}
    if not run.private:
        out.update(noise_multiplier=0.0, accountant=None, epsilon_prv=math.inf, epsilon_rdp=math.inf)
        return out
    from empriv.privacy.accounting import calibrate_noise_multiplier, epsilon_for

    cal = calibrate_noise_multiplier(run.epsilon, delta, q, run.steps, accountant=params.privacy.accountant,
                                     **({"cache": cache} if cache is not None else {}))
    out.update(
        noise_multiplier=cal.noise_multiplier,
        accountant=cal.accountant,
        requested_accountant=cal.requested_accountant,
        accountant_fallback_reason=cal.fallback_reason,
        epsilon_calibrated=cal.epsilon,
        epsilon_prv=epsilon_for(cal.noise_multiplier, q, run.steps, delta, "prv"),
        epsilon_rdp=epsilon_for(cal.noise_multiplier, q, run.steps, delta, "rdp"),
    )
    return out


def spent_epsilons(noise_multiplier: float, sample_rate: float, delta: float, checkpoints, accountant: str) -> dict[int, float]:
    """ε spent after t steps (t in ``checkpoints``) at δ, with ``accountant`` (the one that calibrated σ): the
    curve ``train/epsilon`` of the W&B run. One forward accounting per checkpoint (see
    :func:`empriv.tracking.epsilon_checkpoints` for how few)."""
    from empriv.privacy.accounting import epsilon_for

    return {t: epsilon_for(noise_multiplier, sample_rate, t, delta, accountant) for t in checkpoints}


def prepare_method(params: Params, base, *, init_seed: int):
    """Set up ``params.train.method`` on ``base`` (the model to train; ``dpzero`` trains a soft prompt tensor beside
    a frozen base, so it returns the base). A method the base's architecture cannot take is a one-line
    :class:`ConfigError` before any training."""
    t = params.train
    name = t.run_method
    if t.method in ("full", "lora"):
        from empriv.models.adapters import prepare_for_finetuning

        return prepare_for_finetuning(base, t.method, t.lora, init_seed=init_seed)
    if t.method == "dpzero":
        for p in base.parameters():
            p.requires_grad_(False)
        return base
    from empriv.models.adaptations import prepare_adaptation

    settings = {"prefix": dict(n_virtual=t.prefix.n_virtual, layers=t.prefix.layers,
                               reparameterize=t.prefix.reparameterize, hidden=t.prefix.hidden),
                "prompt": dict(n_virtual=t.prompt.n_virtual),
                "head": dict(head_target=t.head.target)}[t.method]
    try:
        return prepare_adaptation(base, t.method, init_seed=init_seed, **settings)
    except ValueError as err:
        model_type = getattr(getattr(base, "config", None), "model_type", None)
        raise ConfigError(f"cube.method {name!r} ({t.method}) cannot adapt this base (model_type {model_type!r}): "
                          + " ".join(str(err).split())) from None


def method_facts(params: Params) -> dict:
    """What a run records about its adaptation: the method, the cube name (variant) and its settings."""
    t = params.train
    facts: dict = {"method": t.run_method, "adaptation": t.method}
    if t.method in ("prefix", "prompt", "head", "dpzero", "lora"):
        section = {"prefix": t.prefix, "prompt": t.prompt, "head": t.head, "dpzero": t.dpzero, "lora": t.lora}[t.method]
        facts[f"{t.method}_settings"] = section.model_dump()
    if t.method == "prefix" and t.dpflat.enabled:
        facts["dpflat_settings"] = t.dpflat.model_dump()
    return facts


def train_model(params: Params, run: RunConfig, base, train_ids, train_mask, *, canaries=None, tokenizer=None,
                job_type: str = "train", tracker=None, scrub_secrets=(), calibration_cache=None, unit_ids=None,
                record_tokens=None, record_scores=None, public_ids=None, public_mask=None, checkpoint=None):
    """Calibrate σ and DP-fine-tune ``base`` on the encoded records (``train_ids``/``train_mask``: [n, L]) for
    ``run``; returns (model, metrics). Nothing is saved.

    ``canaries`` (an :class:`empriv.secrets.canaries.CanarySet`) adds its *member* canaries to the training
    records — ordinary records under the same DP accounting (n counts them, q = b/n) — and, for ``new_token``
    canaries, extends the base's vocabulary with zero-initialised rows first (``tokenizer`` gives the eos id).
    Without canaries the run is exactly the cube's ordinary run.

    A user-level unit (``run.unit`` other than ``record``; :mod:`empriv.train.user_level`) needs ``unit_ids`` (the
    privacy unit of every record), ``record_tokens`` (every record's full token list: length strategies and
    chunks), ``record_scores`` (every record's mean NLL under the initial base model: perplexity strategies)
    and ``tokenizer`` (chunks); σ is calibrated at the user level and the metrics gain the unit's facts.

    ``tracker`` (an open :class:`empriv.tracking.Tracker`; the caller finishes it) receives the training curve —
    loss, realised batch size, σ and the ε spent so far (:func:`spent_epsilons`, at most
    :data:`~empriv.tracking.MAX_EPSILON_POINTS` steps, the accountant that calibrated σ) — under ``train/`` for
    the section ``train`` and ``<section>/train/`` otherwise, plus the run's privacy facts (config) and
    outcome (summary). Without one, a ``train`` job opens the configuration's W&B run itself (section
    ``train``, ``scrub_secrets`` — rows with text/prompt/continuation — redacted) and finishes it; other job
    types log nothing.
    """
    import torch

    from empriv.models.registry import resolve_device
    from empriv.randomness import RunStreams
    from empriv.tracking import SecretScrubber, open_configuration_run

    t_start = time.time()
    unit = run.privacy_unit
    tp = params.train
    special_loop = tp.method == "dpzero" or (tp.method == "prefix" and tp.dpflat.enabled)
    if special_loop and unit.user_level:
        raise ConfigError(f"cube.method {tp.run_method!r}: {'DPZero' if tp.method == 'dpzero' else 'DP-Flat'} trains "
                          f"record-level only, not cube.unit {run.unit!r}")
    if tp.method == "dpzero" and canaries is not None and getattr(canaries, "n_new_tokens", 0):
        raise ConfigError(f"audit.cube.method {tp.run_method!r}: DPZero trains a soft prompt only, so new-token canaries "
                          "can never be learnt; audit it with canaries.design random, unigram, bigram or model")
    unit_data = None
    user_canaries = None
    if unit.user_level:
        from empriv.train.user_level import append_canary_units, check_user_level, make_unit_data

        if unit.strategy == "chunk" and tokenizer is None:
            raise ValueError("train_model with a chunk strategy needs the tokenizer (its eos id starts each window)")
        if canaries is not None:  # a user-level audit: canary *units* of k records each join as units of their own
            if not hasattr(canaries, "records_per_unit"):
                raise ValueError(f"cube.unit {run.unit!r}: a user-level run audits with canary units "
                                 "(empriv.audit.user_level.UserCanaries), not record-level canaries")
            if tokenizer is None:
                raise ValueError("train_model with canaries needs the tokenizer (its eos id pads the canaries)")
            if canaries.records_per_unit != unit.k:
                raise ConfigError(f"cube.unit {run.unit!r}: the canary units have {canaries.records_per_unit} records "
                                  f"each, the run's k is {unit.k}: rebuild them (dvc repro canaries)")
            user_canaries, canaries = canaries, canaries.canary_set
            train_ids, train_mask, unit_ids, record_tokens, record_scores = append_canary_units(
                train_ids, train_mask, unit_ids, record_tokens, record_scores, user_canaries, eos_id=tokenizer.eos_id,
                seq_len=train_ids.shape[1])
        unit_data = make_unit_data(train_ids, train_mask, unit_ids, record_tokens=record_tokens, scores=record_scores)
        check_user_level(params, run, unit_data)
    n_train_param = params.data.n_train
    if unit_data is None and run.batch_size > n_train_param:
        raise ConfigError(f"batch_size {run.batch_size} must be <= data.n_train = {n_train_param}")
    device = resolve_device(params.runtime.device)
    ids, mask = train_ids, train_mask
    n_data = ids.shape[0]
    canary_info: dict = {}
    if canaries is not None:
        from empriv.secrets.canaries import encode_canaries, extend_vocabulary

        if canaries.base_vocab_size != base.get_input_embeddings().weight.shape[0]:
            raise ConfigError(
                f"the canaries were built for a vocabulary of {canaries.base_vocab_size} tokens, the base model has "
                f"{base.get_input_embeddings().weight.shape[0]}: rebuild them (dvc repro canaries)"
            )
        if tokenizer is None:
            raise ValueError("train_model with canaries needs the tokenizer (its eos id pads the canaries)")
        extend_vocabulary(base, canaries.n_new_tokens)
        members = canaries.members
        if user_canaries is None:  # record-level: the member canaries are extra records (user level: already units)
            c_ids, c_mask = encode_canaries(members, tokenizer.eos_id, params.base.seq_len, canaries.loss)
            ids, mask = torch.cat([ids, c_ids]), torch.cat([mask, c_mask])
        else:
            n_data = ids.shape[0] - len(members)
        canary_info = {"canary_design": canaries.design, "canary_loss": canaries.loss,
                       "n_canaries_included": len(members), "n_new_tokens": canaries.n_new_tokens}
        if user_canaries is not None:
            canary_info.update(n_canary_units_included=len(user_canaries.member_units),
                               canary_records_per_unit=user_canaries.records_per_unit)
    n = ids.shape[0]
    if unit_data is None:
        privacy = calibrate(params, run, n, cache=calibration_cache)
    else:
        from empriv.train.user_level import calibrate_user_level

        privacy = calibrate_user_level(params, run, unit_data.n_units, cache=calibration_cache)
    t_setup = time.time()

    # Every random stream of the run derives from (purpose, method, ε, b, T, η) and its seed (empriv.randomness).
    streams = RunStreams.of(run, method=tp.run_method, purpose=job_type)
    model = prepare_method(params, base, init_seed=streams.seed_of("init"))
    if canaries is not None and canaries.n_new_tokens and tp.method != "full":
        # Paper A: with LoRA (or any adaptation that freezes them) the embeddings must train, or new-token canaries
        # cannot be learnt.
        for p in model.get_input_embeddings().parameters():
            p.requires_grad_(True)
        canary_info["also_trained"] = "input embeddings (new-token canaries)"
    own_tracker = tracker is None and job_type == "train"
    if own_tracker:
        tracker = open_configuration_run(params, run, section="train", scrub=SecretScrubber(scrub_secrets))
    try:
        return _train_and_track(params, run, model, ids, mask, n=n, n_data=n_data, canaries=canaries,
                                canary_info=canary_info, privacy=privacy, streams=streams, device=device,
                                tracker=tracker, t_start=t_start, t_setup=t_setup, own_tracker=own_tracker,
                                unit_data=unit_data, eos_id=None if tokenizer is None else tokenizer.eos_id,
                                public=(public_ids, public_mask), checkpoint=checkpoint)
    except BaseException:
        if own_tracker:
            tracker.abort()
        raise


def _train_and_track(params: Params, run: RunConfig, model, ids, mask, *, n, n_data, canaries, canary_info, privacy,
                     streams, device, tracker, t_start, t_setup, own_tracker, unit_data=None, eos_id=None,
                     public=(None, None), checkpoint=None):
    import torch

    from empriv.models.adapters import trainable_parameters
    from empriv.tracking import epsilon_checkpoints
    from empriv.train.dp import dp_finetune

    log_every = params.train.log_every
    curve: dict = {}
    if tracker is not None and tracker.active:
        prefix = "train/" if tracker.section == "train" else f"{tracker.section}/train/"
        facts = {"method": params.train.run_method, "optimizer": params.train.optimizer,
                 "clip_norm": params.train.clip_norm if run.private else None, "n": n, **canary_info,
                 **{k: privacy.get(k) for k in ("delta", "sample_rate", "noise_multiplier", "accountant")}}
        tracker.config(facts if tracker.section == "train" else {f"{tracker.section}_run": facts})
        tracker.axis(f"{prefix}*", f"{prefix}step")
        spent = {}
        if run.private and privacy["accountant"] in ("prv", "rdp", "pld"):  # not pld-mog: its PLD is too slow to repeat
            t_eps = time.time()
            spent = spent_epsilons(privacy["noise_multiplier"], privacy["sample_rate"], privacy["delta"],
                                   epsilon_checkpoints(run.steps, log_every), privacy["accountant"])
            log.info("%s: the epsilon spent at %d steps of the curve took %.1f s to account", run.name, len(spent),
                     time.time() - t_eps)
        curve = {"prefix": prefix, "spent": spent, "sigma": privacy["noise_multiplier"] if run.private else None}

    def on_step(step: int, loss: float, bsz: int) -> None:
        if curve and (step % log_every == 0 or step == run.steps - 1):
            p, done = curve["prefix"], step + 1
            row = {f"{p}step": done, f"{p}loss": loss, f"{p}batch_size": bsz}
            if curve["sigma"] is not None:  # private runs: σ and the ε spent so far
                row[f"{p}noise_multiplier"] = curve["sigma"]
            if done in curve["spent"]:
                row[f"{p}epsilon"] = curve["spent"][done]
            tracker.log(row)

    unit_facts: dict = {}
    method_extra: dict = {}
    tp = params.train
    if tp.method == "dpzero":
        model, result, extra = _train_dpzero(params, run, model, ids, mask, privacy=privacy, streams=streams,
                                             device=device, on_step=on_step, public=public, checkpoint=checkpoint)
        method_extra.update(extra)
    elif tp.method == "prefix" and tp.dpflat.enabled:
        model, result, extra = _train_dpflat(params, run, model, ids, mask, privacy=privacy, streams=streams,
                                             device=device, on_step=on_step, public=public, checkpoint=checkpoint)
        method_extra.update(extra)
    elif unit_data is None:
        result = dp_finetune(
            model,
            ids,
            mask,
            run=run,
            noise_multiplier=privacy["noise_multiplier"] if run.private else None,
            params=params,
            device=device,
            on_step=on_step,
            streams=streams,
            checkpoint=checkpoint,
        )
    else:
        from empriv.train.user_level import train_user_level

        result, unit_facts = train_user_level(params, run, model, unit_data, privacy=privacy, streams=streams,
                                              device=device, eos_id=eos_id, on_step=on_step, checkpoint=checkpoint)
    model.to("cpu")
    finite = [x for x in result.losses if not math.isnan(x)]
    metrics = {
        "config": run.name,
        **run.as_dict(),
        **method_facts(params),
        "optimizer": "adam" if tp.method == "prefix" and tp.dpflat.enabled else
                     ("dpzero" if tp.method == "dpzero" else params.train.optimizer),
        "clip_norm": params.train.clip_norm if run.private else None,
        "n": n,
        **({"n_data": n_data, **canary_info} if canaries is not None else {}),
        **privacy,
        **unit_facts,
        "sampler": params.train.sampler,
        "random_streams": streams.record(),
        "trainable_parameters": method_extra.pop("trainable_parameters_override", None) or trainable_parameters(model),
        "final_loss": finite[-1] if finite else None,
        "mean_batch_size": sum(result.batch_sizes) / len(result.batch_sizes),
        "empty_batches": result.empty_batches,
        # What touched private data without noise: recorded, as the guarantee does not cover it.
        # The guarantee covers the model only: these are released too and are not noised.
        "unnoised_outputs": ["training loss curve (W&B train/loss; loss_curve here)",
                             "realised Poisson batch sizes (W&B train/batch_size; mean_batch_size, empty_batches here)",
                             *method_extra.pop("caveats", [])],
        # Results differ across thread counts (float summation order): the run depends on runtime.threads.
        "threads": torch.get_num_threads(),
        "device": str(device), "precision": result.precision, "micro_batch_size": result.micro_batch_size,
        "dp_step": getattr(result, "dp_step", None), "dp_step_reason": getattr(result, "dp_step_reason", None),
        "wall_time_s": time.time() - t_start,
        "train_time_s": result.wall_time_s,
        "setup_time_s": t_setup - t_start,
        "loss_curve": result.losses,
        "resumed_from_step": getattr(result, "resumed_from_step", None),
        **method_extra,
    }
    if curve:
        tracker.summary({f"{curve['prefix']}{k}": metrics.get(k) for k in (
            "final_loss", "noise_multiplier", "epsilon_calibrated", "epsilon_prv", "epsilon_rdp", "mean_batch_size",
            "empty_batches", "trainable_parameters", "wall_time_s", "train_time_s")})
    if own_tracker:
        tracker.finish()
    return model, metrics




def _public_or_fail(public, what: str):
    ids, mask = public
    if ids is None or mask is None or ids.shape[0] == 0:
        raise ConfigError(f"{what} is 'public' but no public split was given (the train stage encodes "
                          "data/prepared/public.jsonl)")
    return ids, mask


def _train_dpflat(params: Params, run: RunConfig, model, ids, mask, *, privacy, streams, device, on_step, public,
                  checkpoint=None):
    """DP-Flat (empriv.train.dpflat) on a prefix-tuned model: AWP, layer elimination and KD as switched in
    ``train.dpflat``; DP-Adam over the same Poisson batches and σ as the run's accounting."""
    import torch

    from empriv.train.checkpoint import params_digest
    from empriv.train.dpflat import dpflat_train
    from empriv.train.dp import TrainResult

    f = params.train.dpflat
    needs_public = (f.layer_elimination and f.elimination_data == "public") or (f.kd and f.kd_data == "public")
    pub_ids, pub_mask = _public_or_fail(public, "train.dpflat elimination_data/kd_data") if needs_public else (None, None)
    model.to(device)
    rows = None
    if f.layer_elimination and f.elimination_samples is not None:
        pool = (pub_ids if f.elimination_data == "public" else ids).shape[0]
        if f.elimination_samples < pool:  # a seeded subset of the records (its own stream): the sharpness estimate
            rows = torch.randperm(pool, generator=streams.generator("sampler:elimination"))[:f.elimination_samples]
    t0 = time.time()
    res = dpflat_train(model, ids.to(device), mask.to(device), config=f, steps=run.steps, elimination_rows=rows,
                       sample_rate=privacy["sample_rate"],
                       noise_multiplier=privacy["noise_multiplier"] if run.private else None,
                       clip_norm=params.train.clip_norm, lr=run.learning_rate,
                       sampler_generator=streams.generator("sampler"),
                       noise_generator=streams.generator("noise", device=device),
                       nor_generator=streams.generator("sampler:nor"),
                       public_ids=None if pub_ids is None else pub_ids.to(device),
                       public_mask=None if pub_mask is None else pub_mask.to(device),
                       checkpoint=None if checkpoint is None else checkpoint.with_identity(
                           run=run.name, unit=run.unit, method=params.train.method, params=params_digest(params),
                           streams=f"{streams.key}|seed={streams.seed}"))
    from empriv.train.sampling import poisson_batches

    # the sampler stream feeds nothing but the Poisson batches inside dpflat_train: replaying it gives their sizes
    sizes = [int(b.numel()) for b in poisson_batches(ids.shape[0], privacy["sample_rate"], run.steps,
                                                     streams.generator("sampler"))]
    result = TrainResult(losses=list(res.losses), batch_sizes=sizes, empty_batches=res.empty_batches,
                         wall_time_s=time.time() - t0, precision=params.runtime.precision,
                         resumed_from_step=res.resumed_from_step)
    for step, (loss, size) in enumerate(zip(res.losses, sizes)):
        on_step(step, loss, size)
    record = res.record()
    extra = {"dpflat": {**{k: record[k] for k in ("switches", "kept_layers", "elimination", "kd_distances", "nor_losses")},
                        "elimination_samples": None if rows is None else int(rows.numel())},
             "caveats": [f"DP-Flat: {c}" for c in res.caveats],
             "dpflat_strict": not res.caveats}
    if not run.private:
        extra["caveats"].append("DP-Flat at eps = inf: clipped, no noise")
    return res.model, result, extra


def _train_dpzero(params: Params, run: RunConfig, base, ids, mask, *, privacy, streams, device, on_step, public,
                  checkpoint=None):
    """Black-box soft-prompt tuning with DPZero (σ from the run's accounting, the same as DP-SGD's for the same
    (σ, q, T): empriv.train.dpzero) — MeZO at ε = ∞ — and, with ``train.dpzero.kd``, DP-Flat's black-box KD toward a
    MeZO-trained θ_nor. Returns the prompt-tuned model (:class:`~empriv.models.adaptations.PromptTunedLM`)."""
    from empriv.train.checkpoint import params_digest
    from empriv.train.dpzero import dpzero_prompt_tuning
    from empriv.models.adaptations import PromptTunedLM, VirtualTokens, register_grad_samplers
    from empriv.train.dp import TrainResult

    z = params.train.dpzero
    base.to(device)
    q = privacy["sample_rate"]
    mb = params.train.micro_batch_size if params.train.micro_batch_size != "auto" else 64
    kd_target, caveats, nor_losses = None, [], []
    if z.kd and z.nor_steps > 0:
        n_ids, n_mask = _public_or_fail(public, "train.dpzero.kd_data") if z.kd_data == "public" else (ids, mask)
        from empriv.randomness import RunStreams

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
        on_step(step, facts.loss, facts.batch_size)

    t0 = time.time()
    prompt, res = dpzero_prompt_tuning(
        base, ids.to(device), mask.to(device), n_prompt=z.n_prompt, steps=run.steps, sample_rate=q,
        learning_rate=run.learning_rate, mu=z.mu, clip_norm=params.train.clip_norm if run.private else None,
        noise_multiplier=privacy["noise_multiplier"] if run.private else None, seed=run.seed, micro_batch_size=mb,
        streams=streams, on_step=step_hook,
        checkpoint=None if checkpoint is None else checkpoint.with_identity(
            run=run.name, unit=run.unit, method=params.train.method, params=params_digest(params)),
        **({"kd_target": kd_target, "kd_lambda": z.kd_lambda} if kd_target is not None else {}))
    register_grad_samplers()
    table = VirtualTokens(z.n_prompt, prompt.shape[1])
    with torch_no_grad():
        table.weight.copy_(prompt.detach().cpu())
    model = PromptTunedLM(base.to("cpu"), table)
    for p in model.parameters():
        p.requires_grad_(False)
    result = TrainResult(losses=list(res.losses), batch_sizes=list(res.batch_sizes), empty_batches=res.empty_batches,
                         wall_time_s=time.time() - t0, precision="fp32", micro_batch_size=mb,
                         resumed_from_step=res.resumed_from_step)
    extra = {"dpzero": {"mu": z.mu, "n_prompt": z.n_prompt, "kd": z.kd, "kd_lambda": z.kd_lambda if z.kd else None,
                        "kd_data": z.kd_data if z.kd else None, "nor_losses": nor_losses,
                        "clipped_fractions": res.clipped_fractions},
             "caveats": caveats, "trainable_parameters_override": int(prompt.numel())}
    return model, result, extra


def torch_no_grad():
    import torch

    return torch.no_grad()
