"""Scoring one fine-tuned model: utility and memorisation (the score stage's library core)."""

from __future__ import annotations

import logging
import time

from empriv.config import Params, RunConfig

log = logging.getLogger("empriv.score")


def score_model(params: Params, run: RunConfig, model, base_model, tokenizer, secrets: list[dict],
                test_texts: list[str]) -> dict:
    """Utility on ``test_texts`` and every memorisation score of ``secrets`` for the model of ``run``."""
    import torch

    from empriv.infra.progress import progress
    from empriv.randomness import RunStreams
    from empriv.score.memorization import aggregate, make_controls, score_secrets
    from empriv.score.utility import answer_nll, test_nll as test_nll_of

    t0 = time.time()
    sp = params.score
    tofu = params.data.source.endswith("tofu")
    with torch.no_grad():
        utility = answer_nll if tofu else test_nll_of
        test_nll = utility(model, tokenizer, test_texts, params.base.seq_len, sp.eval_batch_size)
        # Sampled decoding draws from the run's own stream (empriv.randomness); controls are common to all runs.
        streams = RunStreams.of(run, method=params.train.run_method)
        controls = make_controls(secrets, sp.n_controls, sp.seed)
        generator = streams.generator(f"generation:{sp.seed}")
        # One secret at a time for the progress report: the one generator is drawn from in the same order, so
        # the rows are those of a single call over every secret.
        rows = []
        for secret in progress(secrets, desc=f"score {run.name}", unit="secrets", logger=log):
            rows += score_secrets(model, tokenizer, [secret], controls, sp, base_model=base_model, generator=generator)
    acr_record = run_acr(model, tokenizer, secrets, rows, sp.acr, run)
    metrics = {
        "config": run.name,
        **run.as_dict(),
        "test_nll": test_nll,
        "utility": "answer-token NLL" if tofu else "token NLL",
        # ACR by secret frequency: the acr_* keys over the frequent secrets, acr_rare_* over the rare ones
        **aggregate(rows, rare_frequency=sp.acr.rare_frequency),
        "n_secrets": len(rows),
        "vmr_protocol": {"samples": sp.vmr_samples, "temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
                         "max_new_tokens": "token length of s2"},
        "n_controls": sp.n_controls,
        "acr_protocol": acr_record,
        "per_secret": rows,
        "wall_time_s": time.time() - t0,
    }
    shown = ", ".join(f"{k} {metrics[k]:.3f}" for k in ("exposure_gap_mean", "exposure_gap_vs_base_mean", "vmr_mean",
                                                          "air_mean") if metrics.get(k) is not None)
    if metrics.get("acr_n_searched"):
        shown += (f", ACR found a prompt for {metrics['acr_n_success']}/{metrics['acr_n_searched']} frequent secrets"
                  + (f" (mean {metrics['acr_mean']:.3f}, max {metrics['acr_max']:.3f} over those)" if metrics["acr_n_success"] else ""))
    if metrics.get("acr_rare_n_searched"):
        shown += (f", for {metrics['acr_rare_n_success']}/{metrics['acr_rare_n_searched']} rare secrets (≤ "
                  f"{100 * sp.acr.rare_frequency:g} % of the records)"
                  + (f" (mean {metrics['acr_rare_mean']:.3f} over those)" if metrics["acr_rare_n_success"] else ""))
    log.info("%s: test NLL %.4f, %s (%.1f s)", run.name, test_nll, shown, metrics["wall_time_s"])
    return metrics


def acr_secrets(secrets: list[dict], acr_params) -> list[dict]:
    """The secrets ACR is searched for: string (Enron-like) secrets, the first ``max_secrets``."""
    chosen = [s for s in secrets if s.get("kind") != "author_genre"]
    return chosen if acr_params.max_secrets is None else chosen[: acr_params.max_secrets]


def run_acr(model, tokenizer, secrets: list[dict], rows: list[dict], acr_params, run: RunConfig) -> dict:
    """Search ACR where params ask for it; merge each secret's record into its row; describe what ran.

    Each searched secret's row gets ``acr_success``, ``acr`` (None on a failure) and ``acr_upper_bound`` (failures);
    :func:`empriv.score.memorization.aggregate` turns them into the run's success rate and ACR over successes, the
    frequent and the rare secrets apart. ``n_skipped`` counts secrets too long for the model's window (not searched),
    never failed searches. The record holds every search setting and ``rare_frequency``, the split the run's
    aggregates (and the analysis of its rows) use."""
    from empriv.score.acr import acr_of_secrets, settings_from_params

    settings = settings_from_params(acr_params)
    chosen = acr_secrets(secrets, acr_params) if acr_params.applies_to(run) else []
    # every search setting, from the settings model itself (a new one is recorded without a line here)
    record = {"ran": bool(chosen), "n_secrets": len(chosen), **settings.model_dump(mode="json"), "lengths": "tokens",
              "rare_frequency": acr_params.rare_frequency}  # how the searches are reported, not a search setting
    if not chosen:
        record["why_not"] = ("score.acr.enabled is false" if not acr_params.enabled else
                             "no string (Enron-like) secrets" if not acr_secrets(secrets, acr_params) else
                             "this run's seed/ε is not in score.acr.training_seeds/epsilons")
        return record
    by_id = acr_of_secrets(model, tokenizer, chosen, settings)
    for row in rows:
        if row["id"] in by_id:
            row.update(by_id[row["id"]])
    searched = [r for r in by_id.values() if r.get("acr_success") is not None]  # failures included (acr None)
    record["n_skipped"] = len(by_id) - len(searched)
    record["passes"] = sum(r["acr_forward_calls"] + r["acr_backward_calls"] for r in searched)
    record["wall_time_s"] = sum(r["acr_wall_time_s"] for r in searched)
    return record
