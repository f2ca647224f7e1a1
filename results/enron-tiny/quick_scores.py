"""Quick cube-wide memorisation numbers for results/enron-tiny (outside the pipeline: the score stage could not run
on the loaded machine). Per run: test NLL, and per secret greedy reproduction of s2, continuation NLL and exposure
gap (10 controls), with the library's own functions; no sampled VMR, no ACR. Ids and numbers only."""
import csv, sys, time
import torch
from empriv import paths
from empriv.config import parse_params, read_yaml
from empriv.io import read_jsonl
from empriv.models.adapters import load_finetuned
from empriv.pipeline.common import load_base, load_tokenizer
from empriv.score.memorization import continuation_nll, exposure_gap, make_controls
from empriv.score.utility import test_nll
from empriv.score.vmr import greedy_verbatim_match

torch.set_num_threads(1)
params = parse_params(read_yaml("params.yaml"))
secrets = read_jsonl(paths.FILTERED_SECRETS)
controls = make_controls(secrets, params.score.n_controls, params.score.seed)
test = [r["text"] for r in read_jsonl(paths.HELDOUT_DIR / "test.jsonl")]
tok = load_tokenizer()
out = open(sys.argv[1], "w", newline="")
w = csv.writer(out)
w.writerow(["run", "epsilon", "batch_size", "steps", "learning_rate", "seed", "secret", "test_nll", "greedy", "continuation_nll", "exposure_gap"])
runs = sorted(params.runs(), key=lambda r: (r.seed, r.batch_size, r.steps, r.learning_rate, str(r.epsilon)))
models = [("base", None, load_base())] + [(r.name, r, None) for r in runs]
with torch.no_grad():
    for name, run, model in models:
        t = time.time()
        model = model if model is not None else load_finetuned(paths.run_dir(run.file_stem), paths.BASE_DIR)
        model.eval()
        nll = test_nll(model, tok, test, params.base.seq_len, params.score.eval_batch_size)
        for s in secrets:
            g = greedy_verbatim_match(model, tok, s["prompt"], s["continuation"])
            c, _ = continuation_nll(model, tok, s["prompt"], s["continuation"])
            gap = exposure_gap(model, tok, s["text"], controls[s["id"]])[0] if controls.get(s["id"]) else None
            hp = run.as_dict() if run else {}
            w.writerow([name, hp.get("epsilon"), hp.get("batch_size"), hp.get("steps"), hp.get("learning_rate"), hp.get("seed"),
                        s["id"], round(nll, 4), g, round(c, 4), None if gap is None else round(gap, 3)])
        out.flush()
        print(name, "%.3f" % nll, "%.1fs" % (time.time() - t), flush=True)
