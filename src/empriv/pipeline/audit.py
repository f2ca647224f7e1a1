"""audit@<config>: train one configuration of the audit cube *with* the canaries, then audit it (MIA scores, ROC,
one-run ε lower bounds) → models/audit/<unit>/<point>/ (with canary_scores.jsonl), records/audit/<unit>/<point>.json.

A user-level unit (``group-k…``, ``userwise-k…``) trains with canary *units* of k records
(data/canaries/user-k<k>/, one Bernoulli(½) membership per unit) as units of their own, and audits per unit
(:mod:`empriv.audit.user_level`): the unit's score aggregates its records' loss scores (``audit.unit_score``), r
top-score guesses over the m units, ε̂ with m = units; the bound is at the user level and never exceeds the run's
user-level ε."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

from empriv import paths
from empriv.config import Params, RunConfig, method_traits
from empriv.pipeline.common import config_stage, load_base, load_tokenizer, secrets_to_scrub
from empriv.pipeline.train import calibration_cache, encoded_train_split

log = logging.getLogger("empriv.audit")

# Facts of the audit run's training kept in its metrics (under "train").
TRAIN_FACTS = ("method", "adaptation", "trainable_parameters", "also_trained", "optimizer", "clip_norm", "n", "n_data", "n_canaries_included", "n_new_tokens", "delta",
               "sample_rate", "steps", "noise_multiplier", "accountant", "epsilon_prv", "epsilon_rdp", "sampler",
               "final_loss", "empty_batches", "precision", "micro_batch_size", "threads", "random_streams")
# and of a user-level audit run
USER_FACTS = ("unit_method", "unit_k", "unit_strategy", "n_units", "epsilon_user_level", "user_accounting",
              "n_canary_units_included", "canary_records_per_unit")


def main(params: Params, run: RunConfig, canaries_dir=paths.CANARIES_DIR, runs_dir=paths.AUDIT_RUNS_DIR,
         metrics_dir=paths.AUDIT_METRICS_DIR) -> dict:
    from empriv.secrets.canaries import CanarySet
    from empriv.infra.tracking import SecretScrubber, open_configuration_run

    from empriv.io import ensure_writable

    ensure_writable(Path(runs_dir) / run.file_stem, Path(metrics_dir) / f"{run.file_stem}.json")  # before training
    t0 = time.time()
    if run.privacy_unit.user_level:
        from empriv.audit.user_level import UserCanaries
        from empriv.pipeline.canaries import user_canaries_dirname

        where = Path(canaries_dir) / user_canaries_dirname(run.privacy_unit.k)
        if not where.exists():
            raise FileNotFoundError(f"{where}: no canary units for k={run.privacy_unit.k}: re-run the canaries stage "
                                    "(dvc repro canaries)")
        cs = UserCanaries.load(where)
    else:
        cs = CanarySet.load(canaries_dir)
    tok = load_tokenizer()
    ids, mask = encoded_train_split(params, tok)
    # the audit's part of the configuration's W&B run: its training curve and its results (no canary ever)
    scrub = SecretScrubber(secrets_to_scrub()).with_canaries(getattr(cs, "canary_set", cs), tok)
    from empriv.pipeline.staged_outputs import StagedOutputs

    with StagedOutputs() as staged:  # W&B failing as the run closes puts the previous outputs back
        with open_configuration_run(params, run, section="audit", scrub=scrub) as tracker:
            out = _train_and_audit(params, run, cs, tok, ids, mask, tracker, t0, runs_dir, metrics_dir, staged)
    return out


def _train_and_audit(params: Params, run: RunConfig, cs, tok, ids, mask, tracker, t0: float, runs_dir,
                     metrics_dir, staged) -> dict:
    from empriv.audit.canary_audit import audit_canaries, reference_model
    from empriv.io import write_json, write_jsonl
    from empriv.models.adapters import save_finetuned
    from empriv.models.registry import resolve_device
    from empriv.pipeline.train import checkpointer, public_split, training_records
    from empriv.stage import peak_memory
    from empriv.train.finetune import TrainRequest, train_model

    ap = params.audit
    user_level = run.privacy_unit.user_level
    ck = checkpointer(params, run, "audit")
    model, train_metrics = train_model(TrainRequest(
        params, run, load_base(), canaries=cs, tokenizer=tok, job_type="audit", checkpoint=ck, tracker=tracker,
        calibration_cache=calibration_cache(), records=training_records(run, tok, ids, mask),
        public=public_split(params, tok)))
    delta = ap.delta if ap.delta is not None else train_metrics["delta"]
    model.eval()
    t_score = time.time()
    device = resolve_device(params.runtime.device)  # train_model hands the model back on the CPU
    model.to(device)
    if user_level:
        metrics, rows = audit_user_level(model, cs, tok, params, delta)
    else:
        metrics, rows = audit_canaries(
            model, reference_model(load_base(), cs).to(device), cs, eos_id=tok.eos_id, seq_len=params.base.seq_len,
            delta=delta, tokenizer=tok, score=ap.score, rule=ap.rule, guesses=ap.guesses, guess_side=ap.guess_side,
            r_grid=ap.r_grid, min_k=ap.min_k, rmia_gamma=ap.rmia_gamma, rmia_alpha=ap.rmia_alpha,
            batch_size=ap.eval_batch_size, seed=ap.seed,
        )
    model.to("cpu")
    # The accountant's ε at the audit's δ: the lower bound ε̂ must never exceed it (else DP-SGD is broken).
    upper = audit_upper_bound(params, run, train_metrics, delta)
    metrics["audit_epsilon_upper"] = upper
    out = {
        "config": run.name,
        **run.as_dict(),
        **metrics,
        "train": {k: train_metrics.get(k) for k in TRAIN_FACTS + (USER_FACTS if user_level else ())},
        "score_time_s": time.time() - t_score,
        "wall_time_s": time.time() - t0,
        "peak_memory": peak_memory(),
    }
    tmp = staged.directory(Path(runs_dir) / run.file_stem)  # the model directory and the record, published together
    method = params.train.method
    saved_as = method_traits(method).saved_as
    if saved_as == "peft":
        # LoRA audits also train the embeddings (new-token rows): save the merged model whole.
        model = model.merge_and_unload()
    # The tokenizer is the base's: new-token canaries are embedding rows past its vocabulary. A prefix/prompt
    # audit model keeps its adapter beside its whole base (whose embeddings gained those rows).
    if saved_as == "virtual_tokens":
        save_finetuned(model, method, tmp, tokenizer_dir=paths.TOKENIZER_DIR, include_base=True)
    else:
        save_finetuned(model, "full", tmp, tokenizer_dir=paths.TOKENIZER_DIR)
    write_jsonl(Path(tmp) / "canary_scores.jsonl", rows)
    write_json(staged.file(Path(metrics_dir) / f"{run.file_stem}.json"), out)
    staged.publish()
    if ck is not None:
        ck.clear()
    track_audit(tracker, out)
    if user_level:
        log.info("audit %s (user level, k=%d): eps_lb 95%% %.3f / 99%% %.3f (%d/%d correct of %d canary units), "
                 "eps_user %.3f", run.name, cs.records_per_unit, out["audit_eps_lb_95"], out["audit_eps_lb_99"],
                 out["audit_n_correct"], out["audit_n_guesses"], out["audit_n_canaries"], upper)
        return out
    log.info("audit %s: design %s, eps_lb 95%% %.3f / 99%% %.3f (%d/%d correct of %d canaries), AUC %.3f, TPR@1%%FPR %.3f",
             run.name, cs.design, out["audit_eps_lb_95"], out["audit_eps_lb_99"], out["audit_n_correct"],
             out["audit_n_guesses"], out["audit_n_canaries"], out["audit_auc"], out["audit_tpr_at_fpr_0.01"])
    return out


def audit_upper_bound(params: Params, run: RunConfig, train_metrics: dict, delta: float) -> float:
    """The run's guarantee at the audit's δ, which ε̂ may never exceed: the PRV ε of (σ, q, T) for a record-level
    run; for a user-level run its user-level ε, re-accounted at the audit's δ — Group Privacy: the tight
    mixture-of-Gaussians PLD of a unit's k records (the mechanism's true user-level ε; the naive conversion is
    only looser), User-wise DP-SGD: the PRV ε of (σ, q over units, T). ∞ when the release recorded in the run's
    ``dp_event`` has a part that is not private (DP-Flat's published AWP or layer elimination on private data, DPZero's
    KD on private data): the noisy steps' ε does not bound what such a run leaks, so ε̂ has no finite ceiling."""
    if not run.private:
        return math.inf
    if "dp_event" in train_metrics:
        from empriv.privacy.events import event_from_dict, has_non_private_part

        if has_non_private_part(event_from_dict(train_metrics["dp_event"])):
            return math.inf
    sigma, q = train_metrics["noise_multiplier"], train_metrics["sample_rate"]
    unit = run.privacy_unit
    if unit.user_level and unit.method == "group":
        from empriv.privacy.user_level import group_privacy_epsilon

        return float(group_privacy_epsilon(sigma, unit.k, q, run.steps, delta))
    from empriv.privacy.accounting import epsilon_for

    return epsilon_for(sigma, q, run.steps, delta, "prv")


def audit_user_level(model, canaries, tok, params: Params, delta: float) -> tuple[dict, list[dict]]:
    """The user-level audit of a trained model: ``audit_*`` metrics named as the record-level audit's (ε̂, counts;
    m counts canary units) plus the design under ``user_audit``, and one row per canary unit."""
    from empriv.audit.user_level import audit_user_canaries

    ap = params.audit
    result, rows = audit_user_canaries(model, canaries, eos_id=tok.eos_id, seq_len=params.base.seq_len, delta=delta,
                                       guesses=ap.guesses, aggregate=ap.unit_score, side=ap.guess_side,
                                       batch_size=ap.eval_batch_size)
    labels = [bool(r["member"]) for r in rows]
    metrics = {
        "audit_level": "user", "audit_design": canaries.canary_set.design, "audit_rule": result.rule,
        "audit_delta": delta, "audit_n_canaries": result.m, "audit_n_members": result.n_members,
        "audit_n_guesses": result.r, "audit_n_correct": result.v, "audit_eps_lb_95": result.eps_lb_95,
        "audit_eps_lb_99": result.eps_lb_99, "audit_auc": _auc([r["score"] for r in rows], labels),
        "user_audit": {"records_per_unit": result.records_per_unit, "unit_score": result.aggregate,
                       "n_records": len(canaries.records)},
    }
    return metrics, rows


def _auc(scores: list[float], labels: list[bool]) -> float | None:
    """ROC AUC of the unit scores (members positive); None with one class only."""
    import numpy as np

    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return None
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


def track_audit(tracker, out: dict) -> None:
    """The audit's results in its configuration's W&B run: every ``audit_*`` value as ``audit/*`` in the summary,
    the per-score ROC summaries as the table ``audit/mia``. Ids and numbers only (no canary, no label)."""
    if not tracker.active:
        return
    summary = {f"audit/{k[len('audit_'):]}": v for k, v in out.items() if k.startswith("audit_") and k != "audit_mia"}
    summary["audit/optimistic_eps_lb_max_over_r"] = out.get("optimistic_eps_lb_max_over_r")
    summary["audit/wall_time_s"] = out.get("wall_time_s")
    tracker.summary(summary)
    mia = out.get("audit_mia") or {}
    if mia:
        columns = list(next(iter(mia.values())))
        tracker.table("audit/mia", ["score", *columns], [[name, *(row.get(c) for c in columns)] for name, row in mia.items()])


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/audit.py``): the cube point, as dvc.yaml's matrix builds it."""
    config_stage(main, __doc__, audit=True, argv=argv)
