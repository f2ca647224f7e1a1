"""Model-based secret filtering (the research's appendix B.6), run after the cube's non-private runs.

The ``filter`` stage (:mod:`empriv.pipeline.filter`) loads the secrets, checks that every ε = ∞ run of the cube
has been trained, builds the ACR scorer, and calls :func:`filter_secrets` with those runs as :class:`LazyModels`
(each model loaded when the filters reach it), which keeps:

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

Memory: the non-private models are evaluated one at a time — loaded, asked about every secret still in question,
freed (``del``, garbage collection, and on CUDA the cache emptied) — so at most one fine-tuned model (plus the base)
is resident, whatever the size of the cube (with a plain list of loaded models the caller holds them all, as
the tests do). A secret one model fails to reproduce (or a pair it does not reveal) is not asked of the others,
and once none is left no further model is loaded. The verbatim test asks the first non-private run last, so it
is still loaded for the ACR search; the kept secrets and the record are those of asking every model about every
secret (greedy decoding is deterministic, and "every model" does not depend on the order).

With ``secrets.filter: false`` (the default: at CPU scale the tiny models reproduce nothing, so the
filters would empty the set) the secrets pass through unchanged and the record says the filters did
not run. An enabled filter that removes every secret is an error, not a silent fallback.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Sequence
from typing import Any

from empriv.config import AIR_TEMPLATE, ConfigError

log = logging.getLogger("empriv.filter")


class LazyModels(Sequence):
    """The non-private models, loaded on demand: ``models[i]`` calls ``loaders[i]()`` and returns a fresh model that
    nothing else references, which the caller frees (``del``) before asking for the next; ``len`` loads nothing.
    :func:`filter_secrets` takes this (the ``filter`` stage passes one loader per ε = ∞ run) or a plain list of
    loaded models."""

    def __init__(self, loaders: Sequence[Callable[[], Any]]):
        self._loaders = list(loaders)
        for i, f in enumerate(self._loaders):
            if not callable(f):
                raise ValueError(f"loaders[{i}] must be callable (it loads one model), got {type(f).__name__}")

    def __len__(self) -> int:
        return len(self._loaders)

    def __getitem__(self, i: int):
        if not isinstance(i, int):
            raise TypeError(f"LazyModels loads one model per integer index, got {type(i).__name__}")
        return self._loaders[i]()


def release_memory() -> None:
    """Reclaim what was just freed with ``del`` (garbage collection; on CUDA, the cached blocks go back to the
    device), so the next model loads into the memory the previous one held."""
    gc.collect()
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


FILTER_RUN_RULES = ("all", "most_compute", "most_compute_first_seed")


def select_filter_runs(runs: Sequence, rule: str = "all") -> list:
    """The ε = ∞ runs the filters ask, in the cube's order (``secrets.filter_runs``).

    ``runs`` are :class:`~empriv.config.RunConfig` (anything with ``private``, ``batch_size``, ``steps``,
    ``learning_rate``, ``seed``, ``unit``, ``method``). ``all``: every non-private run. ``most_compute``: the runs
    of the one non-private configuration (unit, method, b, T, η) with the largest b·T, ties to the larger η, then to
    the first in the cube's order — every seed of it. ``most_compute_first_seed``: only the first of those (the
    research's Enron filter asked one non-private GPT-2-L fine-tune; its TOFU filter, three seeds of one)."""
    if rule not in FILTER_RUN_RULES:
        raise ValueError(f"secrets.filter_runs: {rule!r} is not one of {', '.join(FILTER_RUN_RULES)}")
    nonprivate = [r for r in runs if not r.private]
    if rule == "all" or not nonprivate:
        return nonprivate
    order: dict[tuple, int] = {}
    for r in nonprivate:
        order.setdefault((r.unit, r.method, r.batch_size, r.steps, r.learning_rate), len(order))
    best = max(order, key=lambda c: (c[2] * c[3], c[4], -order[c]))
    chosen = [r for r in nonprivate if (r.unit, r.method, r.batch_size, r.steps, r.learning_rate) == best]
    return chosen[:1] if rule == "most_compute_first_seed" else chosen


def greedy_text(model, tokenizer, prompt: str, max_new_tokens: int) -> str:
    from empriv.models.lm import sample_continuations

    ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
    out = sample_continuations(model, ids, 1, max_new_tokens, top_k=1)  # top-k 1 = greedy
    return tokenizer.decode(out[0])


def reproduces_verbatim(model, tokenizer, secret: dict) -> bool:
    return greedy_text(model, tokenizer, secret["prompt"], len(tokenizer.encode(secret["continuation"]))).startswith(
        secret["continuation"]
    )


def filter_secrets(secrets: list[dict], nonprivate_models: Sequence, base_model, tokenizer, *, enabled: bool,
                   acr_min_finetuned: float = 1.5, acr_max_base: float = 0.5,
                   acr: Callable[[object, dict], float] | None = None, air_template: str = AIR_TEMPLATE,
                   air_max_new_tokens: int = 20) -> tuple[list[dict], dict]:
    """(kept secrets, record of the filters that ran and what each removed).

    ``nonprivate_models`` is a sequence of the non-private models in the cube's order: a list of loaded models, or
    a :class:`LazyModels` that loads each when it is reached (then at most one is resident at a time; see the
    module docstring). ``acr(model, secret)`` is the secret's ACR under ``model``, 0 when the search found no
    prompt (the stage builds it from :mod:`empriv.score.acr` with the ``score.acr`` settings); without it the two
    ACR filters are recorded as not run."""
    if not enabled:
        return secrets, {"enabled": False, "n_in": len(secrets), "n_out": len(secrets),
                         "filters": [{"name": "model-based filters", "ran": False}]}
    if not isinstance(nonprivate_models, Sequence):
        raise ValueError("nonprivate_models must be a sequence (a list of models, or LazyModels of loaders), got "
                         f"{type(nonprivate_models).__name__}")
    n_models = len(nonprivate_models)
    if not n_models:
        raise ConfigError("secrets.filter is true but the cube has no non-private run: add 'inf' to cube.epsilon")
    genre = [s for s in secrets if s.get("kind") == "author_genre"]
    if genre:
        from empriv.data.tofu import filter_revealed, reveals_genre, training_text

        by_pair = {(s["name"], s["genre"]): s for s in genre}

        def reveals(model):
            return lambda author, g: reveals_genre(
                greedy_text(model, tokenizer, training_text(air_template.replace("{x}", author), "").rstrip(),
                            air_max_new_tokens), g)

        in_question = list(by_pair)
        for i in range(n_models):
            if not in_question:
                break
            model = nonprivate_models[i]
            in_question = filter_revealed(in_question, [reveals(model)], [i]).kept
            del model
            release_memory()
            log.info("non-private model %d of %d: %d of %d pairs revealed so far", i + 1, n_models, len(in_question),
                     len(by_pair))
        kept = [by_pair[p] for p in in_question] + [s for s in secrets if s.get("kind") != "author_genre"]
        record = {"filters": [{"name": "revealed by every non-private model (greedy)", "ran": True,
                               "removed": len(by_pair) - len(in_question), "models": n_models}]}
    else:
        from empriv.secrets.candidates import filter_candidates

        # the first run is asked last, so it is still loaded when the ACR filter searches under it
        in_question, first = list(secrets), None
        for i in [*range(1, n_models), 0]:
            if not in_question:
                break
            model = nonprivate_models[i]
            in_question = [s for s in in_question if reproduces_verbatim(model, tokenizer, s)]
            if i == 0 and acr is not None and in_question:
                first = model
            del model
            release_memory()
            log.info("non-private model %d of %d: %d of %d secrets reproduced verbatim so far", i + 1, n_models,
                     len(in_question), len(secrets))
        reproduced = {id(s) for s in in_question}
        try:
            kept, record = filter_candidates(
                secrets,
                lambda s: id(s) in reproduced,
                lambda s: reproduces_verbatim(base_model, tokenizer, s),
                acr_finetuned=(lambda s: acr(first, s)) if acr else None,
                acr_base=(lambda s: acr(base_model, s)) if acr else None,
                thresholds=(acr_min_finetuned, acr_max_base),
            )
        finally:
            first = None
            release_memory()
    record = {"enabled": True, "n_in": len(secrets), "n_out": len(kept), **{k: v for k, v in record.items() if k == "filters"}}
    if not kept:
        raise ConfigError(
            f"the secret filters removed all {len(secrets)} secrets (record: {record['filters']}): the non-private "
            "models memorise none verbatim — train longer or larger models, or set secrets.filter: false"
        )
    return kept, record
