"""Does searching ACR with more seeds separate configurations from training seeds (the research's Table 8)?

Run in a workspace where the default pipeline has run (models, secrets and score records present):

    PYTHONPATH=src python benchmarks/studies/acr_search_seeds.py --epsilon 8 --seeds 0 1 2 --out <file.json>

For every run of the cube at ``--epsilon``, it searches ACR on the frequent secrets again with the run's own search
settings (``score.acr`` as the score stage resolved them) but the search seeds ``--seeds``, and prints, beside the
score records' figures (one search seed), the Table 8 line of ``acr_mean`` (ACR over the successful searches, a
failed search censored, never averaged): the std of the configuration means over the mean within-configuration
std of the training seeds, and the success rate. Nothing in the workspace is written; ``--out`` keeps the numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path


def _table8(per_run: dict[str, float | None], config_of: dict[str, str]) -> dict:
    groups: dict[str, list[float]] = {}
    for stem, value in per_run.items():
        if value is not None:
            groups.setdefault(config_of[stem], []).append(value)
    means = [statistics.fmean(v) for v in groups.values()]
    stds = [statistics.stdev(v) for v in groups.values() if len(v) >= 2]
    between = statistics.stdev(means) if len(means) >= 2 else math.nan
    within = statistics.fmean(stds) if stds else math.nan
    return {"n_configs": len(means), "std_configs": between, "std_seeds": within,
            "ratio": between / within if within else math.nan}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import torch

    from empriv import paths
    from empriv.config import load_params
    from empriv.io import read_json, read_jsonl
    from empriv.models.adapters import load_finetuned
    from empriv.pipeline.common import load_tokenizer
    from empriv.score.acr import acr_of_secrets
    from empriv.score.secret_frequency import is_rare_secret

    torch.set_num_threads(1)
    params = load_params("params.yaml")
    acr = params.score.acr
    settings = acr.search.model_copy(update={"seeds": list(args.seeds)})
    secrets = [s for s in read_jsonl(paths.FILTERED_SECRETS) if "text" in s or "context_token_ids" in s]
    frequent = [s for s in secrets if not is_rare_secret(s, acr.rare_frequency, params.data.n_train)]
    runs = [r for r in params.runs() if float(r.epsilon) == args.epsilon]
    tokenizer = load_tokenizer()
    before: dict[str, float | None] = {}
    after: dict[str, float | None] = {}
    success = {"before": [0, 0], "after": [0, 0]}
    config_of = {r.file_stem: r.file_stem.rsplit("-s", 1)[0] for r in runs}
    t0 = time.process_time()
    for r in runs:
        record = read_json(paths.SCORE_METRICS_DIR / f"{r.file_stem}.json")
        before[r.file_stem] = record.get("acr_mean")
        success["before"][0] += record.get("acr_n_success", 0)
        success["before"][1] += record.get("acr_n_searched", 0)
        model = load_finetuned(paths.run_dir(r.file_stem), paths.BASE_DIR)
        found = acr_of_secrets(model, tokenizer, frequent, settings, progress=False)
        values = [v["acr"] for v in found.values() if v.get("acr_success")]
        after[r.file_stem] = statistics.fmean(values) if values else None
        success["after"][0] += len(values)
        success["after"][1] += sum("acr_success" in v for v in found.values())
        print(f"{r.file_stem}: acr_mean {before[r.file_stem]} (1 search seed) -> {after[r.file_stem]} "
              f"({len(args.seeds)} seeds), {len(values)}/{len(frequent)} found", flush=True)
    result = {"epsilon": args.epsilon, "seeds": args.seeds, "cpu_s": round(time.process_time() - t0, 1),
              "one_seed": {**_table8(before, config_of), "found": success["before"]},
              "more_seeds": {**_table8(after, config_of), "found": success["after"]},
              "per_run": {k: {"one_seed": before[k], "more_seeds": after[k]} for k in before}}
    for name in ("one_seed", "more_seeds"):
        t = result[name]
        print(f"{name}: Table 8 at eps {args.epsilon:g}: std of configuration means {t['std_configs']:.3f} / mean "
              f"seed std {t['std_seeds']:.3f} = {t['ratio']:.2f} over {t['n_configs']} configurations; found "
              f"{t['found'][0]}/{t['found'][1]}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
