"""Memorisation scores of one model on the secrets.

- **VMR** (string secrets, :mod:`empriv.score.vmr`): 10 sampled continuations of s₁, the fraction
  that reproduce s₂; and the greedy variant.
- **AIR** ((author, genre) secrets, :mod:`empriv.score.air`): does the genre appear in one of 10
  sampled answers to the attribute prompt.
- **ACR** is searched separately (:mod:`empriv.score.acr`, costly) and merged by the score stage; a search that
  finds no prompt is a censored record (no value, an upper bound), so ACR is summarised as a success rate and
  the mean / max over successes only (:func:`aggregate`), frequent and rare secrets apart (:func:`aggregate_acr`).
- **Continuation NLL**: NLL of s₂'s tokens given s₁ (mean per token, and total in nats); lower
  means better memorised.
- **Exposure gap**: mean total NLL of ``n_controls`` format-preserving perturbed controls of the
  secret (digits redrawn, names swapped, see :mod:`empriv.score.perturb`) minus the secret's own
  total NLL, in nats. A model that has not seen the secret scores ≈ 0; memorisation makes it > 0.
  Continuous, so it separates models even where exact-match scores are all 0 (tiny models).
  Controls are not perfectly exchangeable with the secret (different token counts, rarer names),
  so the base model's gap is not exactly 0; **exposure gap vs. base** subtracts it, per secret,
  leaving what fine-tuning added.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from empriv.models.lm import conditional_nll
from empriv.score.air import attribute_inference
from empriv.score.secret_frequency import DEFAULT_RARE_FREQUENCY, is_rare_secret
from empriv.score.vmr import greedy_verbatim_match, verbatim_memorization_ratio

__all__ = ["verbatim_memorization_ratio", "greedy_verbatim_match", "continuation_nll", "exposure_gap",
           "score_secrets", "aggregate", "aggregate_acr", "make_controls"]


def continuation_nll(model, tokenizer, prompt: str, continuation: str) -> tuple[float, int]:
    """(total NLL of s₂ given s₁ in nats, number of s₂ tokens)."""
    c_ids = tokenizer.encode(continuation)
    total = conditional_nll(model, [[tokenizer.eos_id, *tokenizer.encode(prompt)]], [c_ids])[0]
    return total, len(c_ids)


def exposure_gap(model, tokenizer, secret: str, controls: Sequence[str], batch_size: int = 64) -> tuple[float, float]:
    """(mean control total NLL − secret total NLL, secret total NLL), all strings conditioned on EOS."""
    texts = [secret, *controls]
    nlls = conditional_nll(model, [[tokenizer.eos_id]] * len(texts), [tokenizer.encode(t) for t in texts], batch_size)
    secret_nll = nlls[0]
    return sum(nlls[1:]) / len(controls) - secret_nll, secret_nll


def score_secrets(model, tokenizer, secrets: Sequence[dict], controls: dict[str, list[str]], score_params,
                  base_model=None, generator: torch.Generator | None = None) -> list[dict]:
    """Per-secret scores: ids and numbers only (never the secret text), with the secret's ``kind``, ``occurrences``
    and ``frequency`` in the training split (None where the secret record lacks them).

    With ``base_model``, each secret also gets the base model's exposure gap and the fine-tuned
    model's gap minus it (``exposure_gap_vs_base``). ``generator`` drives the sampled decoding
    (VMR, AIR): the scored run's own ``generation`` stream in the pipeline; default one seeded
    with ``score.seed``.
    """
    gen = generator if generator is not None else torch.Generator().manual_seed(score_params.seed)
    rows = []
    for s in secrets:
        measures: dict = {}
        if s.get("kind") == "author_genre":  # TOFU-like: attribute inference
            measures["air"] = attribute_inference(
                model, tokenizer, s["name"], s["genre"], template=score_params.air_template,
                num_samples=score_params.air_samples, max_new_tokens=score_params.air_max_new_tokens,
                temperature=score_params.temperature, top_k=score_params.top_k, top_p=score_params.top_p, generator=gen,
            )
        else:  # Enron-like: verbatim memorisation
            measures["vmr"] = verbatim_memorization_ratio(
                model, tokenizer, s["prompt"], s["continuation"], num_samples=score_params.vmr_samples,
                temperature=score_params.temperature, top_k=score_params.top_k, top_p=score_params.top_p, generator=gen,
            )
            measures["vmr_greedy"] = greedy_verbatim_match(model, tokenizer, s["prompt"], s["continuation"])
        c_total, c_len = continuation_nll(model, tokenizer, s["prompt"], s["continuation"])
        if controls[s["id"]]:
            gap, secret_nll = exposure_gap(model, tokenizer, s["text"], controls[s["id"]], score_params.eval_batch_size)
        else:  # no format-preserving control exists for this secret: the gap is undefined
            gap, secret_nll = None, conditional_nll(model, [[tokenizer.eos_id]], [tokenizer.encode(s["text"])])[0]
        row = {
            "id": s["id"],
            **measures,
            "continuation_nll": c_total / max(c_len, 1),
            "continuation_nll_total": c_total,
            "secret_nll": secret_nll,
            "exposure_gap": gap,
            # how often the secret is in the training split (ACR is reported by it): counts, never text
            "kind": s.get("kind"),
            "occurrences": s.get("occurrences"),
            "frequency": s.get("frequency"),
        }
        if base_model is not None and gap is not None:
            base_gap, _ = exposure_gap(base_model, tokenizer, s["text"], controls[s["id"]], score_params.eval_batch_size)
            row["exposure_gap_base"] = base_gap
            row["exposure_gap_vs_base"] = gap - base_gap
        rows.append(row)
    return rows


def aggregate(rows: Sequence[dict], *, rare_frequency: float = DEFAULT_RARE_FREQUENCY, n_train: int | None = None) -> dict:
    """Average case (``_mean``) and worst case over secrets (those that have the score).

    Memorisation scores (VMR, greedy VMR, AIR): ``_max`` is the worst case. The continuous measures keep their
    ``_worst`` (max exposure gap, min continuation NLL); VMR also keeps ``vmr_worst`` (= ``vmr_max``) for tables
    written before ``_max`` existed.

    ACR is censored (:mod:`empriv.score.acr`) and reported by secret frequency: :func:`aggregate_acr` (with
    ``rare_frequency`` and ``n_train``).
    """
    out = {}
    for key, worst, suffixes in (("vmr", max, ("_max", "_worst")), ("vmr_greedy", max, ("_max",)), ("air", max, ("_max",)),
                                 ("exposure_gap", max, ("_worst",)),
                                 ("exposure_gap_vs_base", max, ("_worst",)), ("continuation_nll", min, ("_worst",))):
        vals = [r[key] for r in rows if r.get(key) is not None]
        if not vals:
            continue
        out[f"{key}_mean"] = sum(vals) / len(vals)
        for suffix in suffixes:
            out[f"{key}{suffix}"] = worst(vals)
    out.update(aggregate_acr(rows, rare_frequency=rare_frequency, n_train=n_train))
    return out


def aggregate_acr(rows: Sequence[dict], *, rare_frequency: float = DEFAULT_RARE_FREQUENCY,
                  n_train: int | None = None) -> dict:
    """The ACR part of :func:`aggregate`: the searched secrets (rows with ``acr_success``; a secret skipped as too
    long has none), frequent and rare ones apart.

    A searched secret is **rare** when its frequency in the training split is ≤ ``rare_frequency``
    (:func:`empriv.score.secret_frequency.is_rare_secret`: the row's ``frequency``, else ``occurrences`` /
    ``n_train``); the others are **frequent**, and so is a secret with neither (rows without frequency information
    aggregate exactly as before the split). Record-level DP bounds one record, not a string repeated in many: the
    two groups are never pooled.

    Frequent secrets keep the keys ACR always had:

    - ``acr_n_searched``, ``acr_n_success`` and ``acr_success_rate`` = n_success / n_searched;
    - ``acr_mean`` / ``acr_max``: over the **successes only**, null when no search succeeded — a failed search is
      censored (no value, an upper bound) and never averaged with the successes;
    - ``acr_bound_max``: the largest upper bound among the failures (every failed secret has ACR ≤ it), null when
      every search succeeded.

    Rare secrets: ``acr_rare_n_searched``, ``acr_rare_n_success``, ``acr_rare_success_rate`` and ``acr_rare_mean``
    (over the successes only, null when none succeeded).

    A group that was not searched has no key at all: without a rare secret no ``acr_rare_*`` key; when every searched
    secret is rare, no frequent key (``acr_n_searched`` … absent, not a success rate of 0 over nothing); no ACR key
    when nothing was searched.
    """
    searched = [r for r in rows if r.get("acr_success") is not None]
    if not searched:
        return {}
    if any(r.get("acr") is None for r in searched if r["acr_success"]):
        raise ValueError("an ACR record with acr_success true has no acr value")
    rare = [is_rare_secret(r, rare_frequency, n_train) for r in searched]
    frequent_rows = [r for r, is_rare in zip(searched, rare) if not is_rare]
    rare_rows = [r for r, is_rare in zip(searched, rare) if is_rare]
    out: dict = {}
    if frequent_rows:
        hits, bounds = _acr_hits_and_bounds(frequent_rows)
        out.update({"acr_n_searched": len(frequent_rows), "acr_n_success": len(hits),
                    "acr_success_rate": len(hits) / len(frequent_rows),
                    "acr_mean": sum(hits) / len(hits) if hits else None, "acr_max": max(hits) if hits else None,
                    "acr_bound_max": max(bounds) if bounds else None})
    if rare_rows:
        hits, _ = _acr_hits_and_bounds(rare_rows)
        out.update({"acr_rare_n_searched": len(rare_rows), "acr_rare_n_success": len(hits),
                    "acr_rare_success_rate": len(hits) / len(rare_rows),
                    "acr_rare_mean": sum(hits) / len(hits) if hits else None})
    return out


def _acr_hits_and_bounds(searched: Sequence[dict]) -> tuple[list[float], list[float]]:
    """(ACR of every success, upper bound of every failure that has one) of searched rows."""
    hits = [float(r["acr"]) for r in searched if r["acr_success"]]
    bounds = [float(r["acr_upper_bound"]) for r in searched if not r["acr_success"] and r.get("acr_upper_bound") is not None]
    return hits, bounds


def make_controls(secrets: Sequence[dict], n_controls: int, seed: int) -> dict[str, list[str]]:
    """Controls per secret: format-preserving perturbations, or for an (author, genre) secret the
    same attribute prompt answered with other genres (from the corpus and a list of 30)."""
    from empriv.score.perturb import perturb

    genres = {s["genre"] for s in secrets if s.get("kind") == "author_genre"}
    if genres:
        from empriv.data.synthetic_tofu import GENRES

        genres |= set(GENRES)
    out = {}
    for s in secrets:
        rng = random.Random(f"{seed}:{s['id']}")
        if s.get("kind") == "author_genre":
            others = sorted(g for g in genres if g.lower() != s["genre"].lower())
            picks = rng.sample(others, n_controls) if n_controls <= len(others) else [rng.choice(others) for _ in range(n_controls)]
            out[s["id"]] = [f"{s['prompt']} {g}" for g in picks]
        else:
            try:
                out[s["id"]] = perturb(s["text"], n_controls, rng)
            except ValueError:  # nothing to perturb (e.g. a mined boilerplate line): no exposure gap
                out[s["id"]] = []
    return out
