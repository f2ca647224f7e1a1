"""Memorisation scores of one model on the secrets.

- **VMR** (verbatim memorisation ratio, the research's protocol): prompt with s₁, draw
  ``vmr_samples`` (10) continuations by stochastic decoding (temperature 1.0, top_p 1.0, top_k 50),
  ``max_new_tokens`` = token length of s₂; VMR = fraction whose text begins with s₂ exactly.
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

from empriv.models.lm import conditional_nll, sample_continuations


def verbatim_memorization_ratio(
    model, tokenizer, prompt: str, continuation: str, *, num_samples: int = 10, temperature: float = 1.0,
    top_k: int = 50, top_p: float = 1.0, generator: torch.Generator | None = None,
) -> float:
    p_ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
    max_new = len(tokenizer.encode(continuation))
    outs = sample_continuations(
        model, p_ids, num_samples, max_new, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
    )
    return sum(tokenizer.decode(o).startswith(continuation) for o in outs) / num_samples


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
                  base_model=None) -> list[dict]:
    """Per-secret scores: ids and numbers only (never the secret text).

    With ``base_model``, each secret also gets the base model's exposure gap and the fine-tuned
    model's gap minus it (``exposure_gap_vs_base``).
    """
    gen = torch.Generator().manual_seed(score_params.seed)
    rows = []
    for s in secrets:
        vmr = verbatim_memorization_ratio(
            model, tokenizer, s["prompt"], s["continuation"], num_samples=score_params.vmr_samples,
            temperature=score_params.temperature, top_k=score_params.top_k, top_p=score_params.top_p, generator=gen,
        )
        c_total, c_len = continuation_nll(model, tokenizer, s["prompt"], s["continuation"])
        if controls[s["id"]]:
            gap, secret_nll = exposure_gap(model, tokenizer, s["text"], controls[s["id"]], score_params.eval_batch_size)
        else:  # no format-preserving control exists for this secret: the gap is undefined
            gap, secret_nll = None, conditional_nll(model, [[tokenizer.eos_id]], [tokenizer.encode(s["text"])])[0]
        row = {
            "id": s["id"],
            "vmr": vmr,
            "continuation_nll": c_total / max(c_len, 1),
            "continuation_nll_total": c_total,
            "secret_nll": secret_nll,
            "exposure_gap": gap,
            "frequency": s.get("frequency"),
        }
        if base_model is not None and gap is not None:
            base_gap, _ = exposure_gap(base_model, tokenizer, s["text"], controls[s["id"]], score_params.eval_batch_size)
            row["exposure_gap_base"] = base_gap
            row["exposure_gap_vs_base"] = gap - base_gap
        rows.append(row)
    return rows


def aggregate(rows: Sequence[dict]) -> dict:
    """Average case (mean) and worst case (max memorisation) over secrets (those that have the score)."""
    out = {}
    for key, worst in (("vmr", max), ("exposure_gap", max), ("exposure_gap_vs_base", max), ("continuation_nll", min)):
        vals = [r[key] for r in rows if r.get(key) is not None]
        if not vals:
            continue
        out[f"{key}_mean"] = sum(vals) / len(vals)
        out[f"{key}_worst"] = worst(vals)
    return out


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
