"""ACR's search noise alone: one trained model of a finished run, score.acr's budget, searched with search seeds 0-3
one at a time, on the frequent secrets (above score.acr.rare_frequency: the rare ones are never found under DP, so
they add cost and no spread); prints each seed's successes and ACR over successes, and their std.

    python tools/acr_search_noise.py eps8-b512-T100-lr0.01-s0 [more runs]   # in a workspace after make repro

Search seed 0 gives the score stage's own values (the default's score.acr.seeds is [0]). docs/analysis.md
("Reading the result", Table 8) has what it measured on the default run."""
import json, sys, statistics
import torch
torch.set_num_threads(1)
from empriv.config import load_params
from empriv.models.adapters import load_finetuned
from empriv.pipeline.common import load_tokenizer
from empriv.score.acr import acr_of_secrets, settings_from_params
from empriv.score.secret_frequency import is_rare_secret
params = load_params("params.yaml")
tok = load_tokenizer()
secrets = [json.loads(l) for l in open("data/secrets_filtered.jsonl")]
secrets = [s for s in secrets if not is_rare_secret(s, params.score.acr.rare_frequency, params.data.n_train)]
print(len(secrets), "frequent secrets:", " ".join(s["id"] for s in secrets), flush=True)
for run in sys.argv[1:]:
    model = load_finetuned(f"models/runs/record/full/{run}", "models/base")
    means = []
    for seed in range(4):
        acr = params.score.acr.model_dump(); acr["seeds"] = [seed]
        res = acr_of_secrets(model, tok, secrets, settings_from_params(acr), progress=False)
        hits = [r["acr"] for r in res.values() if r.get("acr_success")]
        means.append(sum(hits) / len(hits) if hits else None)
        print(run, "search seed", seed, "found", len(hits), "ACR over successes", round(means[-1], 3) if hits else None, flush=True)
    v = [m for m in means if m is not None]
    print(run, "search-seed std of ACR over successes", round(statistics.stdev(v), 3), flush=True)
