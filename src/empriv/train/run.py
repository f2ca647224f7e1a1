"""The train stage for one configuration: calibrate σ, fine-tune, save weights and metrics."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from empriv.config import Params, RunConfig
from empriv.io import atomic_dir, write_json

log = logging.getLogger("empriv.train")

MODELS_DIR = Path("models/runs")
TRAIN_METRICS_DIR = Path("metrics/train")


def calibrate(params: Params, run: RunConfig, n: int) -> dict:
    """σ for the run's (ε, δ) with the configured accountant, and the ε that PRV and RDP report at σ."""
    delta = params.delta_for(n)
    q = run.batch_size / n
    out = {"delta": delta, "sample_rate": q, "steps": run.steps}
    if not run.private:
        out.update(noise_multiplier=0.0, accountant=None, epsilon_prv=math.inf, epsilon_rdp=math.inf)
        return out
    from empriv.privacy.accounting import calibrate_noise_multiplier, epsilon_for

    cal = calibrate_noise_multiplier(run.epsilon, delta, q, run.steps, accountant=params.privacy.accountant)
    out.update(
        noise_multiplier=cal.noise_multiplier,
        accountant=cal.accountant,
        requested_accountant=cal.requested_accountant,
        accountant_fallback_reason=cal.fallback_reason,
        epsilon_calibrated=cal.epsilon,
        epsilon_prv=epsilon_for(cal.noise_multiplier, q, run.steps, delta, "prv"),
        epsilon_rdp=epsilon_for(cal.noise_multiplier, q, run.steps, delta, "rdp"),
    )
    return out


def train_run(params: Params, run: RunConfig, models_dir: str | Path = MODELS_DIR, metrics_dir: str | Path = TRAIN_METRICS_DIR) -> dict:
    """Train one cube configuration (:func:`empriv.train.with_canaries.train_model`, no canaries) and save
    its weights — a standard Hugging Face directory with the tokenizer — and its metrics together."""
    from empriv.models.adapters import save_finetuned
    from empriv.models.base import BASE_DIR, TOKENIZER_DIR
    from empriv.train.with_canaries import train_model

    model, metrics = train_model(params, run)
    # Weights and metrics land together: if saving either fails, neither is left behind.
    with atomic_dir(Path(models_dir) / run.name) as tmp:
        save_finetuned(model, params.train.method, tmp, tokenizer_dir=TOKENIZER_DIR, base_directory=BASE_DIR)
        write_json(Path(metrics_dir) / f"{run.name}.json", metrics)
    log.info(
        "%s: σ=%.4f q=%.4f T=%d ε_prv=%s final loss %.4f in %.1f s",
        run.name, metrics["noise_multiplier"], metrics["sample_rate"], run.steps,
        f"{metrics['epsilon_prv']:.3f}", metrics["final_loss"] or math.nan, metrics["wall_time_s"],
    )
    return metrics
