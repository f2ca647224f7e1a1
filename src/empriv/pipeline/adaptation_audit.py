"""adaptation_audit@<dataset>-<config>: membership inference against one DP adaptation (issue 17; research: auditing
private adaptations) → records/adaptation_audit/<dataset>/<method>/<point>.json.

The run DP-adapts the base to the dataset's members (the run's cube.method, ε, b, T, η, seed; σ calibrated over the
members as any run is), adapts a *shadow* the same way on the disjoint shadow set (its own random streams), then
attacks: loss, zlib, min-k %, reference (pre-trained base; shadow) and RMIA (Paper B's Algorithm 1 with the shadow or
the base as reference), each with AUC and TPR at 1 % and 0.1 % FPR on members vs unseen non-members, the
hyperparameter-picked-on-the-evaluation ("optimistic") entries labelled as such; and the pre-training probe's
loss/zlib AUC under the base and the adapted model. Utility: the mean NLL of the non-members (an unseen test set of the
dataset) under the adapted model and under the base. No model is kept and no text enters the record."""

from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path

from empriv import paths
from empriv.config import ConfigError, Params, RunConfig

log = logging.getLogger("empriv.adaptation_audit")

TRAIN_FACTS = ("method", "adaptation", "trainable_parameters", "optimizer", "clip_norm", "n", "delta", "sample_rate",
               "steps", "noise_multiplier", "accountant", "epsilon_prv", "epsilon_rdp", "final_loss",
               "mean_batch_size", "empty_batches", "unnoised_outputs", "train_time_s", "random_streams")


def _encode(texts: list[str], tok, seq_len: int):
    from empriv.models.lm import encode_fixed

    return encode_fixed(tok.encode_batch(texts), tok.eos_id, seq_len)


def run_for(params: Params, dataset: str, run: RunConfig) -> RunConfig:
    if (dataset, run) not in params.adaptation_audit_runs():
        raise ConfigError(f"adaptation audit {dataset} {run.name} is not in params.yaml's adaptation_audit.cube")
    return run


def main(params: Params, dataset: str, run: RunConfig, data_root: Path = paths.ADAPTATION_DATA_DIR,
         out_root: Path = paths.ADAPTATION_AUDIT_DIR) -> dict:
    from empriv.audit.adaptation import encode_texts, evaluate_adaptation_mias, pretraining_leakage
    from empriv.io import ensure_writable, write_json
    from empriv.models.registry import resolve_device
    from empriv.pipeline.adaptation_data import read_set
    from empriv.pipeline.common import load_base, load_tokenizer
    from empriv.pipeline.train import calibration_cache, public_split
    from empriv.stage import peak_memory
    from empriv.train.finetune import TrainingRecords, TrainRequest, train_model

    ensure_writable(Path(out_root) / dataset / f"{run.file_stem.split('/', 1)[1]}.json")  # before training

    t0 = time.time()
    a = params.adaptation_audit
    sets = {name: read_set(dataset, name, data_root) for name in
            ("members", "nonmembers", "shadow", "population", "probe_members", "probe_nonmembers")}
    tok = load_tokenizer()
    seq_len = params.base.seq_len
    device = resolve_device(params.runtime.device)

    def adapt(texts: list[str], purpose: str):
        ids, mask = _encode(texts, tok, seq_len)
        p = params.model_copy(update={"data": params.data.model_copy(update={"n_train": len(texts)})})
        if run.batch_size > len(texts):
            raise ConfigError(f"adaptation_audit.cube.batch_size {run.batch_size} must be <= the {len(texts)} "
                              f"{purpose} texts (adaptation_audit.n_members / n_shadow)")
        model, metrics = train_model(TrainRequest(p, run, load_base(), TrainingRecords(ids, mask), job_type=purpose,
                                                  calibration_cache=calibration_cache(),
                                                  public=public_split(params, tok)))
        model.eval()
        return model.to(device), metrics

    target, target_metrics = adapt(sets["members"], "adaptation_target")
    shadow, shadow_metrics = adapt(sets["shadow"], "adaptation_shadow")
    base = load_base().to(device).eval()
    t_attack = time.time()
    enc = {name: encode_texts(sets[name], tok, seq_len) for name in ("members", "nonmembers", "population")}
    result = evaluate_adaptation_mias(target, members=enc["members"], nonmembers=enc["nonmembers"], pretrained=base,
                                      shadow=shadow, population=enc["population"], min_k=a.min_k,
                                      rmia_gamma=a.rmia_gamma, rmia_alpha=a.rmia_alpha, batch_size=a.eval_batch_size)
    probe = pretraining_leakage(base, target, sets["probe_members"], sets["probe_nonmembers"], tokenizer=tok,
                                seq_len=seq_len, batch_size=a.eval_batch_size)
    losses = result["mean_loss"]
    out = {
        "config": run.name,
        "dataset": dataset,
        **run.as_dict(),
        "trainable_parameters": target_metrics["trainable_parameters"],
        "test_nll": losses["target"]["nonmembers"],  # the dataset's unseen texts under the adapted model
        "base_test_nll": losses["pretrained"]["nonmembers"],
        "train_nll": losses["target"]["members"],
        "n_members": result["n_members"], "n_nonmembers": result["n_nonmembers"],
        "n_population": result["n_population"], "fpr_resolution": result["fpr_resolution"],
        "mia": result["mia"],
        "mean_loss": losses,
        "pretraining": {"auc_base": probe["base"]["loss"]["auc"], "auc_adapted": probe["adapted"]["loss"]["auc"],
                        **probe},
        "train": {k: target_metrics.get(k) for k in TRAIN_FACTS},
        "shadow_train": {k: shadow_metrics.get(k) for k in ("noise_multiplier", "final_loss", "random_streams")},
        "attack_time_s": time.time() - t_attack,
        "wall_time_s": time.time() - t0,
        "peak_memory": peak_memory(),
    }
    write_json(Path(out_root) / dataset / f"{run.file_stem.split('/', 1)[1]}.json", out)
    mia = result["mia"]
    log.info("adaptation audit %s %s: AUC loss %.3f, rmia(shadow) %.3f, ref(base) %.3f; test NLL %.3f (base %.3f); "
             "pre-training loss AUC %.3f -> %.3f in %.1f s", dataset, run.name, mia["loss"]["auc"],
             mia.get("rmia_shadow", {}).get("auc", math.nan), mia.get("reference_pretrained", {}).get("auc", math.nan),
             out["test_nll"], out["base_test_nll"], out["pretraining"]["auc_base"], out["pretraining"]["auc_adapted"],
             out["wall_time_s"])
    return out


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/adaptation_audit.py``): the dataset and the point of
    ``adaptation_audit.cube``, as dvc.yaml's matrix builds them."""
    from empriv.config import parse_epsilon
    from empriv.stage import run_stage, set_threads

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", required=True, choices=("iid", "ood"))
    ap.add_argument("--epsilon", required=True)
    ap.add_argument("--batch-size", required=True, type=int)
    ap.add_argument("--steps", required=True, type=int)
    ap.add_argument("--learning-rate", required=True, type=float)
    ap.add_argument("--seed", required=True, type=int)
    ap.add_argument("--method", required=True)
    args = ap.parse_args(argv)

    def stage(params: Params) -> None:
        wanted = RunConfig(parse_epsilon(args.epsilon, text=True), args.batch_size, args.steps, args.learning_rate,
                           args.seed, "record", args.method)
        matches = [r for d, r in params.adaptation_audit_runs() if d == args.dataset and r == wanted]
        if not matches:
            raise ConfigError(f"adaptation audit {args.dataset} {wanted.name} is not in params.yaml's "
                              "adaptation_audit.cube")
        set_threads(params)
        main(params.for_method(args.method), args.dataset, matches[0])

    run_stage(stage)
