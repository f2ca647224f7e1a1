"""score@<config>: utility and memorisation scores of one fine-tuned model → records/score/<unit>/<point>.json."""

from __future__ import annotations

from pathlib import Path

from empriv import paths
from empriv.config import Params, RunConfig
from empriv.pipeline.common import config_stage, load_base, load_tokenizer, secrets_to_scrub


def main(params: Params, run: RunConfig, model_dir=None, metrics_dir=paths.SCORE_METRICS_DIR) -> dict:
    from empriv.io import read_jsonl, write_json
    from empriv.pipeline.staged_outputs import StagedOutputs
    from empriv.models.adapters import load_finetuned
    from empriv.models.registry import resolve_device
    from empriv.score.run import score_model

    from empriv.io import ensure_writable

    ensure_writable(Path(metrics_dir) / f"{run.file_stem}.json")  # before minutes of scoring
    device = resolve_device(params.runtime.device)
    model = load_finetuned(model_dir or paths.run_dir(run.file_stem), paths.BASE_DIR).to(device)
    secrets = read_jsonl(paths.FILTERED_SECRETS)
    test_texts = [r["text"] for r in read_jsonl(paths.HELDOUT_DIR / "test.jsonl")]
    metrics = score_model(params, run, model, load_base().to(device), load_tokenizer(), secrets, test_texts)
    from empriv.stage import peak_memory

    metrics["peak_memory"] = peak_memory()
    with StagedOutputs() as out:  # W&B failing (online) leaves the previous record, not a new one of a failed stage
        write_json(out.file(Path(metrics_dir) / f"{run.file_stem}.json"), metrics)
        out.publish()
        track_scores(params, run, metrics, secrets)
    return metrics


def track_scores(params: Params, run: RunConfig, metrics: dict, secrets: list[dict]) -> None:
    """The scores in the configuration's W&B run: every number of the metrics as ``score/*`` in the summary, the
    per-secret rows (ids and numbers) as the table ``score/per_secret``."""
    from empriv.infra.tracking import SecretScrubber, open_configuration_run

    with open_configuration_run(params, run, section="score", scrub=SecretScrubber([*secrets_to_scrub(), *secrets])) as t:
        if not t.active:
            return
        t.summary({f"score/{k}": v for k, v in metrics.items()
                   if k not in ("per_secret", "config", *run.as_dict()) and not isinstance(v, (list, dict))})
        rows = metrics.get("per_secret") or []
        columns = list(dict.fromkeys(k for r in rows for k in r))
        if rows:
            t.table("score/per_secret", columns, [[r.get(c) for c in columns] for r in rows])


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/score.py``): the cube point, as dvc.yaml's matrix builds it."""
    config_stage(main, __doc__, argv=argv)
