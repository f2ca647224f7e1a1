"""One DP fine-tuning path for the cube's runs and the audit's runs.

:func:`calibrate` finds σ for a run's (ε, δ); :func:`train_model` takes a :class:`TrainRequest` (the base model,
the encoded :class:`TrainingRecords`, the job's settings), calibrates, sets up the method (``params.train.method``,
registered in :mod:`empriv.train.methods`: its checks, its trainable model, its loop and the facts it records), runs
it and logs its curve to the configuration's W&B run (:mod:`empriv.infra.tracking`); it returns the model and its
metrics and saves nothing (the stage layer, :mod:`empriv.pipeline.train` and
:mod:`empriv.pipeline.audit`, loads the inputs and writes the outputs). The audit's request carries a
:class:`~empriv.secrets.canaries.CanarySet`, whose member canaries then join the training records.
The runs' random streams are kept apart by ``job_type`` (:mod:`empriv.randomness`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from empriv.config import ConfigError, Params, RunConfig

log = logging.getLogger("empriv.train")


def calibrate(params: Params, run: RunConfig, n: int, cache=None) -> dict:
    """σ for the run's (ε, δ) with the configured accountant, the ε that PRV and RDP report at σ, and the DpEvent
    the run releases (``dp_event``, :mod:`empriv.train.release`)."""
    from empriv.train.methods import get_method
    from empriv.train.release import release_record

    method = get_method(params.train.method)

    delta = params.delta_for(n)
    q = run.batch_size / n
    out = {"delta": delta, "sample_rate": q, "steps": run.steps}
    if not run.private:
        out.update(noise_multiplier=0.0, accountant=None, epsilon_prv=math.inf, epsilon_rdp=math.inf,
                   **release_record(params, run, noise_multiplier=0.0, sample_rate=q, method=method))
        return out
    from empriv.privacy.accounting import calibrate_noise_multiplier, epsilon_of
    from empriv.privacy.events import dp_sgd_event

    cal = calibrate_noise_multiplier(run.epsilon, delta, q, run.steps, accountant=params.privacy.accountant,
                                     **({"cache": cache} if cache is not None else {}))
    steps_event = dp_sgd_event(cal.noise_multiplier, q, run.steps)  # what the ε fields account
    out.update(
        noise_multiplier=cal.noise_multiplier,
        accountant=cal.accountant,
        requested_accountant=cal.requested_accountant,
        accountant_fallback_reason=cal.fallback_reason,
        epsilon_calibrated=cal.epsilon,
        epsilon_prv=epsilon_of(steps_event, delta, "prv"),
        epsilon_rdp=epsilon_of(steps_event, delta, "rdp"),
        **release_record(params, run, noise_multiplier=cal.noise_multiplier, sample_rate=q,
                         method=method),
    )
    return out


def spent_epsilons(noise_multiplier: float, sample_rate: float, delta: float, checkpoints, accountant: str,
                   *, event_at=None) -> dict[int, float]:
    """ε spent after t steps (t in ``checkpoints``) at δ, with ``accountant`` (the one that calibrated σ): the
    curve ``train/epsilon`` of the W&B run. ``event_at``: t → the DpEvent released after t steps (default DP-SGD's,
    T-fold Poisson-subsampled Gaussian (σ, q)). One forward accounting per checkpoint (see
    :func:`empriv.infra.tracking.epsilon_checkpoints` for how few)."""
    from empriv.privacy.accounting import epsilon_of
    from empriv.privacy.events import dp_sgd_event

    if event_at is None:
        event_at = lambda t: dp_sgd_event(noise_multiplier, sample_rate, t)  # noqa: E731
    return {t: epsilon_of(event_at(t), delta, accountant) for t in checkpoints}


@dataclass(frozen=True, eq=False)
class TrainingRecords:
    """The private records a run trains on: ``ids``/``mask`` [n, L] (encoded to the base's sequence length) and, for
    a user-level unit (``run.unit`` other than ``record``; :mod:`empriv.train.user_level`), ``unit_ids`` (the privacy
    unit of every record), ``record_tokens`` (every record's full token list: length strategies and chunks) and
    ``record_scores`` (every record's mean NLL under the initial base model: perplexity strategies)."""

    ids: Any
    mask: Any
    unit_ids: Any = None
    record_tokens: Any = None
    record_scores: Any = None


@dataclass(frozen=True, eq=False)
class PublicSplit:
    """The encoded public split (``ids``/``mask`` [n, L]), for the strict DP-Flat / DPZero variants that train
    something on public data only."""

    ids: Any
    mask: Any


@dataclass(frozen=True, eq=False)
class TrainRequest:
    """One DP fine-tuning run for :func:`train_model`: calibrate σ and DP-fine-tune ``base`` on ``records`` for
    ``run`` under ``params``.

    ``canaries`` (an :class:`empriv.secrets.canaries.CanarySet`) adds its *member* canaries to the training
    records — ordinary records under the same DP accounting (n counts them, q = b/n) — and, for ``new_token``
    canaries, extends the base's vocabulary with zero-initialised rows first (``tokenizer`` gives the eos id).
    Without canaries the run is exactly the cube's ordinary run.

    A user-level unit needs the records' ``unit_ids``, ``record_tokens`` and ``record_scores``
    (:class:`TrainingRecords`) and the ``tokenizer`` (chunks); σ is calibrated at the user level and the metrics
    gain the unit's facts. ``public``: the :class:`PublicSplit` the strict variants need (None: not read).

    ``job_type`` keeps the runs' random streams apart (:mod:`empriv.randomness`). ``tracker`` (an open
    :class:`empriv.infra.tracking.Tracker`; the caller finishes it) receives the training curve — loss, realised
    batch size, σ and the ε spent so far (:func:`spent_epsilons`, at most
    :data:`~empriv.infra.tracking.MAX_EPSILON_POINTS` steps, the accountant that calibrated σ) — under ``train/``
    for the section ``train`` and ``<section>/train/`` otherwise, plus the run's privacy facts (config) and
    outcome (summary). Without one, a ``train`` job opens the configuration's W&B run itself (section ``train``,
    ``scrub_secrets`` — rows with text/prompt/continuation — redacted) and finishes it; other job types log
    nothing. ``calibration_cache``: the σ-calibration cache (:mod:`empriv.privacy.cache`; None: none);
    ``checkpoint``: the run's :class:`~empriv.train.checkpoint.Checkpointer` (None: no checkpoints).
    """

    params: Params
    run: RunConfig
    base: Any
    records: TrainingRecords
    public: PublicSplit | None = None
    canaries: Any = None
    tokenizer: Any = None
    job_type: str = "train"
    tracker: Any = None
    scrub_secrets: Collection[str] = ()
    calibration_cache: Any = None
    checkpoint: Any = None


def train_model(request: TrainRequest):
    """Calibrate σ and DP-fine-tune the request's base on its records (:class:`TrainRequest` says what each part
    does); returns (model, metrics). Nothing is saved."""
    params, run, base = request.params, request.run, request.base
    canaries, tokenizer, job_type, tracker = request.canaries, request.tokenizer, request.job_type, request.tracker
    calibration_cache, checkpoint = request.calibration_cache, request.checkpoint
    records = request.records
    train_ids, train_mask = records.ids, records.mask
    unit_ids, record_tokens, record_scores = records.unit_ids, records.record_tokens, records.record_scores
    import torch

    from empriv.models.registry import resolve_device
    from empriv.randomness import RunStreams
    from empriv.infra.tracking import SecretScrubber, open_configuration_run

    from empriv.train.methods import TrainingJob, get_method

    t_start = time.time()
    unit = run.privacy_unit
    tp = params.train
    method = get_method(tp.method)
    method.check(params, run, canaries=canaries)
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
    model = method.prepare(params, base, init_seed=streams.seed_of("init"))
    if canaries is not None and canaries.n_new_tokens and not method.traits.trains_all_weights:
        # Paper A: with LoRA (or any adaptation that freezes them) the embeddings must train, or new-token canaries
        # cannot be learnt.
        for p in model.get_input_embeddings().parameters():
            p.requires_grad_(True)
        canary_info["also_trained"] = "input embeddings (new-token canaries)"
    own_tracker = tracker is None and job_type == "train"
    if own_tracker:
        tracker = open_configuration_run(params, run, section="train", scrub=SecretScrubber(request.scrub_secrets))
    try:
        job = TrainingJob(params, run, model, ids, mask, privacy=privacy, streams=streams, device=device,
                          on_step=_no_curve, checkpoint=checkpoint,
                          public=(None, None) if request.public is None else (request.public.ids, request.public.mask),
                          unit_data=unit_data, eos_id=None if tokenizer is None else tokenizer.eos_id)
        timing = {"t_start": t_start, "t_setup": t_setup}
        return _train_and_track(method, job, n=n, n_data=n_data, canaries=canaries, canary_info=canary_info,
                                tracker=tracker, own_tracker=own_tracker, timing=timing)
    except BaseException:
        if own_tracker:
            tracker.abort()
        raise


def _no_curve(step: int, loss: float, bsz: int) -> None:
    pass


def _train_and_track(method, job, *, n, n_data, canaries, canary_info, tracker, own_tracker, timing):
    """Run ``method``'s loop on ``job`` with the curve going to ``tracker``; the run's metrics (its record)."""
    import torch

    from empriv.models.adapters import trainable_parameters
    from empriv.infra.tracking import epsilon_checkpoints

    params, run, privacy, streams, device = job.params, job.run, job.privacy, job.streams, job.device
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

    job.on_step = on_step
    trained = method.train(job)
    model, result = trained.model, trained.result
    model.to("cpu")
    finite = [x for x in result.losses if not math.isnan(x)]
    metrics = {
        "config": run.name,
        **run.as_dict(),
        **method.facts(params),
        "optimizer": method.optimizer(params),
        "clip_norm": params.train.clip_norm if run.private else None,
        "n": n,
        **({"n_data": n_data, **canary_info} if canaries is not None else {}),
        **privacy,
        **trained.unit_facts,
        "sampler": params.train.sampler,
        "random_streams": streams.record(),
        "trainable_parameters": trained.trainable_parameters or trainable_parameters(model),
        "final_loss": finite[-1] if finite else None,
        "mean_batch_size": sum(result.batch_sizes) / len(result.batch_sizes),
        "empty_batches": result.empty_batches,
        # What touched private data without noise: recorded, as the guarantee does not cover it.
        # The guarantee covers the model only: these are released too and are not noised.
        "unnoised_outputs": ["training loss curve (W&B train/loss; loss_curve here)",
                             "realised Poisson batch sizes (W&B train/batch_size; mean_batch_size, empty_batches here)",
                             *trained.caveats],
        # Results differ across thread counts (float summation order): the run depends on runtime.threads.
        "threads": torch.get_num_threads(),
        "device": str(device), "precision": result.precision, "micro_batch_size": result.micro_batch_size,
        "dp_step": getattr(result, "dp_step", None), "dp_step_reason": getattr(result, "dp_step_reason", None),
        "wall_time_s": time.time() - timing["t_start"],
        "train_time_s": result.wall_time_s,
        "setup_time_s": timing["t_setup"] - timing["t_start"],
        "loss_curve": result.losses,
        "resumed_from_step": getattr(result, "resumed_from_step", None),
        **trained.extra,
    }
    if curve:
        tracker.summary({f"{curve['prefix']}{k}": metrics.get(k) for k in (
            "final_loss", "noise_multiplier", "epsilon_calibrated", "epsilon_prv", "epsilon_rdp", "mean_batch_size",
            "empty_batches", "trainable_parameters", "wall_time_s", "train_time_s")})
    if own_tracker:
        tracker.finish()
    return model, metrics
