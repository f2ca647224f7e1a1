"""Audit one trained model with its canaries: MIA scores, ROC, and the one-run ε lower bound.

:func:`audit_canaries` is the core (model + reference + canaries → metrics); the ``audit@<config>`` stage
(:mod:`empriv.pipeline.audit`) trains the configuration *with* the canaries, saves the model and calls it.

The guesses of the one-run audit use one score (``audit.score``, default the loss — Paper A) and
a rule fixed before looking at the results (``audit.rule``): ``top_r`` guesses member for the r
highest scores; ``split_half`` chooses r on a random half and audits the other. The maximum over
``audit.r_grid`` is also reported, under ``optimistic_*`` keys, and is never the audit result.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from empriv.audit import epsilon as eps_mod
from empriv.audit import mia, roc

log = logging.getLogger("empriv.audit")


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


def canary_losses(model, canaries: Sequence, eos_id: int, seq_len: int, loss: str, batch_size: int = 256, bar=None):
    """(per-token NLL [N, L−1], counted-token mask [N, L−1]) of ``canaries`` under ``model``; ``bar``
    (:func:`empriv.infra.progress.progress`) is advanced by the number of canaries scored, batch by batch."""
    from empriv.secrets.canaries import encode_canaries

    ids, mask = encode_canaries(canaries, eos_id, seq_len, loss)
    width = int(mask.nonzero()[:, 1].max()) + 1 if len(canaries) else 2  # no need to run the padding
    ids, mask = ids[:, :width], mask[:, :width]
    if bar is None or not len(canaries):
        return mia.token_losses(model, ids, batch_size), mask[:, 1:].numpy()
    parts = []
    for start in range(0, ids.shape[0], batch_size):
        parts.append(mia.token_losses(model, ids[start : start + batch_size], batch_size))
        bar.update(parts[-1].shape[0])
    return np.concatenate(parts, 0), mask[:, 1:].numpy()


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
    from empriv.infra.progress import progress

    labels = np.array([bool(c.member) for c in audit])
    loss_kind = canary_set.loss
    # four passes: the audited model and the reference over the audit canaries and the population
    with progress(total=2 * (len(audit) + len(population)), desc="audit: scoring canaries", unit="canaries",
                  logger=log) as bar:
        nll, mask = canary_losses(model, audit, eos_id, seq_len, loss_kind, batch_size, bar)
        ref_nll, _ = canary_losses(reference, audit, eos_id, seq_len, loss_kind, batch_size, bar)
        if population:
            pop_nll, pop_mask = canary_losses(model, population, eos_id, seq_len, loss_kind, batch_size, bar)
            pop_ref, _ = canary_losses(reference, population, eos_id, seq_len, loss_kind, batch_size, bar)
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


def reference_model(base, canary_set):
    """The base model (θ₀ of the audit run), for new-token canaries with the same zero rows."""
    from empriv.secrets.canaries import extend_vocabulary

    extend_vocabulary(base, canary_set.n_new_tokens)
    base.eval()
    return base
