"""filter: the model-based secret filters (appendix B.6) after the cube's non-private runs →
data/secrets_filtered.jsonl and records/filter.json (ids and counts, never text).

This module checks that every ε = ∞ run of the cube has been trained, loads the base, and builds the ACR scorer
from :mod:`empriv.score.acr` with the ``score.acr`` settings; :func:`empriv.secrets.filtering.filter_secrets`
decides, loading the non-private runs one at a time (:class:`~empriv.secrets.filtering.LazyModels`): at most one
fine-tuned model and the base are in memory at once. With ``secrets.filter: false`` no model is loaded and the
secrets pass through.
"""

from __future__ import annotations

import logging
from pathlib import Path

from empriv import paths
from empriv.config import Params

log = logging.getLogger("empriv.filter")


def acr_scorer(params: Params, tokenizer):
    """``acr(model, secret)``: the secret's ACR under ``model`` with the ``score.acr`` settings; a search that
    finds no prompt measured nothing (no ACR value, only a bound) and counts as 0 (see the filtering module)."""
    from empriv.score.acr import acr_target_ids, adversarial_compression_ratio, settings_from_params

    settings = settings_from_params(params.score.acr)

    def acr(model, secret: dict) -> float:
        res = adversarial_compression_ratio(model, acr_target_ids(secret, tokenizer), settings, key=secret["id"], progress=True)
        return res.acr if res.success else 0.0

    return acr


def filter_runs(params: Params) -> list:
    """The ε = ∞ runs of the cube the filters ask (``secrets.filter_runs``), in the cube's order."""
    from empriv.secrets.filtering import select_filter_runs

    return select_filter_runs(params.runs(), params.secrets.filter_runs)


def nonprivate_models(params: Params, runs_dir: Path = paths.RUNS_DIR):
    """The ε = ∞ runs the filters ask (:func:`filter_runs`), in the cube's order, as a
    :class:`~empriv.secrets.filtering.LazyModels` (each run is loaded only when the filters reach it). Every run's
    directory is checked here, before any model is loaded: a missing one raises ``FileNotFoundError`` naming it."""
    from functools import partial

    from empriv.models.adapters import load_finetuned
    from empriv.secrets.filtering import LazyModels

    loaders = []
    for run in filter_runs(params):
        path = Path(runs_dir) / run.file_stem
        if not path.exists():
            raise FileNotFoundError(f"{path} (the non-private run {run.name} must be trained first)")
        loaders.append(partial(load_finetuned, path, paths.BASE_DIR))
    return LazyModels(loaders)


def main(params: Params, secrets_path: str | Path = paths.SECRETS, out_path: str | Path = paths.FILTERED_SECRETS,
         metrics_path: str | Path = paths.FILTER_METRICS) -> dict:
    from empriv.io import read_jsonl, write_json, write_jsonl
    from empriv.pipeline.staged_outputs import StagedOutputs
    from empriv.secrets.filtering import filter_secrets
    from empriv.io import ensure_writable
    from empriv.stage import set_threads

    ensure_writable(out_path, metrics_path)  # before the model-based filters
    set_threads(params)
    sp = params.secrets
    secrets = read_jsonl(secrets_path)
    models, base, tok, acr = [], None, None, None
    if sp.filter:
        from empriv.pipeline.common import load_base, load_tokenizer

        models = nonprivate_models(params)  # checks every run is there before anything is loaded
        tok = load_tokenizer()
        base = load_base()
        acr = acr_scorer(params, tok)
    kept, record = filter_secrets(secrets, models, base, tok, enabled=sp.filter, acr_min_finetuned=sp.acr_min_finetuned,
                                  acr_max_base=sp.acr_max_base, acr=acr, air_template=params.score.air_template,
                                  air_max_new_tokens=params.score.air_max_new_tokens)
    if sp.filter:  # which fine-tunes decided (run names; no secret text)
        record = {**record, "filter_runs": sp.filter_runs, "runs": [r.name for r in filter_runs(params)]}
    metrics = {**record, "kept": [s["id"] for s in kept]}
    with StagedOutputs() as out:  # the kept secrets and their record replaced together (no partial outputs)
        write_jsonl(out.file(out_path), kept)
        write_json(out.file(metrics_path), metrics)
    log.info("secret filters %s: %d of %d secrets kept", "ran" if record["enabled"] else "disabled", len(kept), len(secrets))
    return metrics


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/filter.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
