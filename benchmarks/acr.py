"""Benchmark: empriv's fast ACR search vs the published ACR procedure, same code, same model, same secrets.

Run:  nice python benchmarks/acr.py [--root DIR] [--model RUN ...] [--max-secrets N | --secrets ID,ID] [--synthetic]
e.g. (two fine-tuned runs of a finished pipeline in <workspace>, every secret, 3 search seeds each, 3 draws; the
committed result used the ε = ∞ and ε = 64 runs of the earlier memorisation-regime default named here):
      OMP_NUM_THREADS=1 nice python benchmarks/acr.py --root <workspace> --skip-base --replicates 3 \
        --model models/runs/record/full/epsinf-b32-T200-lr0.01-s0 --model models/runs/record/full/eps64-b32-T200-lr0.01-s0 \
        --json benchmarks/results/acr.json

The peer is the published procedure's defaults (top-k 250, 100 candidates, 200 GCG steps at the
first length, start length 5, +5 tokens and ×1.2 steps after a failure, −1 after a success, a
separate forward pass per step to check the kept prompt, every length restarted from random
tokens, 3 search seeds each run in full), run by ``empriv.score.acr`` with ``strategy="published"``.
empriv's default is ``strategy="fast"`` with the same knobs (see the module's docstring for what it
changes). For every secret both searches run on the same model; the script prints each ACR and three costs:

- **sequences scored**, the primary cost: every sequence the model scores, forward and gradient — each
  candidate prompt of a forward batch and each prompt of a gradient batch counts one (prompt candidates ×
  batch, summed over every model call; ``PassCount.sequences``). On a CPU the time follows it;
- **model calls** (``passes``): batched forward calls + backward calls (a gradient call counts 2), whatever
  their batch size — the better guide where a batch costs about one call (a GPU);
- **wall time** (seconds, one torch thread by default).

Then the totals, their ratios published / fast (sequences first) and how many secrets reach the same ACR (a
failed search has no ACR: it is shown as "<=bound", two failures count as equal and a success beats a failure).
The JSON (``--json``) holds the rows (``sequences_*``, ``passes_*``, ``seconds_*`` per secret), the totals and
``ratio_sequences`` (primary), ``ratio_passes`` and ``ratio_seconds``. Each row also keeps, per seed, the prompt
lengths its search tried in order with their outcome (``lengths_*``: ``12+`` found a prompt of 12 tokens, ``11-``
found none at 11); ``--trace`` prints them under the row.

Models: by default the pipeline's non-private fine-tune with the most compute (``models/runs/
epsinf-…-s0``) and the base model, on ``data/secrets_filtered.jsonl`` (run ``make repro`` first).
``--synthetic`` builds its own: tiny GPT-2s trained on the synthetic corpus's secrets with different
strengths of memorisation, so that some secrets compress and some do not (no pipeline needed).

Exit status 1 if fewer sequences are saved than ``--goal`` (10×, issue 30; it was 5× on model calls before) or
some secret's fast ACR is below the published one.

Both searches are random (GCG's candidate draws, the random prompts a length starts from): one search per secret
is one draw of each, and which of two close searches finds the shorter prompt can change from draw to draw.
``--replicates R`` searches every (model, secret) R times with independent random streams (draw 0 keyed by the
secret id as the pipeline keys it, draw i by the id + ``#i``) and judges the ACR per secret on the **median draw**
of each strategy (R odd; a failed draw ranks below every success, two failures by their bounds); the costs are
the totals over all draws. The per-draw tally is printed too. The published procedure is deterministic given its seeds, so
``--reuse-published`` can take its rows from an earlier ``--json`` of the same settings (``--only published`` runs
just the peer); the printed total says how many rows were reused.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tiny_models for --synthetic


def pipeline_models(root: Path, model_dirs: list[str] | None, max_secrets: int | None, ids: list[str] | None = None):
    """The fine-tuned runs (``--model``, repeatable; default: the ε = ∞ run with most compute) and the base model
    of a pipeline output tree ``root``, with its string secrets (``data/secrets_filtered.jsonl``)."""
    from empriv.io import read_jsonl
    from empriv.models.adapters import load_finetuned
    from empriv.models.registry import load_model
    from empriv.models.tokenizer import Tokenizer

    def compute(p: Path) -> int:  # C = b·T from the run name eps…-b{b}-T{T}-…
        m = re.search(r"-b(\d+)-T(\d+)-", p.name)
        return int(m.group(1)) * int(m.group(2)) if m else 0

    if model_dirs:
        runs = [Path(m) if Path(m).is_absolute() else root / m for m in model_dirs]
    else:
        found = sorted((root / "models/runs").glob("**/epsinf-*-s0"))
        runs = [max(found, key=compute)] if found else []
    if not runs or not (root / "data/secrets_filtered.jsonl").exists():
        raise SystemExit(f"no pipeline outputs under {root} (models/runs/**/epsinf-*, data/secrets_filtered.jsonl): run "
                         "`make repro` first, pass --root, or --synthetic")
    tok = Tokenizer.load(root / "models/tokenizer")
    secrets = [s for s in read_jsonl(root / "data/secrets_filtered.jsonl") if s.get("kind") != "author_genre"]
    if ids:
        known = {s["id"] for s in secrets}
        if unknown := [i for i in ids if i not in known]:
            raise SystemExit(f"--secrets: unknown id(s) {unknown}; known: {sorted(known)}")
        secrets = [s for s in secrets if s["id"] in ids]
    secrets = secrets[:max_secrets] if max_secrets else secrets
    models = {run.name: (lambda run=run: load_finetuned(run, root / "models/base")) for run in runs}
    models["base"] = lambda: load_model(root / "models/base")
    return models, tok, secrets


def _train_jointly(model, tok, texts: list[str], max_offset: int, steps: int, lr: float = 1e-2) -> float:
    """Non-private Adam on every text at once (0…max_offset random tokens before each of 8 copies)."""
    from tiny_models import train_on_sequences

    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, tok.vocab_size, (i % (max_offset + 1),), generator=g).tolist() + tok.encode(t)
            for t in texts for i in range(8)]
    return train_on_sequences(model, seqs, tok.eos_id, steps, lr)


def synthetic_models(max_secrets: int | None):
    from empriv.data.synthetic import generate_corpus
    from empriv.models.tokenizer import train_bpe
    from tiny_models import tiny_gpt2

    corpus = generate_corpus(3000, 200, 300, 6000, seed=0)
    tok = train_bpe([e.text for e in corpus.public[:600]], 512)
    texts = [s.text for s in corpus.secrets][: max_secrets or 4]
    secrets = [{"id": f"synthetic-{i:02d}", "text": t} for i, t in enumerate(texts)]
    models = {}
    # strong (memorised wherever it starts), weak (memorised after the start token only), none
    for name, offset, steps in (("memorised-anywhere", 8, 300), ("memorised-at-start", 0, 150)):
        m = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=64, n_head=2, n_layer=2, n_positions=96, seed=0)
        _train_jointly(m, tok, texts, offset, steps)
        models[name] = m
    models["untrained"] = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=64, n_head=2, n_layer=2, n_positions=96, seed=1)
    return models, tok, secrets


def _shown(res) -> str:
    """A measured ACR, or for a failed search (no value) its upper bound as "<=x"."""
    return f"{res.acr:.3f}" if res.success else f"<={res.upper_bound:.2f}"


def _compare(row: dict) -> int:
    """1 if fast found a shorter prompt (higher ACR), 0 if both reached the same outcome, −1 if fast did worse.

    A failed search has no ACR (only a bound): a success beats a failure; two failures are equal when fast's bound is
    no looser (it tried lengths at least as long), else fast did worse."""
    a, b = row["acr_fast"], row["acr_published"]
    if a is None and b is None:
        return 0 if row["bound_fast"] <= row["bound_published"] + 1e-9 else -1
    if a is None or b is None:
        return 1 if b is None else -1
    return 0 if abs(a - b) < 1e-9 else (1 if a > b else -1)


def _outcome(row: dict, label: str) -> tuple:
    """A draw's outcome as a sort key, larger = stronger: a success by its ACR, above every failure; a failure by
    its bound (a lower bound: longer lengths were tried)."""
    if row[f"success_{label}"]:
        return (1, row[f"acr_{label}"])
    return (0, -row[f"bound_{label}"])


def _median_row(rows: list[dict], label: str) -> dict:
    """The median draw of one strategy over the draws of one (model, secret) (an odd number of them)."""
    ranked = sorted(rows, key=lambda r: _outcome(r, label))
    return ranked[len(ranked) // 2]


def _compare_medians(rows: list[dict]) -> int:
    """:func:`_compare` of the two strategies' median draws over the draws of one (model, secret)."""
    pub, fast = _median_row(rows, "published"), _median_row(rows, "fast")
    merged = {k: pub[k] for k in ("acr_published", "bound_published")} | {k: fast[k] for k in ("acr_fast", "bound_fast")}
    return _compare(merged)


def _target(s: dict, tok) -> list[int]:
    """The ids a secret's ACR search targets in the pipeline (its in-context ids where the secrets stage kept them)."""
    from empriv.score.acr import acr_target_ids

    return acr_target_ids(s, tok)


FAST_ONLY = ("patience", "patience_tolerance", "fast_candidates", "fast_top_k", "race_steps", "give_up", "keep", "wrong_weight", "skip")  # knobs the published procedure ignores


def _settings_values(data: dict, label: str) -> dict:
    """The settings of one side of an earlier ``--json``: its ``<label>_settings_values`` mapping, or, in files
    written before that key, the values parsed from the repr (``ACRSettings(top_k=250, …, seeds=(0, 1, 2), …)``)."""
    import ast

    if f"{label}_settings_values" in data:
        return data[f"{label}_settings_values"]
    text = data.get(f"{label}_settings", "")
    pairs = re.findall(r"(\w+)=(\([^)]*\)|\[[^\]]*\]|'[^']*'|[^,()]+)", text[text.index("(") + 1 : -1]) if "(" in text else []
    values = {k: ast.literal_eval(v.strip()) for k, v in pairs}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def _reused(paths: list[str], settings, label: str) -> dict:
    """Rows of earlier runs of this script (``--reuse-published`` / ``--reuse-fast``), keyed by (model, secret, key
    suffix), when they were measured with the same settings of that side: each search is deterministic given its
    seeds."""
    out = {}
    now = settings.model_dump()
    for path in paths:
        data = json.loads(Path(path).read_text())
        then = _settings_values(data, label)
        if label == "published":
            same = {k: v for k, v in then.items() if k not in FAST_ONLY} == {k: v for k, v in now.items() if k not in FAST_ONLY}
        else:
            same = then == now
        if not same:
            raise SystemExit(f"--reuse-{label} {path}: measured with other {label} settings ({then} here: {now})")
        out.update({(r["model"], r["secret"], r.get("key_suffix", "")): r for r in data["rows"]
                    if f"success_{label}" in r})
    return out


def _portable(argv: list[str], root: Path) -> list[str]:
    """The command line as a reader's checkout can use it: paths inside this repository relative to it, the
    ``--root`` tree as ``<root>``, any other absolute path as ``<path>/<its name>``."""
    out = []
    for a in argv:
        p = Path(a)
        if not p.is_absolute():
            out.append(a)
        elif p.resolve().is_relative_to(ROOT):
            out.append(str(p.resolve().relative_to(ROOT)) or ".")
        elif p.resolve() == root.resolve():
            out.append("<root>")
        elif p.resolve().is_relative_to(root.resolve()):
            out.append(str(Path("<root>") / p.resolve().relative_to(root.resolve())))
        else:
            out.append(f"<path>/{p.name}")
    return out


_KEYS = ("acr", "success", "bound", "passes", "sequences", "seconds", "cpu_seconds", "prompt", "lengths")


def main(argv: list[str] | None = None) -> int:
    from empriv.score.acr import ACRSearchParams, adversarial_compression_ratio

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT), help="the pipeline output tree (models/, data/; default: this repository)")
    ap.add_argument("--model", action="append", help="a fine-tuned run directory, relative to --root or absolute; "
                    "repeat for several (default: the pipeline's ε = ∞ run with most compute)")
    ap.add_argument("--max-secrets", type=int, default=None)
    ap.add_argument("--secrets", help="comma-separated secret ids of the pipeline (instead of the first N)")
    ap.add_argument("--skip-base", action="store_true", help="pipeline models: the fine-tuned runs only")
    ap.add_argument("--synthetic", action="store_true", help="build tiny models here instead of using pipeline outputs")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier timings on a shared machine)")
    ap.add_argument("--goal", type=float, default=10.0, help="required ratio of sequences scored, published / fast")
    ap.add_argument("--only", choices=("fast", "published"), help="run one strategy (the other's columns stay empty)")
    ap.add_argument("--reuse-published", action="append", default=[], help="take the published rows from this earlier "
                    "--json (same settings; repeatable) instead of searching again; their seconds are the earlier run's")
    ap.add_argument("--reuse-fast", action="append", default=[], help="the same for the fast rows")
    ap.add_argument("--no-search", action="store_true", help="search nothing: the table of the reused rows only")
    ap.add_argument("--fast-set", action="append", default=[], metavar="KEY=VALUE",
                    help="change one knob of the fast side (e.g. patience=20; YAML values), to try a setting")
    ap.add_argument("--key-suffix", default="", help="appended to each secret id where it seeds the search (e.g. '#1'):"
                    " a replicate of the search with other random streams, to see how often an outcome recurs")
    ap.add_argument("--replicates", type=int, default=1, help="search every (model, secret) this many times with "
                    "independent random streams (odd; draw i > 0 is keyed by the secret id + '#i') and judge the ACR "
                    "on each strategy's median draw")
    ap.add_argument("--trace", action="store_true", help="after each row, the prompt lengths each seed's search "
                    "tried, in order, with their outcome (12+: a prompt of 12 tokens reproduced the secret; 11-: none "
                    "found at 11); also kept in --json as lengths_<strategy>")
    ap.add_argument("--json", help="also write the results to this file (rewritten after every row)")
    args = ap.parse_args(argv)
    if args.replicates < 1 or args.replicates % 2 == 0:
        ap.error(f"--replicates: {args.replicates} is not allowed: an odd number ≥ 1 (the median draw is judged)")
    if args.replicates > 1 and args.key_suffix:
        ap.error("--replicates and --key-suffix: give one (the replicates are keyed '', '#1', …)")
    suffixes = [args.key_suffix] if args.replicates == 1 else [""] + [f"#{i}" for i in range(1, args.replicates)]
    torch.set_num_threads(args.threads)

    if args.synthetic:
        models, tok, secrets = synthetic_models(args.max_secrets)
        target_of = lambda s: tok.encode(s["text"])  # noqa: E731
    else:
        models, tok, secrets = pipeline_models(Path(args.root), args.model, args.max_secrets,
                                               args.secrets.split(",") if args.secrets else None)
        target_of = lambda s: _target(s, tok)  # noqa: E731
        if args.skip_base:
            models.pop("base")
    published = ACRSearchParams(strategy="published")
    import yaml

    fast = ACRSearchParams(strategy="fast", **{k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.fast_set)})
    reuse = {"published": _reused(args.reuse_published, published, "published"),
             "fast": _reused(args.reuse_fast, fast, "fast")}
    print(f"{len(secrets)} secrets × {len(models)} models; peer: published procedure {published}")
    print(f"{'model':<28}{'secret':<16}{'|s|':>4}{'ACR pub':>9}{'ACR fast':>9}{'seqs pub':>10}{'fast':>9}"
          f"{'ratio':>7}{'calls pub':>10}{'fast':>7}{'ratio':>7}{'s pub':>8}{'s fast':>8}  seeds' prompts pub | fast")
    rows = []

    def dump() -> dict:
        data = {"rows": rows, "primary_cost": "sequences", "published_settings": repr(published),
                "fast_settings": repr(fast), "published_settings_values": published.model_dump(),
                "fast_settings_values": fast.model_dump(),
                "argv": _portable(sys.argv[1:] if argv is None else argv, Path(args.root))}
        if args.json:
            Path(args.json).write_text(json.dumps(data, indent=1))
        return data

    for mname, model in models.items():
        if not isinstance(model, torch.nn.Module):  # a loader: load only when some row of it is searched here
            model = _Lazy(model)
        for s, suffix in ((s, suffix) for s in secrets for suffix in suffixes):
            target = target_of(s)
            row = {"model": mname, "secret": s["id"], "target_tokens": len(target)}
            if suffix:
                row["key_suffix"] = suffix
            for label, settings in (("published", published), ("fast", fast)):
                if (mname, s["id"], suffix) in reuse[label]:
                    row.update({f"{k}_{label}": reuse[label][(mname, s["id"], suffix)].get(f"{k}_{label}") for k in _KEYS})
                    row[f"reused_{label}"] = True
                    continue
                if (args.only and args.only != label) or args.no_search:
                    continue
                t0, c0 = time.perf_counter(), time.process_time()
                r = adversarial_compression_ratio(model.get() if isinstance(model, _Lazy) else model, target, settings,
                                                  key=s["id"] + suffix)
                row.update({f"acr_{label}": r.acr, f"success_{label}": r.success, f"bound_{label}": r.upper_bound,
                            f"passes_{label}": r.counts.passes, f"sequences_{label}": r.counts.sequences,
                            f"seconds_{label}": time.perf_counter() - t0, f"cpu_seconds_{label}": time.process_time() - c0,
                            f"prompt_{label}": [x["prompt_tokens"] for x in r.per_seed],
                            f"lengths_{label}": [x["lengths_tried"] for x in r.per_seed]})
            if args.no_search and not any(k.startswith("success_") for k in row):
                continue
            rows.append(row)
            dump()
            print(_line(row), flush=True)
            if args.trace:
                for label in ("published", "fast"):
                    for seed, tried in enumerate(row.get(f"lengths_{label}") or []):
                        print(f"    {label:<9} seed {seed}: lengths tried {' '.join(tried)}", flush=True)
    return _summary(rows, args, dump)


def _judge_medians(both: list[dict], replicates: int, data: dict) -> int:
    """Print and record the per-secret comparison of the two strategies' median draws; return how many secrets the
    fast strategy's median draw is below the published one's (an incomplete secret counts as below)."""
    pairs: dict[tuple, list[dict]] = {}
    for r in both:
        pairs.setdefault((r["model"], r["secret"]), []).append(r)

    def lengths(rows, label):
        return sorted((min((p for p in r[f"prompt_{label}"] if p is not None), default=None) for r in rows),
                      key=lambda v: float("inf") if v is None else v)

    print(f"\nACR per secret on the median of {replicates} draws (shortest prompt of each draw; None: nothing found):")
    order, rows_out = [], []
    for (m, sec), rows in pairs.items():
        if len(rows) != replicates:
            verdict = -1
            print(f"  {m[:27]:<28}{sec:<11} only {len(rows)} of {replicates} draws with both strategies: counted as lower")
        else:
            verdict = _compare_medians(rows)
            print(f"  {m[:27]:<28}{sec:<11} published {lengths(rows, 'published')} | fast {lengths(rows, 'fast')} → "
                  + {0: "equal", 1: "fast higher", -1: "fast lower"}[verdict])
        order.append(verdict)
        rows_out.append({"model": m, "secret": sec, "draws": len(rows), "verdict": verdict})
    same, higher = order.count(0), order.count(1)
    lower = len(order) - same - higher
    print(f"ACR on the median draw: equal on {same}/{len(order)}, fast higher on {higher}, fast lower on {lower}")
    data.update({"replicates": replicates, "median_draw": rows_out, "median_acr_equal": same,
                 "median_acr_fast_higher": higher, "median_acr_fast_lower": lower})
    return lower


class _Lazy:
    def __init__(self, load):
        self.load, self.model = load, None

    def get(self):
        if self.model is None:
            self.model = self.load()
        return self.model


def _cell(row: dict, label: str, key: str, fmt: str) -> str:
    v = row.get(f"{key}_{label}")
    return "-" if v is None else format(v, fmt)


def _line(row: dict) -> str:
    def acr(label):
        if f"success_{label}" not in row:
            return "-"
        return f"{row[f'acr_{label}']:.3f}" if row[f"success_{label}"] else f"<={row[f'bound_{label}']:.2f}"

    def ratio(key):
        a, b = row.get(f"{key}_published"), row.get(f"{key}_fast")
        return f"{a / b:.1f}" if a and b else "-"

    return (f"{row['model'][:27]:<28}{(row['secret'] + row.get('key_suffix', ''))[:15]:<16}{row['target_tokens']:>4}{acr('published'):>9}{acr('fast'):>9}"
            f"{_cell(row, 'published', 'sequences', 'd'):>10}{_cell(row, 'fast', 'sequences', 'd'):>9}{ratio('sequences'):>7}"
            f"{_cell(row, 'published', 'passes', 'd'):>10}{_cell(row, 'fast', 'passes', 'd'):>7}{ratio('passes'):>7}"
            f"{_cell(row, 'published', 'seconds', '.1f'):>8}{_cell(row, 'fast', 'seconds', '.1f'):>8}"
            f"  {row.get('prompt_published')} | {row.get('prompt_fast')}")


def _summary(rows: list[dict], args, dump) -> int:
    both = [r for r in rows if "success_published" in r and "success_fast" in r]
    if not both:
        dump()
        print("\none strategy only: no ratio")
        return 0
    tot = {k: sum(r[k] for r in both) for k in ("sequences_published", "sequences_fast", "passes_published",
                                                  "passes_fast", "seconds_published", "seconds_fast")}
    order = [_compare(r) for r in both]
    same, higher = order.count(0), order.count(1)
    lower = len(both) - same - higher
    ratio_sequences = tot["sequences_published"] / tot["sequences_fast"]
    ratio = tot["passes_published"] / tot["passes_fast"]
    ratio_seconds = tot["seconds_published"] / tot["seconds_fast"]
    reused = {label: sum(1 for r in both if r.get(f"reused_{label}")) for label in ("published", "fast")}
    print(f"\ntotal sequences scored (the primary cost): published {tot['sequences_published']}, fast "
          f"{tot['sequences_fast']} → {ratio_sequences:.1f}× fewer")
    for m in dict.fromkeys(r["model"] for r in both):
        sub = [r for r in both if r["model"] == m]
        sp, sf = sum(r["sequences_published"] for r in sub), sum(r["sequences_fast"] for r in sub)
        print(f"  {m}: published {sp}, fast {sf} → {sp / sf:.1f}×")
    print(f"total model calls: published {tot['passes_published']}, fast {tot['passes_fast']} → {ratio:.1f}× fewer")
    print(f"total wall time: published {tot['seconds_published']:.1f} s, fast {tot['seconds_fast']:.1f} s → "
          f"{ratio_seconds:.1f}× faster "
          f"(median per secret {statistics.median(r['seconds_published'] / r['seconds_fast'] for r in both):.1f}×)"
          + "".join(f"; {reused[k]} {k} rows reused from {getattr(args, 'reuse_' + k)}" for k in reused if reused[k]))
    cpu = [sum(r.get(f"cpu_seconds_{k}") or 0 for r in both) for k in ("published", "fast")]
    if all(cpu):
        print(f"total CPU time of the searching process: published {cpu[0]:.1f} s, fast {cpu[1]:.1f} s → "
              f"{cpu[0] / cpu[1]:.1f}× less (steadier than wall time on a loaded machine)")
    print(f"ACR: equal on {same}/{len(both)}, fast higher (a shorter prompt found) on {higher}, fast lower on {lower}"
          + (" (every draw on its own)" if args.replicates > 1 else ""))
    data = dump()
    data.update({"totals": tot, "ratio_sequences": ratio_sequences, "ratio_passes": ratio,
                 "ratio_seconds": ratio_seconds, "acr_equal": same, "acr_fast_higher": higher, "acr_fast_lower": lower})
    if args.replicates > 1:
        lower = _judge_medians(both, args.replicates, data)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1))
    ok = ratio_sequences >= args.goal and lower == 0
    print("goal (≥ %.0f× fewer sequences scored, no lower ACR%s): %s" % (
        args.goal, f" on the median of {args.replicates} draws" if args.replicates > 1 else "", "met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
