"""Model-based secret filtering (the research's appendix B.6), run after the cube's non-private runs.

The ``filter`` stage (:mod:`empriv.pipeline.filter`) loads the secrets and the models of the cube's ε = ∞
configurations, builds the ACR scorer, and calls :func:`filter_secrets`, which keeps:

- Enron (mined, or any string secret), in the research's order: the secrets that every non-private
  model reproduces verbatim (greedy continuation of s₁ equals s₂); whose ACR under the first
  non-private run is ≥ ``secrets.acr_min_finetuned`` (1.5); that the base model does not reproduce;
  and whose ACR under the base model is ≤ ``secrets.acr_max_base`` (0.5). ACR is searched with the
  ``score.acr`` settings (strategy, budget, seeds); the research used one non-private fine-tune for ACR.
  Here a search that finds no prompt (``success`` False: no ACR value, only an upper bound) counts as ACR 0
  (no compression shown), read off the success flag, so such a secret fails the fine-tuned filter and passes
  the base filter.
- TOFU (author → genre): the pairs that every non-private model reveals — its greedy answer (20 new
  tokens) to the attribute prompt contains the genre.

With ``secrets.filter: false`` (the default: at CPU scale the tiny models reproduce nothing, so the
filters would empty the set) the secrets pass through unchanged and the record says the filters did
not run. An enabled filter that removes every secret is an error, not a silent fallback.
"""

from __future__ import annotations

from collections.abc import Callable

from empriv.config import AIR_TEMPLATE, ConfigError



def greedy_text(model, tokenizer, prompt: str, max_new_tokens: int) -> str:
    from empriv.models.lm import sample_continuations

    ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
    out = sample_continuations(model, ids, 1, max_new_tokens, top_k=1)  # top-k 1 = greedy
    return tokenizer.decode(out[0])


def reproduces_verbatim(model, tokenizer, secret: dict) -> bool:
    return greedy_text(model, tokenizer, secret["prompt"], len(tokenizer.encode(secret["continuation"]))).startswith(
        secret["continuation"]
    )


def filter_secrets(secrets: list[dict], nonprivate_models: list, base_model, tokenizer, *, enabled: bool,
                   acr_min_finetuned: float = 1.5, acr_max_base: float = 0.5,
                   acr: Callable[[object, dict], float] | None = None, air_template: str = AIR_TEMPLATE,
                   air_max_new_tokens: int = 20) -> tuple[list[dict], dict]:
    """(kept secrets, record of the filters that ran and what each removed).

    ``acr(model, secret)`` is the secret's ACR under ``model``, 0 when the search found no prompt (the
    stage builds it from :mod:`empriv.score.acr` with the ``score.acr`` settings); without it the two ACR
    filters are recorded as not run."""
    if not enabled:
        return secrets, {"enabled": False, "n_in": len(secrets), "n_out": len(secrets),
                         "filters": [{"name": "model-based filters", "ran": False}]}
    if not nonprivate_models:
        raise ConfigError("secrets.filter is true but the cube has no non-private run: add 'inf' to cube.epsilon")
    genre = [s for s in secrets if s.get("kind") == "author_genre"]
    if genre:
        from empriv.data.tofu import filter_revealed, reveals_genre, training_text

        by_pair = {(s["name"], s["genre"]): s for s in genre}

        def reveals(model):
            return lambda author, g: reveals_genre(
                greedy_text(model, tokenizer, training_text(air_template.replace("{x}", author), "").rstrip(),
                            air_max_new_tokens), g)

        result = filter_revealed(list(by_pair), [reveals(m) for m in nonprivate_models], list(range(len(nonprivate_models))))
        kept = [by_pair[p] for p in result.kept] + [s for s in secrets if s.get("kind") != "author_genre"]
        record = {"filters": [{"name": "revealed by every non-private model (greedy)", "ran": True,
                               "removed": result.n_removed, "models": len(nonprivate_models)}]}
    else:
        from empriv.secrets.candidates import filter_candidates

        kept, record = filter_candidates(
            secrets,
            lambda s: all(reproduces_verbatim(m, tokenizer, s) for m in nonprivate_models),
            lambda s: reproduces_verbatim(base_model, tokenizer, s),
            acr_finetuned=(lambda s: acr(nonprivate_models[0], s)) if acr else None,
            acr_base=(lambda s: acr(base_model, s)) if acr else None,
            thresholds=(acr_min_finetuned, acr_max_base),
        )
    record = {"enabled": True, "n_in": len(secrets), "n_out": len(kept), **{k: v for k, v in record.items() if k == "filters"}}
    if not kept:
        raise ConfigError(
            f"the secret filters removed all {len(secrets)} secrets (record: {record['filters']}): the non-private "
            "models memorise none verbatim — train longer or larger models, or set secrets.filter: false"
        )
    return kept, record
