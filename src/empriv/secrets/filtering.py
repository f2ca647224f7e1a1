"""Model-based secret filtering (the research's appendix B.6), run after the cube's non-private runs.

The ``filter`` stage reads the secrets and the models of the cube's ε = ∞ configurations and keeps:

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

import logging
from pathlib import Path

from empriv.config import ConfigError, Params
from empriv.io import read_jsonl, write_json, write_jsonl

log = logging.getLogger("empriv.filter")

FILTERED_PATH = Path("data/secrets_filtered.jsonl")
AIR_MAX_NEW_TOKENS = 20


def greedy_text(model, tokenizer, prompt: str, max_new_tokens: int) -> str:
    from empriv.models.lm import sample_continuations

    ids = [tokenizer.eos_id, *tokenizer.encode(prompt)]
    out = sample_continuations(model, ids, 1, max_new_tokens, top_k=1)  # top-k 1 = greedy
    return tokenizer.decode(out[0])


def reproduces_verbatim(model, tokenizer, secret: dict) -> bool:
    return greedy_text(model, tokenizer, secret["prompt"], len(tokenizer.encode(secret["continuation"]))).startswith(
        secret["continuation"]
    )


def filter_secrets(params: Params, secrets: list[dict], nonprivate_models: list, base_model, tokenizer) -> tuple[list[dict], dict]:
    """(kept secrets, record of the filters that ran and what each removed)."""
    if not params.secrets.filter:
        return secrets, {"enabled": False, "n_in": len(secrets), "n_out": len(secrets),
                         "filters": [{"name": "model-based filters", "ran": False}]}
    if not nonprivate_models:
        raise ConfigError("secrets.filter is true but the cube has no non-private run: add 'inf' to cube.epsilon")
    genre = [s for s in secrets if s.get("kind") == "author_genre"]
    if genre:
        from empriv.data.tofu import filter_revealed, reveals_genre

        by_pair = {(s["name"], s["genre"]): s for s in genre}

        def reveals(model):
            return lambda author, g: reveals_genre(
                greedy_text(model, tokenizer, f"Question: What genre does {author} write in?\nAnswer:", AIR_MAX_NEW_TOKENS), g)

        result = filter_revealed(list(by_pair), [reveals(m) for m in nonprivate_models], list(range(len(nonprivate_models))))
        kept = [by_pair[p] for p in result.kept] + [s for s in secrets if s.get("kind") != "author_genre"]
        record = {"filters": [{"name": "revealed by every non-private model (greedy)", "ran": True,
                               "removed": result.n_removed, "models": len(nonprivate_models)}]}
    else:
        from empriv.score.acr import adversarial_compression_ratio, settings_from_params
        from empriv.secrets.mining import filter_candidates

        settings = settings_from_params(params.score.acr)

        def acr_under(model):
            # A search that finds no prompt measured nothing (res.acr is None; the score stage reports it as a
            # failure with an upper bound): it counts as 0 here, decided by the success flag, so a base model that
            # cannot be made to emit the secret passes the base filter whatever the secret's length (and the bound).
            def value(s):
                res = adversarial_compression_ratio(model, tokenizer.encode(s["text"]), settings, key=s["id"], progress=True)
                return res.acr if res.success else 0.0
            return value

        kept, record = filter_candidates(
            secrets,
            lambda s: all(reproduces_verbatim(m, tokenizer, s) for m in nonprivate_models),
            lambda s: reproduces_verbatim(base_model, tokenizer, s),
            acr_finetuned=acr_under(nonprivate_models[0]),
            acr_base=acr_under(base_model),
            thresholds=(params.secrets.acr_min_finetuned, params.secrets.acr_max_base),
        )
    record = {"enabled": True, "n_in": len(secrets), "n_out": len(kept), **{k: v for k, v in record.items() if k == "filters"}}
    if not kept:
        raise ConfigError(
            f"the secret filters removed all {len(secrets)} secrets (record: {record['filters']}): the non-private "
            "models memorise none verbatim — train longer or larger models, or set secrets.filter: false"
        )
    return kept, record


def run_filter(params: Params, out_path: str | Path = FILTERED_PATH, metrics_path: str | Path = "metrics/filter.json") -> dict:
    from empriv.models.adapters import load_finetuned
    from empriv.models.base import BASE_DIR, TOKENIZER_DIR
    from empriv.models.registry import load_model
    from empriv.models.tokenizer import Tokenizer
    from empriv.secrets.stage import SECRETS_PATH
    from empriv.train.run import MODELS_DIR

    secrets = read_jsonl(SECRETS_PATH)
    models, base, tok = [], None, None
    if params.secrets.filter:
        tok = Tokenizer.load(TOKENIZER_DIR)
        base = load_model(BASE_DIR)
        for run in params.runs():
            if not run.private:
                path = MODELS_DIR / run.name
                if not path.exists():
                    raise FileNotFoundError(f"{path} (the non-private run {run.name} must be trained first)")
                models.append(load_finetuned(path, BASE_DIR))
    kept, record = filter_secrets(params, secrets, models, base, tok)
    write_jsonl(out_path, kept)
    metrics = {**record, "kept": [s["id"] for s in kept]}
    write_json(metrics_path, metrics)
    log.info("secret filters %s: %d of %d secrets kept", "ran" if record["enabled"] else "disabled", len(kept), len(secrets))
    return metrics
