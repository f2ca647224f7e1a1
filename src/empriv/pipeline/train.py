"""train@<config>: DP fine-tuning of one cube configuration → models/runs/<unit>/<point>/, records/train/<unit>/<point>.json
(``<point>`` = eps…-b…-T…-lr…-s…, ``<unit>`` = the privacy unit of cube.unit)."""

from __future__ import annotations

import logging
import math

from empriv import paths
from empriv.config import Params, RunConfig
from empriv.pipeline.common import config_stage, load_base, load_texts, load_tokenizer, secrets_to_scrub

log = logging.getLogger("empriv.train")


def calibration_cache():
    """The project's σ-calibration cache (every hit re-verified by forward accounting; see empriv.privacy.cache)."""
    from empriv.privacy.cache import CalibrationCache

    return CalibrationCache(paths.CALIBRATION_CACHE)


def encoded_train_split(params: Params, tok):
    from empriv.models.lm import encode_fixed

    return encode_fixed(tok.encode_batch(load_texts("train")), tok.eos_id, params.base.seq_len)


def public_split(params: Params, tok):
    """The encoded public split (a :class:`~empriv.train.finetune.PublicSplit`), for the strict DP-Flat / DPZero
    variants that train something on public data only (None for every other run: the split is not read)."""
    from empriv.train.methods import get_method

    if not get_method(params.train.method).needs_public_split(params):
        return None
    from empriv.models.lm import encode_fixed
    from empriv.train.finetune import PublicSplit

    ids, mask = encode_fixed(tok.encode_batch(load_texts("public")), tok.eos_id, params.base.seq_len)
    return PublicSplit(ids, mask)


def checkpointer(params: Params, run: RunConfig, job: str):
    """The run's :class:`~empriv.train.checkpoint.Checkpointer` (``runtime.checkpoint_every``), or None. Its directory
    is kept until the stage has written its outputs (``clear()`` then), so a kill in between loses nothing."""
    every = params.runtime.checkpoint_every
    if not every:
        return None
    from empriv.train.checkpoint import Checkpointer

    return Checkpointer(paths.CHECKPOINTS_DIR / job / run.file_stem, every, identity={"job": job},
                        clear_on_completion=False)


def training_records(run: RunConfig, tok, ids, mask):
    """The encoded train split ``ids``/``mask`` as :class:`~empriv.train.finetune.TrainingRecords`, with what a
    user-level unit trains from besides: each record's unit, its full token list and (perplexity strategies) its mean
    NLL under the initial base (nothing more for a record-level run)."""
    from empriv.train.finetune import TrainingRecords

    if not run.privacy_unit.user_level:
        return TrainingRecords(ids, mask)
    from empriv.config import ConfigError
    from empriv.io import read_jsonl

    rows = read_jsonl(paths.split_path("train"))
    units = [r.get("unit") for r in rows]
    if any(u is None for u in units):
        raise ConfigError(f"{paths.split_path('train')}: records without a privacy unit (prepared before units "
                          "existed): re-run prepare (dvc repro prepare)")
    scores = None
    if run.privacy_unit.needs_perplexity:
        from empriv.data.selection import read_record_scores

        scores = read_record_scores(paths.RECORD_SCORES, [r["id"] for r in rows])
    return TrainingRecords(ids, mask, unit_ids=units, record_tokens=tok.encode_batch([r["text"] for r in rows]),
                           record_scores=scores)


def main(params: Params, run: RunConfig, runs_dir=paths.RUNS_DIR, metrics_dir=paths.TRAIN_METRICS_DIR) -> dict:
    """Train ``run`` (no canaries) and save its weights — a standard Hugging Face directory with the
    tokenizer — and its metrics together: if saving either fails, neither is left behind."""
    from pathlib import Path

    from empriv.io import write_json
    from empriv.pipeline.staged_outputs import StagedOutputs
    from empriv.models.adapters import save_finetuned
    from empriv.train.finetune import TrainRequest, train_model

    from empriv.io import ensure_writable

    # before minutes of training: the outputs' directories must take a file (a record that cannot be written loses the run)
    ensure_writable(Path(runs_dir) / run.file_stem, Path(metrics_dir) / f"{run.file_stem}.json",
                    *([paths.CHECKPOINTS_DIR / "train" / run.file_stem] if params.runtime.checkpoint_every else []))
    tok = load_tokenizer()
    ids, mask = encoded_train_split(params, tok)
    ck = checkpointer(params, run, "train")
    # the tokenizer's eos id serves the user-level chunk strategy only; a record-level run ignores it
    model, metrics = train_model(TrainRequest(
        params, run, load_base(), scrub_secrets=secrets_to_scrub(), calibration_cache=calibration_cache(),
        records=training_records(run, tok, ids, mask), tokenizer=tok, public=public_split(params, tok), checkpoint=ck))
    from empriv.stage import peak_memory

    metrics["peak_memory"] = peak_memory()  # of the stage process, training included
    with StagedOutputs() as out:  # the model and its record replaced together (no partial outputs)
        tmp = out.directory(Path(runs_dir) / run.file_stem)
        save_finetuned(model, params.train.method, tmp, tokenizer_dir=paths.TOKENIZER_DIR, base_directory=paths.BASE_DIR)
        write_json(out.file(Path(metrics_dir) / f"{run.file_stem}.json"), metrics)
    if ck is not None:
        ck.clear()
    eps = metrics.get("epsilon_user_level", metrics["epsilon_prv"]) if run.privacy_unit.user_level else metrics["epsilon_prv"]
    log.info("%s: σ=%.4f q=%.4f T=%d ε%s=%s final loss %.4f in %.1f s",
             run.name, metrics["noise_multiplier"], metrics["sample_rate"], run.steps,
             "_user" if run.privacy_unit.user_level else "_prv", "inf" if eps is None else f"{eps:.3f}",
             metrics["final_loss"] or math.nan, metrics["wall_time_s"])
    return metrics


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/train.py``): the cube point, as dvc.yaml's matrix builds it."""
    config_stage(main, __doc__, argv=argv)
