"""The score stage for one configuration: utility and memorisation → metrics/score/<config>.json."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from empriv.config import Params, RunConfig
from empriv.io import read_jsonl, write_json

log = logging.getLogger("empriv.score")

SCORE_METRICS_DIR = Path("metrics/score")


def score_run(params: Params, run: RunConfig, model_dir: str | Path | None = None, metrics_dir: str | Path = SCORE_METRICS_DIR) -> dict:
    import torch

    from empriv.models.adapters import load_finetuned
    from empriv.models.base import BASE_DIR, TOKENIZER_DIR
    from empriv.models.registry import load_model, resolve_device
    from empriv.models.tokenizer import Tokenizer
    from empriv.score.memorization import aggregate, make_controls, score_secrets
    from empriv.score.utility import answer_nll, test_nll as test_nll_of
    from empriv.secrets.filtering import FILTERED_PATH
    from empriv.secrets.stage import HELDOUT_DIR
    from empriv.train.run import MODELS_DIR

    t0 = time.time()
    sp = params.score
    tok = Tokenizer.load(TOKENIZER_DIR)
    device = resolve_device(params.runtime.device)
    model = load_finetuned(model_dir or (MODELS_DIR / run.name), BASE_DIR).to(device)
    secrets = read_jsonl(FILTERED_PATH)
    test_texts = [r["text"] for r in read_jsonl(HELDOUT_DIR / "test.jsonl")]
    with torch.no_grad():
        utility = answer_nll if params.data.source.endswith("tofu") else test_nll_of
        test_nll = utility(model, tok, test_texts, params.base.seq_len, sp.eval_batch_size)
        rows = score_secrets(model, tok, secrets, make_controls(secrets, sp.n_controls, sp.seed), sp,
                             base_model=load_model(BASE_DIR).to(device))
    metrics = {
        "config": run.name,
        **run.as_dict(),
        "test_nll": test_nll,
        "utility": "answer-token NLL" if params.data.source.endswith("tofu") else "token NLL",
        **aggregate(rows),
        "n_secrets": len(rows),
        "vmr_protocol": {"samples": sp.vmr_samples, "temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
                         "max_new_tokens": "token length of s2"},
        "n_controls": sp.n_controls,
        "per_secret": rows,
        "wall_time_s": time.time() - t0,
    }
    write_json(Path(metrics_dir) / f"{run.name}.json", metrics)
    log.info("%s: test NLL %.4f, gap mean %.3f (vs base %.3f), cont. NLL mean %.3f, VMR mean %.3f (%.1f s)", run.name,
             test_nll, metrics["exposure_gap_mean"], metrics["exposure_gap_vs_base_mean"], metrics["continuation_nll_mean"],
             metrics["vmr_mean"], metrics["wall_time_s"])
    return metrics
