"""``empriv study plan <preset>``: what a preset study runs, and an ESTIMATE of its GPU time and memory.

Nothing here was measured on a GPU (the project has none). The estimate is arithmetic, every input named:

- **FLOPs per training step** ≈ k · N · tokens, tokens = b · seq_len (the expected Poisson batch, every record
  filling the window: an upper bound, since the DP step trims padding). k = 6 for full fine-tuning (forward 2N,
  backward 4N), k = 4 for LoRA and the other adaptations (the frozen weights need no weight gradient). A private
  step costs more: the per-example gradients and clipping, read from the committed result of
  ``benchmarks/dp_step.py --shape gpt2-small`` (:data:`DP_STEP_RESULT`: empriv's DP step over the non-private step
  of the same loop and batch, CPU time, GPT-2-small's shape at seq_len 128, full fine-tuning for ``full``, LoRA for
  the adapters). Without that file the plan logs a warning and takes :data:`DP_OVERHEAD` (×1.76 / ×1.01, the
  2026-11-25 opacus-path figures of the tiny GPT-2 and SmolLM2-135M: conservative  ones). Attention's seq_len² term is left out (~2 % at seq_len 128).
- **GPU rate** = peak × utilisation: dense bf16 peak 312 TFLOP/s (A100), 989 TFLOP/s (H100 SXM); fp32 (no TF32:
  torch's default) 19.5 and 67. Training at 35 % of peak (model FLOPs utilisation typical of Hugging Face models of
  this size without fused kernels). ACR's GCG search and sampled generation are latency-bound (a pass scores ~100
  sequences of ~60 tokens) and run in fp32 (scoring does: docs/gpu.md): 10 % of the fp32 peak, which is what the
  research's own measurement implies — on average 1,100 s per secret for GPT-2-S and 5,300 s for GPT-2-L on an H100
  (its appendix G) against the FLOPs of a search that fails at every length (below) for a 50-token secret: 10 %
  and 13 % (6-7 % with its secrets' ~20 tokens; an average over searches that also succeed: ±2×).
- **The CPU measurement** (:data:`CPU_STEP`, the stored ``dp_step_2026-11-25.txt`` row and the command that made it): the
  non-private step of the tiny GPT-2 converted with the same 6 · N · tokens into the FLOP/s this machine achieves;
  it is printed as the check of the FLOP model and as what the study would take here — it does not enter the GPU
  hours, which depend only on FLOPs and the GPU rate.
- **ACR cost per secret** is that of a search failing at every length it tries (what the hardest secrets cost):
  per GCG step one forward + backward on the prompt, one forward of ``candidates`` sequences and (published) one
  check pass, over the lengths start, start + grow, … < max_length with steps × step_growth after each failure, for
  every search seed. At the published budget that is 17,844 model passes per secret, as ``benchmarks/acr.py``
  counted (``benchmarks/studies/results/acr_synthetic.json``).
  The plan also prices every ACR search of the study at the published procedure and budget (the budget
  ``benchmarks/acr.py`` measured at, :data:`ACR_RESULT`'s ``published_settings_values``) and at the fast strategy
  with that budget, whose cost is the published one divided by the measured ratio of sequences scored
  (``ratio_sequences``, ~13×): what the default search saves.
- **Secrets**: the research's counts where the secrets come from a model-based filter that has not run yet
  (Enron: 69 mined candidates, 13 kept; TOFU: 200 authors' pairs, 52 kept; appendix B.6), their token length
  secrets.ngram for mined Enron secrets.
- **Memory** of the filter stage: one non-private model and the base, in fp32 (it loads the runs one at a time).
- **Memory** of a training run (docs/gpu.md section 4): fixed = weights (fp32) + their bf16 copy + gradient, Adam
  moments and clipped sum of the trainable parameters; per example of the micro-batch = what the DP step measured
  per example at GPT-2-small (:data:`DP_STEP_RESULT`: (peak RSS at micro-batch 8 − at 4) / 4, fp32, seq_len 128),
  scaled to the study's model, seq_len and precision by activations + logits (layers · seq_len · (34 d + 5 h ·
  seq_len) bytes in bf16, ×2 in fp32, + seq_len · V · 10 bytes). Without the file: that formula + the float32
  per-example gradient of the trainable parameters + (full) opacus' saved layer inputs. ``micro_batch_size: auto``
  takes the largest power of two ≤ 256 that fits 90 % of the GPU.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from empriv.config import ConfigError, Params, RunConfig, is_local_base, method_traits, parse_params


@dataclass(frozen=True)
class ModelSize:
    """A base model's shape: N, layers ℓ, hidden size d, heads h, vocabulary V, and Σ (in + out features) of the
    projections LoRA targets in one layer (its trainable parameters are rank × that × layers)."""

    params: int
    layers: int
    d_model: int
    heads: int
    vocab: int
    lora_io_per_layer: int


_GPT2_S = ModelSize(124_439_808, 12, 768, 12, 50_257, 11 * 768)  # LoRA: c_attn (d→3d), attn c_proj, mlp c_proj (4d→d)
_GPT2_L = ModelSize(774_030_080, 36, 1280, 20, 50_257, 11 * 1280)
_LLAMA2_7B = ModelSize(6_738_415_616, 32, 4096, 32, 32_000, 8 * 4096)  # LoRA: q, k, v, o (no grouped KV)
_LLAMA2_13B = ModelSize(13_015_864_320, 40, 5120, 40, 32_000, 8 * 5120)
MODEL_SIZES: dict[str, ModelSize] = {
    "openai-community/gpt2": _GPT2_S, "gpt2": _GPT2_S,
    "openai-community/gpt2-large": _GPT2_L, "gpt2-large": _GPT2_L,
    "meta-llama/Llama-2-7b-hf": _LLAMA2_7B, "meta-llama/Llama-2-13b-hf": _LLAMA2_13B,
    "smollm2-135m": ModelSize(134_515_008, 30, 576, 9, 49_152, 2 * 576 + 2 * (576 + 192)),  # q, o; k, v to 3 KV heads
    "EleutherAI/pythia-1b": ModelSize(1_011_781_632, 16, 2048, 8, 50_304, 3 * 2048 + 2 * 2048),  # query_key_value, dense
}


def model_size(params: Params) -> ModelSize:
    """The base's shape: the table above (no download), or tiny-gpt2's from its params."""
    b = params.base
    if b.name == "tiny-gpt2":
        d, layers, vocab, positions = b.n_embd, b.n_layer, params.tokenizer.vocab_size, b.n_positions or b.seq_len
        n = vocab * d + positions * d + layers * (12 * d * d + 13 * d) + 2 * d
        return ModelSize(n, layers, d, b.n_head, vocab, 11 * d)
    if b.name in MODEL_SIZES:
        return MODEL_SIZES[b.name]
    local = Path(b.name).expanduser()
    if is_local_base(b.name) and (local / "config.json").exists():
        return _local_model_size(local)
    raise ConfigError(f"study plan: no parameter count for base.name {b.name!r} (allowed: tiny-gpt2, a local model "
                      f"directory with a config.json, "
                      f"{', '.join(sorted(MODEL_SIZES))}; add it to empriv.study_plan.MODEL_SIZES)")


def _local_model_size(directory: Path) -> ModelSize:
    """A local model directory's shape from its config.json: the architecture built on the meta device (no weights
    read, no memory), its parameters counted."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(directory))
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    get = lambda *keys: next(getattr(config, k) for k in keys if getattr(config, k, None) is not None)  # noqa: E731
    d = get("hidden_size", "n_embd")
    return ModelSize(n, get("num_hidden_layers", "n_layer"), d, get("num_attention_heads", "n_head"), config.vocab_size,
                     11 * d if config.model_type == "gpt2" else 8 * d)


@dataclass(frozen=True)
class GPU:
    name: str
    bf16_flops: float  # dense peak, FLOP/s
    fp32_flops: float  # no TF32 (torch's default)
    memory_gb: float


GPUS = {"A100": GPU("A100", 312e12, 19.5e12, 80.0), "H100": GPU("H100", 989e12, 67e12, 80.0)}
TRAIN_UTILISATION = 0.35
SEARCH_UTILISATION = 0.10  # of the fp32 peak: ACR (GCG) and sampled generation, latency-bound (module docstring)

# benchmarks/studies/results/dp_step_2026-11-25.txt, made by
# `OMP_NUM_THREADS=1 nice python benchmarks/dp_step.py --repeats 7 --steps 2
# --smollm` (2026-11-25, this 2-core machine, 1 torch thread): median seconds per step of 64 records x 64 tokens.
CPU_STEP = {"model": "tiny-gpt2 (2 layers x 64, vocabulary 2048, 64 positions)", "params": 235_264,
            "tokens": 64 * 64, "seconds_nonprivate": 0.1444,
            "source": "benchmarks/studies/results/dp_step_2026-11-25.txt "
                      "(OMP_NUM_THREADS=1 nice python benchmarks/dp_step.py "
                      "--repeats 7 --steps 2 --smollm)"}
# Fallback only (no DP_STEP_RESULT): empriv DP step / non-private step (dp_step_2026-11-25.txt: tiny full; SmolLM2 LoRA)
DP_OVERHEAD = {"full": 1.76, "adapter": 1.01}
DP_STEP_RESULT = Path("benchmarks") / "results" / "dp_step_gpt2s.json"  # benchmarks/dp_step.py --shape gpt2-small --json
ACR_RESULT = Path("benchmarks") / "results" / "acr.json"  # benchmarks/acr.py --json
ACR_FALLBACK_RATIO = 13.2  # acr.json's ratio_sequences on 2026-11-28, used only when the file is missing
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measured:
    """What the plan takes from the committed benchmark results (or their fallbacks, ``*_source`` saying which)."""

    dp_overhead: dict  # {"full": x, "adapter": x}: empriv's DP step / the non-private step, CPU time
    per_example_mb: dict | None  # {"full": MB, "adapter": MB} per example of the DP step at ``reference``; None: formula
    reference: dict | None  # the measured shape: layers, d_model, heads, vocab, seq_len (fp32)
    dp_source: str
    acr_ratio: float  # sequences scored, published / fast at the published budget
    acr_published: dict  # the published budget and procedure (score.acr keys)
    acr_source: str


def _read_json(path: Path, what: str) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        log.warning("study plan: %s not found: %s", path, what)
    except (OSError, ValueError) as err:
        log.warning("study plan: %s unreadable (%s): %s", path, err, what)
    return None


def read_measurements(root: Path) -> Measured:
    """The DP step's overhead and per-example memory (``root``/:data:`DP_STEP_RESULT`) and the fast ACR search's
    saving (``root``/:data:`ACR_RESULT`); a missing or unreadable file is a logged warning and its fallback."""
    root = Path(root)
    dp = _read_json(root / DP_STEP_RESULT, f"using the fallback DP overheads x{DP_OVERHEAD['full']} (full) / "
                    f"x{DP_OVERHEAD['adapter']} (adapters) and per-example memory by formula; "
                    "`OMP_NUM_THREADS=1 python benchmarks/dp_step.py --shape gpt2-small --json "
                    f"{DP_STEP_RESULT}` measures them")
    if dp is not None:
        try:
            m, shape = dp["methods"], dp["shape"]
            overhead = {"full": float(m["full"]["dp_over_np_cpu"]), "adapter": float(m["lora"]["dp_over_np_cpu"])}
            per_example = {"full": float(m["full"]["per_example_mb"]["dp"]),
                           "adapter": float(m["lora"]["per_example_mb"]["dp"])}
            reference = {k: int(shape[k]) for k in ("layers", "d_model", "heads", "vocab", "seq_len")}
            dp_source = f"{DP_STEP_RESULT} ({dp.get('date', 'undated')})"
        except (KeyError, TypeError, ValueError) as err:
            log.warning("study plan: %s lacks %s: using the fallback DP figures", root / DP_STEP_RESULT, err)
            dp = None
    if dp is None:
        overhead, per_example, reference = dict(DP_OVERHEAD), None, None
        dp_source = f"fallback: {DP_STEP_RESULT} missing"
    acr = _read_json(root / ACR_RESULT, f"using the fallback fast-search saving {ACR_FALLBACK_RATIO}x fewer "
                     "sequences and the published budget of benchmarks/acr.py")
    try:
        ratio, published = float(acr["ratio_sequences"]), dict(acr["published_settings_values"])
        acr_source = str(ACR_RESULT)
    except (KeyError, TypeError, ValueError):
        if acr is not None:
            log.warning("study plan: %s lacks ratio_sequences or published_settings_values: using the fallbacks",
                        root / ACR_RESULT)
        ratio, acr_source = ACR_FALLBACK_RATIO, f"fallback: {ACR_RESULT} missing"
        published = {"strategy": "published", "candidates": 100, "steps": 200, "step_growth": 1.2, "start_length": 5,
                     "grow": 5, "max_length": 30, "seeds": [0, 1, 2]}
    return Measured(overhead, per_example, reference, dp_source, ratio, published, acr_source)


PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout this module runs from

# The research's secret counts (appendix B.6), for filters that have not run yet.
ENRON_MINED, ENRON_KEPT = 69, 13
TOFU_AUTHORS, TOFU_KEPT = 200, 52
AIR_PROMPT_TOKENS = 16  # "What genre does {x} write in?" with a name
SYNTHETIC_SECRET_TOKENS = 25


def cpu_flops_per_s() -> float:
    """FLOP/s this machine achieves on the measured non-private step (6 · N · tokens / seconds)."""
    return 6 * CPU_STEP["params"] * CPU_STEP["tokens"] / CPU_STEP["seconds_nonprivate"]


def _full(params: Params, method: str) -> bool:
    return method_traits(params.for_method(method).train.method).trains_all_weights


def trainable_params(params: Params, size: ModelSize, method: str) -> int:
    if _full(params, method):
        return size.params
    return params.train.lora.rank * size.lora_io_per_layer * size.layers  # LoRA; a fair size for the other adapters


def train_flops(params: Params, size: ModelSize, run: RunConfig, overheads: dict | None = None) -> float:
    """k · N · b · T · seq_len, × the DP overhead for a private run (``overheads``: default :data:`DP_OVERHEAD`)."""
    full = _full(params, run.method)
    k = 6 if full else 4
    overhead = (overheads or DP_OVERHEAD)["full" if full else "adapter"] if run.private else 1.0
    return k * size.params * run.batch_size * run.steps * params.base.seq_len * overhead


def secret_counts(params: Params) -> tuple[int, int, int]:
    """(candidates before the filter, secrets scored, tokens per secret)."""
    source, filtered = params.data.source, params.secrets.filter
    if source == "enron":
        return ENRON_MINED, ENRON_KEPT if filtered else ENRON_MINED, params.secrets.ngram
    if source == "tofu":
        train_authors = round(0.9 * TOFU_AUTHORS)
        return train_authors, TOFU_KEPT if filtered else train_authors, 4
    if source == "synthetic-tofu":
        n = round(0.9 * params.data.n_authors)
        return n, n, 4
    n = len(params.data.secret_frequencies)
    return n, n, SYNTHETIC_SECRET_TOKENS


def acr_search(params: Params, size: ModelSize, secret_tokens: int, settings=None) -> tuple[float, int]:
    """(FLOPs, model passes) of one secret's ACR search that fails at every length it tries, over every seed;
    ``settings``: a budget other than ``score.acr``'s (the same attribute names)."""
    a = params.score.acr if settings is None else settings
    per_step_passes = 4 if a.strategy == "published" else 3  # gradient forward + backward, candidates, (check)
    check = 1 if a.strategy == "published" else 0
    flops, passes, steps, length = 0.0, 0, a.steps, a.start_length
    while True:
        tokens = length + secret_tokens
        flops += steps * tokens * size.params * (4 + 2 * (a.candidates + check))
        passes += steps * per_step_passes
        length += a.grow
        steps = int(steps * a.step_growth)
        if length >= a.max_length:
            break
    return flops * len(a.seeds), passes * len(a.seeds)


def score_flops(params: Params, size: ModelSize, n_secrets: int, secret_tokens: int) -> tuple[float, float]:
    """(dense forward FLOPs: test NLL; latency-bound FLOPs: VMR / control / AIR sampling) of one score run."""
    s, n2 = params.score, 2 * size.params
    dense = n2 * params.data.n_test * params.base.seq_len
    sampled = n2 * n_secrets * secret_tokens * (s.vmr_samples + s.n_controls)
    if params.data.source.endswith("tofu"):
        sampled += n2 * n_secrets * s.air_samples * (AIR_PROMPT_TOKENS + s.air_max_new_tokens)
    return dense, sampled


def _activations_and_logits(layers: int, d_model: int, heads: int, vocab: int, seq_len: int, bf16: bool) -> float:
    """Bytes per example of what any training step keeps: activations and the logits (module docstring)."""
    return layers * seq_len * (34 * d_model + 5 * heads * seq_len) * (1 if bf16 else 2) + seq_len * vocab * 10


def memory_gb(params: Params, size: ModelSize, method: str, gpu: GPU, measured: Measured | None = None) -> dict:
    """Training memory: fixed and per-example GB, the micro-batch ``auto`` would take on ``gpu``, the peak."""
    bf16 = params.runtime.precision == "bf16"
    n, a, s = size.params, trainable_params(params, size, method), params.base.seq_len
    full = _full(params, method)
    fixed = 4 * n + (2 * n if bf16 else 0) + (16 * n if full else 20 * a)  # weights (+ bf16 copy); grad, Adam, sum
    act = _activations_and_logits(size.layers, size.d_model, size.heads, size.vocab, s, bf16)
    if measured is not None and measured.per_example_mb is not None:  # measured at the reference shape, scaled
        ref = measured.reference
        at_ref = _activations_and_logits(ref["layers"], ref["d_model"], ref["heads"], ref["vocab"], ref["seq_len"], False)
        per_example = measured.per_example_mb["full" if full else "adapter"] * 1e6 * act / at_ref
    else:
        per_example = act + 4 * a + (7 * size.d_model * s * size.layers * 4 if full else 0)
    room = 0.9 * gpu.memory_gb * 1e9 - fixed
    m = 0 if room < per_example else min(256, 2 ** int(math.log2(room / per_example)))
    return {"fixed_gb": fixed / 1e9, "per_example_gb": per_example / 1e9, "micro_batch": m,
            "peak_gb": (fixed + max(m, 1) * per_example) / 1e9}


def plan(params: Params, measured: Measured | None = None) -> dict:
    """Run counts and the estimate (module docstring) of validated study params; ``measured``: the benchmark figures
    (default: :func:`read_measurements` of the checkout this module runs from)."""
    size = model_size(params)
    measured = read_measurements(PROJECT_ROOT) if measured is None else measured
    runs, audits = params.runs(), params.audit_runs()
    acr = params.score.acr
    n_candidates, n_secrets, secret_tokens = secret_counts(params)
    acr_secrets = min(n_secrets, acr.max_secrets or n_secrets)
    search_flops, search_passes = acr_search(params, size, secret_tokens)
    published_flops = acr_search(params, size, secret_tokens, SimpleNamespace(**measured.acr_published))[0]
    acr_runs = [r for r in runs if acr.applies_to(r) and not params.data.source.endswith("tofu")]
    nonprivate = [r for r in runs if not r.private]
    dense, sampled = score_flops(params, size, n_secrets, secret_tokens)
    canary_tokens = (params.canaries.n_canaries + params.canaries.n_population) * params.base.seq_len
    with_acr = set(acr_runs)
    from empriv.secrets.filtering import select_filter_runs

    asked = select_filter_runs(runs, params.secrets.filter_runs) if params.secrets.filter else []
    ov = measured.dp_overhead

    def stages_at(search: float) -> dict:  # per run: (dense FLOPs at the training rate, latency-bound FLOPs)
        stages = {
            "train": [(train_flops(params, size, r, ov), 0.0) for r in runs],
            "score": [(dense, sampled + (acr_secrets * search if r in with_acr else 0.0)) for r in runs],
            "audit": [(train_flops(params, size, r, ov) + 2 * 2 * size.params * canary_tokens, 0.0) for r in audits],
        }
        if params.secrets.filter:
            if params.data.source.endswith("tofu"):  # greedy answers of every asked non-private model to every author
                filt = len(asked) * n_candidates * 2 * size.params * (AIR_PROMPT_TOKENS + params.score.air_max_new_tokens)
            else:  # ACR of every candidate under the first asked run and under the base; greedy verbatim tests
                filt = 2 * n_candidates * search + len(asked) * n_candidates * 2 * size.params * secret_tokens
            stages["filter"] = [(0.0, filt)]
        return stages

    def hours(dense_flops: float, search: float, gpu: GPU) -> float:
        dense_rate = (gpu.bf16_flops if params.runtime.precision == "bf16" else gpu.fp32_flops) * TRAIN_UTILISATION
        return (dense_flops / dense_rate + search / (gpu.fp32_flops * SEARCH_UTILISATION)) / 3600

    def table_of(stages: dict) -> list[dict]:
        table = []
        for name, items in stages.items():
            row = {"stage": name, "runs": len(items), "pflop": sum(d + x for d, x in items) / 1e15}
            for g, gpu in GPUS.items():
                per_run = [hours(d, x, gpu) for d, x in items] or [0.0]
                row[f"{g}_h_total"] = sum(per_run)
                row[f"{g}_h_per_run_max"] = max(per_run)
                row[f"{g}_h_per_run_mean"] = sum(per_run) / len(per_run)
            table.append(row)
        return table

    def total(table: list[dict]) -> dict:
        return {k: sum(r[k] for r in table) for k in ("runs", "pflop", "A100_h_total", "H100_h_total")}

    table = table_of(stages_at(search_flops))
    searches = bool(acr_runs) or (params.secrets.filter and not params.data.source.endswith("tofu"))
    acr_budgets = None
    if searches:  # every ACR search of the study at the published budget and procedure, and at the fast strategy
        acr_budgets = {"ratio_sequences": measured.acr_ratio, "source": measured.acr_source,
                       "published": total(table_of(stages_at(published_flops))),
                       "fast": total(table_of(stages_at(published_flops / measured.acr_ratio)))}
    methods = sorted({r.method for r in runs} | {r.method for r in audits})
    memory = {m: {g: memory_gb(params, size, m, gpu, measured) for g, gpu in GPUS.items()} for m in methods}
    model_bytes = 4 * size.params
    cpu = cpu_flops_per_s()
    total_flops = sum(r["pflop"] for r in table) * 1e15
    return {
        "base": params.base.name, "params": size.params, "methods": methods, "precision": params.runtime.precision,
        "seq_len": params.base.seq_len,
        "counts": {"train": len(runs), "train_private": len(runs) - len(nonprivate), "train_nonprivate": len(nonprivate),
                   "score": len(runs), "score_with_acr": len(acr_runs), "audit": len(audits),
                   "filter": 1 if params.secrets.filter else 0, "filter_models": len(asked)},
        "secrets": {"candidates": n_candidates, "scored": n_secrets, "acr": acr_secrets if acr_runs else 0,
                    "tokens": secret_tokens, "acr_passes_per_secret": search_passes if acr_runs else 0},
        "table": table,
        "total": total(table),
        "acr_budgets": acr_budgets,
        "memory": memory,
        # the filter loads the non-private runs one at a time: peak one of them and the base (fp32)
        "filter_peak_gb": 2 * model_bytes / 1e9 if params.secrets.filter else 0.0,
        "dp_step": {"overhead": dict(ov), "per_example_mb": measured.per_example_mb, "reference": measured.reference,
                    "source": measured.dp_source},
        "cpu": {"flops_per_s": cpu, "study_cpu_years": total_flops / cpu / 3600 / 24 / 365, **CPU_STEP},
    }


def plan_preset(name: str, root: Path, data_path: str | None = None) -> dict:
    """Validate preset ``name`` (as ``empriv study run`` does) and plan it."""
    from empriv.study import resolve_preset

    from empriv.study_design import parts, union_params

    raw = resolve_preset(name, root.resolve(), data_path)
    params = union_params(raw, [p for _, p in parts(raw)])  # a one-at-a-time design: the union of its parts' runs
    model_size(params)  # an unknown base is its one error line before any warning about the benchmark files
    return {"preset": name, **plan(params, read_measurements(root.resolve()))}


def _h(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def format_plan(p: dict) -> str:
    c, s = p["counts"], p["secrets"]
    size = f"{p['params'] / 1e6:,.0f}M" if p["params"] >= 1e7 else f"{p['params']:,}"
    lines = [f"{p['preset']}: valid. base {p['base']} ({size} parameters), "
             f"{'/'.join(p['methods'])}, {p['precision']}, seq_len {p['seq_len']}",
             f"runs: {c['train']} train ({c['train_private']} private, {c['train_nonprivate']} non-private), "
             f"{c['score']} score (" + (f"{c['score_with_acr']} with ACR on {s['acr']} secrets, at most "
                                          f"{s['acr_passes_per_secret']:,} model passes each" if c["score_with_acr"]
                                          else f"no ACR; {s['scored']} secrets") + f"), {c['audit']} audit, "
             f"{c['filter']} filter",
             "ESTIMATE for one GPU (arithmetic, not measured: docs/gpu.md section 5 says how):",
             f"{'stage':<7} {'runs':>5} {'PFLOP':>9} {'H100 h/run':>11} {'(max)':>7} {'H100 h':>8} {'A100 h':>8}"]
    for r in [*p["table"], {"stage": "total", **p["total"], "H100_h_per_run_mean": None}]:
        per_run = "" if r["H100_h_per_run_mean"] is None else _h(r["H100_h_per_run_mean"])
        per_max = "" if r["H100_h_per_run_mean"] is None else _h(r["H100_h_per_run_max"])
        lines.append(f"{r['stage']:<7} {r['runs']:>5} {r['pflop']:>9,.1f} {per_run:>11} {per_max:>7} "
                     f"{_h(r['H100_h_total']):>8} {_h(r['A100_h_total']):>8}")
    for method, by_gpu in p["memory"].items():
        m = by_gpu["H100"]
        fit = f"micro-batch {m['micro_batch']} fits 80 GB (peak ~{m['peak_gb']:.0f} GB)" if m["micro_batch"] else \
            "does not fit 80 GB even at micro-batch 1"
        lines.append(f"memory per {method} training run: {m['fixed_gb']:.1f} GB fixed + {m['per_example_gb']:.2f} GB "
                     f"per example: {fit}")
    if p.get("acr_budgets"):
        a = p["acr_budgets"]
        pub, fast = a["published"]["H100_h_total"], a["fast"]["H100_h_total"]
        lines.append(f"ACR budgets, the whole study: published procedure and budget {_h(pub)} H100 h "
                     f"({_h(a['published']['A100_h_total'])} A100 h); the default fast search at that budget, "
                     f"{a['ratio_sequences']:.1f}x fewer sequences scored: {_h(fast)} H100 h "
                     f"({_h(a['fast']['A100_h_total'])} A100 h), {_h(pub - fast)} H100 h ({1 - fast / pub:.0%}) less "
                     f"({a['source']})")
    if p["filter_peak_gb"]:
        lines.append(f"filter: asks {c['filter_models']} of the {c['train_nonprivate']} non-private models "
                     f"(secrets.filter_runs), loaded one at a time: one of them and the base, ~{p['filter_peak_gb']:,.1f} GB (fp32)")
    cpu = p["cpu"]
    dp = p["dp_step"]
    lines.append(f"assumptions: 6N (full) / 4N (adapters) FLOPs per token, x{dp['overhead']['full']:.2f} / "
                 f"x{dp['overhead']['adapter']:.2f} when private; tokens = b*T*seq_len; peak bf16 312 (A100) / 989 (H100), fp32 19.5 / 67 TFLOP/s; "
                 f"utilisation {TRAIN_UTILISATION:.0%} training, {SEARCH_UTILISATION:.0%} of fp32 for ACR and sampling; "
                 f"secrets {s['scored']} of {s['candidates']} ({s['tokens']} tokens)")
    if dp["per_example_mb"]:
        ref = dp["reference"]
        lines.append(f"measured here: the DP step at GPT-2-small's shape (seq_len {ref['seq_len']}, fp32, "
                     f"{dp['source']}): x{dp['overhead']['full']:.2f} full / x{dp['overhead']['adapter']:.2f} LoRA the "
                     f"non-private step's CPU time, {dp['per_example_mb']['full']:.0f} / "
                     f"{dp['per_example_mb']['adapter']:.0f} MB per example (scaled to this model, seq_len and "
                     f"precision by activations + logits)")
    else:
        lines.append(f"measured here: no DP-step measurement ({dp['source']}): fallback overheads and per-example "
                     "memory by formula")
    lines.append(f"measured here: {cpu['model']}, non-private step of {cpu['tokens']} tokens in {cpu['seconds_nonprivate']} s "
                 f"= {cpu['flops_per_s'] / 1e9:.0f} GFLOP/s on 1 CPU thread ({cpu['source']}); "
                 "at that rate this study would take " + (f"{cpu['study_cpu_years']:,.0f} CPU-years" if cpu["study_cpu_years"] >= 1
                                                          else f"{cpu['study_cpu_years'] * 365 * 24 * 3600:,.0f} CPU-seconds"))
    return "\n".join(lines)
