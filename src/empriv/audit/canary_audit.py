"""Audit one trained model with its canaries: MIA scores, ROC, and the one-run ε lower bound.

:func:`audit_canaries` is the library core (model + reference + canaries → metrics);
:func:`audit_run` is the ``audit@<config>`` stage: train the configuration *with* the canaries
(``empriv.train.run.train_model``), save the model, audit it, write ``metrics/audit/<config>.json``.

The guesses of the one-run audit use one score (``audit.score``, default the loss — Paper A) and
a rule fixed before looking at the results (``audit.rule``): ``top_r`` guesses member for the r
highest scores; ``split_half`` chooses r on a random half and audits the other. The maximum over
``audit.r_grid`` is also reported, under ``optimistic_*`` keys, and is never the audit result.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from empriv.audit import epsilon as eps_mod
from empriv.audit import mia, roc

log = logging.getLogger("empriv.audit")

AUDIT_MODELS_DIR = Path("models/audit")
AUDIT_METRICS_DIR = Path("metrics/audit")


def canary_bytes(canary, tokenizer=None) -> bytes:
    """The bytes zlib compresses for a canary: its decoded text, new tokens as ``<|new:ID|>``."""
    if tokenizer is None:
        return " ".join(map(str, canary.tokens)).encode()
    vocab = tokenizer.vocab_size
    parts: list[str] = []
    run: list[int] = []
    for t in canary.tokens:
        if t < vocab:
            run.append(t)
        else:
            if run:
                parts.append(tokenizer.decode(run))
                run = []
            parts.append(f"<|new:{t}|>")
    if run:
        parts.append(tokenizer.decode(run))
    return "".join(parts).encode("utf-8")


def canary_losses(model, canaries: Sequence, eos_id: int, seq_len: int, loss: str, batch_size: int = 256):
    """(per-token NLL [N, L−1], counted-token mask [N, L−1]) of ``canaries`` under ``model``."""
    from empriv.secrets.canaries import encode_canaries

    ids, mask = encode_canaries(canaries, eos_id, seq_len, loss)
    width = int(mask.nonzero()[:, 1].max()) + 1 if len(canaries) else 2  # no need to run the padding
    ids, mask = ids[:, :width], mask[:, :width]
    return mia.token_losses(model, ids, batch_size), mask[:, 1:].numpy()


def audit_canaries(model, reference, canary_set, *, eos_id: int, seq_len: int, delta: float, tokenizer=None,
                   score: str = "loss", rule: str = "top_r", guesses: int = 100, guess_side: str = "members",
                   r_grid: Sequence[int] = (10, 20, 50, 100, 200), min_k: float = 0.2, rmia_gamma: float = 1.0,
                   rmia_alpha: float = 0.0, batch_size: int = 256, seed: int = 0) -> tuple[dict, list[dict]]:
    """Score every audit canary with every MIA, summarise the ROCs and bound ε. Returns
    (metrics, per-canary rows); rows hold ids, labels and scores only (no tokens)."""
    if score not in mia.SCORES:
        raise ValueError(f"audit.score must be one of {', '.join(mia.SCORES)}, got {score!r}")
    if rule not in ("top_r", "split_half"):
        raise ValueError(f"audit.rule must be 'top_r' or 'split_half', got {rule!r}")
    audit, population = canary_set.audit, canary_set.population
    if score == "rmia" and not population:
        raise ValueError("audit.score 'rmia' needs population canaries (canaries.n_population > 0)")
    labels = np.array([bool(c.member) for c in audit])
    loss_kind = canary_set.loss
    nll, mask = canary_losses(model, audit, eos_id, seq_len, loss_kind, batch_size)
    ref_nll, _ = canary_losses(reference, audit, eos_id, seq_len, loss_kind, batch_size)
    if population:
        pop_nll, pop_mask = canary_losses(model, population, eos_id, seq_len, loss_kind, batch_size)
        pop_ref, _ = canary_losses(reference, population, eos_id, seq_len, loss_kind, batch_size)
    else:
        pop_nll = pop_mask = pop_ref = None
    scores = mia.all_scores(nll, mask, ref_nll, [canary_bytes(c, tokenizer) for c in audit],
                            pop_nll, pop_mask, pop_ref, min_k=min_k, gamma=rmia_gamma, alpha=rmia_alpha)
    losses = mia.mean_loss(nll, mask)
    per_score = {name: roc.summarize(s, labels).as_dict() for name, s in scores.items()}
    primary = scores[score]
    m = len(audit)
    if rule == "top_r":
        if guesses > m:
            raise ValueError(f"audit.guesses = {guesses} must be <= the number of canaries {m}")
        result = eps_mod.top_r_audit(primary, labels, guesses, delta, guess_side)
    else:
        result = eps_mod.split_half_audit(primary, labels, r_grid, delta, seed, guess_side)
    optimistic = {
        str(c): eps_mod.optimistic_max_over_guesses(primary, labels, r_grid, delta, c, guess_side)
        for c in eps_mod.CONFIDENCES
    }
    head = per_score[score]
    metrics = {
        "audit_eps_lb_95": result.epsilon_lb[0.95],
        "audit_eps_lb_99": result.epsilon_lb[0.99],
        "audit_auc": head["auc"],
        "audit_tpr_at_fpr_0.001": head["tpr_at_fpr_0.001"],
        "audit_tpr_at_fpr_0.01": head["tpr_at_fpr_0.01"],
        "audit_design": canary_set.design,
        "audit_n_canaries": m,
        "audit_n_guesses": result.r,
        "audit_n_correct": result.v,
        "audit_n_members": int(labels.sum()),
        "audit_score": score,
        "audit_rule": result.rule,
        "audit_delta": delta,
        "audit_loss": loss_kind,
        "audit_prefix": canary_set.prefix,
        "audit_dp_flat_precision": roc.dp_flat_precision(losses, labels, seed=seed),
        "audit_loss_members_mean": float(losses[labels].mean()),
        "audit_loss_nonmembers_mean": float(losses[~labels].mean()),
        "audit_mia": per_score,
        "optimistic_eps_lb_max_over_r": optimistic,
    }
    rows = [{"id": c.id, "member": bool(c.member), "loss": float(losses[i]),
             **{f"score_{k}": float(v[i]) for k, v in scores.items()}} for i, c in enumerate(audit)]
    return metrics, rows


def reference_model(canary_set):
    """The base model (θ₀ of the audit run): for new-token canaries with the same zero rows."""
    from empriv.models.base import BASE_DIR
    from empriv.models.registry import load_model
    from empriv.secrets.canaries import extend_vocabulary

    ref = load_model(BASE_DIR)
    extend_vocabulary(ref, canary_set.n_new_tokens)
    ref.eval()
    return ref


def audit_run(params, run, canaries_dir=None, models_dir: str | Path = AUDIT_MODELS_DIR,
              metrics_dir: str | Path = AUDIT_METRICS_DIR) -> dict:
    """The ``audit@<config>`` stage: train ``run`` with the canaries, save it, audit it."""
    from empriv.io import atomic_dir, write_json, write_jsonl
    from empriv.models.adapters import save_finetuned
    from empriv.models.base import TOKENIZER_DIR
    from empriv.models.registry import resolve_device
    from empriv.models.tokenizer import Tokenizer
    from empriv.secrets.canaries import CANARIES_DIR, CanarySet
    from empriv.train.with_canaries import train_model

    t0 = time.time()
    cs = CanarySet.load(canaries_dir or CANARIES_DIR)
    ap = params.audit
    if ap.method is not None and ap.method != params.train.method:
        params = params.model_copy(update={"train": params.train.model_copy(update={"method": ap.method})})
    model, train_metrics = train_model(params, run, canaries=cs, job_type="audit", tracker_name=f"audit-{run.name}")
    tok = Tokenizer.load(TOKENIZER_DIR)
    delta = ap.delta if ap.delta is not None else train_metrics["delta"]
    model.eval()
    t_score = time.time()
    device = resolve_device(params.runtime.device)  # train_model hands the model back on the CPU
    model.to(device)
    metrics, rows = audit_canaries(
        model, reference_model(cs).to(device), cs, eos_id=tok.eos_id, seq_len=params.base.seq_len, delta=delta, tokenizer=tok,
        score=ap.score, rule=ap.rule, guesses=ap.guesses, guess_side=ap.guess_side, r_grid=ap.r_grid,
        min_k=ap.min_k, rmia_gamma=ap.rmia_gamma, rmia_alpha=ap.rmia_alpha, batch_size=ap.eval_batch_size, seed=ap.seed,
    )
    model.to("cpu")
    # The accountant's ε at the audit's δ: the upper bound ε̂ must never exceed (else DP-SGD is broken).
    if run.private:
        from empriv.privacy.accounting import epsilon_for

        upper = epsilon_for(train_metrics["noise_multiplier"], train_metrics["sample_rate"], run.steps, delta, "prv")
    else:
        upper = math.inf
    metrics["audit_epsilon_upper"] = upper
    keep = ("method", "optimizer", "clip_norm", "n", "n_data", "n_canaries_included", "n_new_tokens", "delta",
            "sample_rate", "steps", "noise_multiplier", "accountant", "epsilon_prv", "epsilon_rdp", "sampler",
            "final_loss", "empty_batches", "precision", "micro_batch_size")
    out = {
        "config": run.name,
        **run.as_dict(),
        **metrics,
        "train": {k: train_metrics.get(k) for k in keep},
        "score_time_s": time.time() - t_score,
        "wall_time_s": time.time() - t0,
    }
    with atomic_dir(Path(models_dir) / run.name) as tmp:
        if params.train.method == "lora":
            # LoRA audits also train the embeddings (new-token rows): save the merged model whole.
            model = model.merge_and_unload()
        # The tokenizer is the base's: new-token canaries are embedding rows past its vocabulary.
        save_finetuned(model, "full", tmp, tokenizer_dir=TOKENIZER_DIR)
        write_jsonl(Path(tmp) / "canary_scores.jsonl", rows)
        write_json(Path(metrics_dir) / f"{run.name}.json", out)
    log.info("audit %s: design %s, eps_lb 95%% %.3f / 99%% %.3f (%d/%d correct of %d canaries), AUC %.3f, TPR@1%%FPR %.3f",
             run.name, cs.design, out["audit_eps_lb_95"], out["audit_eps_lb_99"], out["audit_n_correct"],
             out["audit_n_guesses"], out["audit_n_canaries"], out["audit_auc"], out["audit_tpr_at_fpr_0.01"])
    return out


def audit_run_from_args(params, args):
    """The audit-cube point named on the stage's command line; it must belong to ``audit.cube``."""
    from empriv.config import ConfigError, RunConfig

    try:
        text = str(args.epsilon).strip()
        epsilon = math.inf if text.lower() in ("inf", ".inf", "infinity") else float(text)
    except ValueError:
        raise ConfigError(f"--epsilon must be a number or 'inf', got {args.epsilon!r}") from None
    wanted = RunConfig(epsilon, int(args.batch_size), int(args.steps), float(args.learning_rate), int(args.seed))
    matches = [r for r in params.audit_runs() if r == wanted]
    if not matches:
        given = f"eps{args.epsilon}-b{args.batch_size}-T{args.steps}-lr{args.learning_rate}-s{args.seed}"
        raise ConfigError(f"configuration {given} is not in params.yaml's audit.cube")
    run = matches[0]
    if args.name != run.name:
        raise ConfigError(f"--name {args.name!r} does not match the configuration's name {run.name!r}")
    return run
