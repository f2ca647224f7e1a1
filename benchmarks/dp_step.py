"""Benchmark: one training step, non-private vs empriv's DP steps vs opacus' DP steps, on the same model and batch.

Run:  OMP_NUM_THREADS=1 nice python benchmarks/dp_step.py [--repeats 7] [--steps 2] [--smollm]
      OMP_NUM_THREADS=1 nice python benchmarks/dp_step.py --shape all --json benchmarks/results/dp_step_gpt2s.json

- non-private: ``empriv.train.dp.dp_finetune`` with ``noise_multiplier=None`` (plain autograd on the mean loss);
- np-trim: the same non-private step on the fast step's micro-batches (records sorted by length, padding trimmed),
  so ``fast/np-trim`` is what privacy alone costs;
- empriv DP: ``dp_finetune`` with σ = 1, C = 1 and the default ``train.dp_step`` (auto: the fast step below for
  these models; opacus GradSampleModule + DPOptimizer before issue 18) — the training loop itself, so ``empriv/np``
  compares two runs of the same loop;
- empriv fast: :func:`empriv.models.fast_dp.fast_dp_step` (ghost norms or materialised per-example gradients per
  layer, the clipped sum in the one backward pass, padding trimmed) + Adam, same micro-batch, σ, C and noise law;
- opacus stock: ``opacus.PrivacyEngine.make_private`` (hooks) on the same model, a DataLoader over the same batch
  (no Poisson sampling), the loss of ``empriv.models.lm.per_sample_mean_nll`` summed per batch as opacus expects;
- opacus ghost: ``make_private(grad_sample_mode="ghost")`` (opacus' ghost clipping: norms in a first backward pass,
  the clipped sum in a second), its ``DPTensorFastGradientClipping`` built from the same per-sample loss (the loss
  is computed outside the model, as ghost mode wants). ``ghost err`` is opacus ghost's largest relative error in the
  per-example gradient norms against the fast step's exact norms on the batch (GPT-2 and SmolLM2 tie the input
  embedding and the LM head; a norm that misses a use or their cross term would show here; LoRA trains no tied
  weight). opacus 1.6 refuses ghost clipping of a model with tied trainable parameters (``NotImplementedError:
  Parameter tying is not supported with Ghost Clipping``): full fine-tuning of GPT-2 prints ``n/a`` there.

Every side runs q = 1 (the whole batch every step) so the steps are the same size. Models: the tiny GPT-2 of the
default run (2 layers × 64, full and LoRA) and, with ``--smollm``, SmolLM2-135M from the embedded GGUF (LoRA, fewer
records). Records are 33–64 tokens (random lengths, right-padded to 64). Printed: median seconds per step over
``--repeats`` interleaved runs of ``--steps`` steps (after a warm-up run; each run also takes one untimed first
step), on two clocks: the process' CPU time (what to compare on a shared, loaded machine) and wall time; the ratios
to the non-private step (issue 30's goal for empriv's step: ≤ 1.10 for full, ≤ 1.05 for LoRA), the fast step's
ratio to the trimmed non-private step, and its ratio to opacus stock and ghost; then, for the tiny GPT-2, whether
the goal is met on the CPU clock by both the training loop's step and the fast step alone. The allocator is set as
the stage processes set it (``--malloc tuned``, :mod:`empriv.infra.allocator`); ``--malloc default`` keeps glibc's
defaults, under which every side faults its large tensors in again each step (the runs before 2026-11-28).

``--shape gpt2-small`` (issue 45; ``--shape all`` runs the tiny shape first and judges both): GPT-2-small's shape
(12 layers × 768, vocabulary 50,257, tied embeddings, random init from a ``GPT2Config``, no download), 8 records
that fill a 128-token window, one micro-batch of 8, q = 1, full fine-tuning and LoRA. Variants: the non-private
step and empriv's DP step (both ``dp_finetune``, as above), opacus hooks, opacus ghost clipping (full fine-tuning:
the LM head untied, since opacus refuses tied trainable weights; opacus gets contiguous position ids, its
embedding grad sampler cannot view expanded ones). Every variant runs in a process of its own (``--child``), so its
peak memory is its own: ``ru_maxrss`` of that process (torch allocates tensors in C++, which ``tracemalloc`` does not
see). Time: the median over ``--gpt2s-steps`` timed steps after an untimed first (× ``--gpt2s-rounds`` processes),
CPU and wall clock. Per-example memory: the non-private and DP variants run again at micro-batches of 4,
(peak at 8 − peak at 4) / 4. The DP process also reports, for its first micro-batch, every trainable parameter's
path in the fast step (materialised per-example gradient or ghost norm) and whether the operation count or the
``max_explicit_elements`` cap decided it (the step's rule replayed and checked against the names it reports).
``--json`` writes the figures; ``benchmarks/results/dp_step_gpt2s.json`` is what ``empriv study plan`` reads.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import sys
import time
import warnings

import torch

SEQ_LEN = 64
GOALS = {"full": 1.10, "lora": 1.05}  # issue 30: empriv's DP step over the non-private step of the same batch


class StepClock:
    """Stamps (wall, process CPU) at the end of every step; per-step times exclude each run's first step.

    The machine is shared: wall time also counts the time other processes held the CPU, while the process' CPU time
    (one torch thread) counts only this side's work. Both are reported; the CPU clock is the one to compare under
    load."""

    def __init__(self):
        self.stamps = []

    def __call__(self, *_):
        self.stamps.append((time.perf_counter(), time.process_time()))

    def per_step(self) -> tuple[float, float]:
        (w0, c0), (w1, c1) = self.stamps[0], self.stamps[-1]
        k = len(self.stamps) - 1
        return (w1 - w0) / k, (c1 - c0) / k

    def steps(self) -> list[tuple[float, float]]:
        """(wall, cpu) seconds of every step after the first."""
        return [(w1 - w0, c1 - c0) for (w0, c0), (w1, c1) in zip(self.stamps, self.stamps[1:])]


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=2048, n_positions=SEQ_LEN,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


_SMOLLM2 = []


def smollm2():
    """SmolLM2-135M from the embedded GGUF, de-quantised once and copied for every side (same weights)."""
    import copy

    if not _SMOLLM2:
        from empriv.models.smollm2 import load_gguf_model, plain_copy

        _SMOLLM2.append(plain_copy(load_gguf_model()))
    return copy.deepcopy(_SMOLLM2[0])


def params_for(method: str, micro: int):
    from empriv.config import parse_params

    return parse_params({"data": {"n_train": 1000}, "train": {"optimizer": "adam", "clip_norm": 1.0,
                                                              "micro_batch_size": micro},
                         "cube": {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.001],
                                  "seed": [0], "method": [method]}}).for_method(method)


def prepared(make, method: str, params):
    from empriv.models.adapters import prepare_for_finetuning

    return prepare_for_finetuning(make(), method, params.train.lora, init_seed=0)


def batch(n: int, vocab: int):
    from empriv.models.lm import encode_fixed

    g = torch.Generator().manual_seed(0)
    lists = [torch.randint(0, vocab - 1, (int(torch.randint(SEQ_LEN // 2, SEQ_LEN, (1,), generator=g)),),
                           generator=g).tolist() for _ in range(n)]
    return encode_fixed(lists, vocab - 1, SEQ_LEN)


def time_empriv(make, method, ids, mask, steps, micro, sigma, clock=None) -> float:
    from empriv.config import RunConfig
    from empriv.train.dp import dp_finetune

    params = params_for(method, micro)
    model = prepared(make, method, params)
    run = RunConfig(8.0 if sigma is not None else float("inf"), ids.shape[0], steps + 1, 0.001, 0, method=method)
    clock = StepClock() if clock is None else clock
    res = dp_finetune(model, ids, mask, run=run, noise_multiplier=sigma, params=params, device=torch.device("cpu"),
                      on_step=clock)
    assert res.batch_sizes == [ids.shape[0]] * (steps + 1), res.batch_sizes
    return clock.per_step()


def time_opacus(make, method, ids, mask, steps, micro, clock=None) -> float:
    from opacus import PrivacyEngine
    from opacus.utils.batch_memory_manager import BatchMemoryManager
    from torch.utils.data import DataLoader, TensorDataset

    from empriv.models.lm import per_sample_mean_nll

    params = params_for(method, micro)
    model = prepared(make, method, params).train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.001)
    loader = DataLoader(TensorDataset(ids, mask), batch_size=ids.shape[0])
    engine = PrivacyEngine(accountant="prv")
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                   noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=False)
    clock = StepClock() if clock is None else clock
    for _ in range(steps + 1):
        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=micro, optimizer=optimizer) as mem:
            for x, m in mem:
                optimizer.zero_grad()
                per_sample_mean_nll(model, x, m).mean().backward()
                optimizer.step()
        clock()
    return clock.per_step()


def time_np_trimmed(make, method, ids, mask, steps, micro) -> float:
    """The non-private step on the fast step's micro-batches (records sorted by length, right padding trimmed):
    the ratio fast / this isolates what privacy costs from what trimming saves."""
    from empriv.models.fast_dp import record_lengths, trim_padding
    from empriv.models.lm import per_sample_mean_nll

    params = params_for(method, micro)
    model = prepared(make, method, params).train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.001)
    clock = StepClock()
    for _ in range(steps + 1):
        optimizer.zero_grad(set_to_none=True)
        order = torch.argsort(record_lengths(mask), stable=True)
        for start in range(0, len(order), micro):
            rows = order[start:start + micro]
            x, m = trim_padding(ids[rows], mask[rows])
            (per_sample_mean_nll(model, x, m).sum() / len(order)).backward()
        optimizer.step()
        clock()
    return clock.per_step()


def time_fast(make, method, ids, mask, steps, micro) -> float:
    from empriv.models.fast_dp import fast_dp_step

    params = params_for(method, micro)
    model = prepared(make, method, params).train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.001)
    gen = torch.Generator().manual_seed(0)
    clock = StepClock()
    for _ in range(steps + 1):
        optimizer.zero_grad(set_to_none=True)
        fast_dp_step(model, ids, mask, clip_norm=1.0, noise_multiplier=1.0, expected_batch_size=ids.shape[0],
                     generator=gen, micro_batch_size=micro)
        optimizer.step()
        clock()
    return clock.per_step()


def make_ghost(make, method, ids, mask, micro):
    """Model, optimizer and loader made private by opacus' ghost clipping (grad_sample_mode="ghost")."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    params = params_for(method, micro)
    model = prepared(make, method, params).train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.001)
    loader = DataLoader(TensorDataset(ids, mask), batch_size=ids.shape[0])
    engine = PrivacyEngine(accountant="prv")
    model, optimizer, _criterion, loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0,
        poisson_sampling=False, grad_sample_mode="ghost", criterion=torch.nn.CrossEntropyLoss())
    return model, optimizer, loader


def time_opacus_ghost(make, method, ids, mask, steps, micro, clock=None) -> float:
    from opacus.utils.batch_memory_manager import BatchMemoryManager
    from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping

    from empriv.models.lm import per_sample_mean_nll

    model, optimizer, loader = make_ghost(make, method, ids, mask, micro)
    clock = StepClock() if clock is None else clock
    for _ in range(steps + 1):
        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=micro, optimizer=optimizer) as mem:
            for x, m in mem:
                optimizer.zero_grad()
                DPTensorFastGradientClipping(model, optimizer, per_sample_mean_nll(model, x, m), "mean").backward()
                optimizer.step()
        clock()
    return clock.per_step()


def ghost_norm_error(make, method, ids, mask) -> float:
    """Largest relative difference between opacus ghost's per-example norms and the fast step's (exact) ones."""
    from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping

    from empriv.models.fast_dp import fast_dp_step
    from empriv.models.lm import per_sample_mean_nll

    model, optimizer, _ = make_ghost(make, method, ids, mask, ids.shape[0])
    DPTensorFastGradientClipping(model, optimizer, per_sample_mean_nll(model, ids, mask), "mean").backward()
    ghost = model.per_sample_gradient_norms.detach().clone()
    exact_model = prepared(make, method, params_for(method, ids.shape[0])).train()
    exact = fast_dp_step(exact_model, ids, mask, clip_norm=1.0, noise_multiplier=0.0, expected_batch_size=1.0,
                         generator=None).per_sample_norms
    # opacus' "mean" reduction scales each example's loss by 1/B before its hooks undo it: compare like with like
    return float(((ghost - exact).abs() / exact).max())


# ----------------------------------------------------------------------------- --shape gpt2-small (issue 45)
GPT2S_SEQ, GPT2S_MICRO, GPT2S_BATCH = 128, 8, 8
GPT2S_GOAL = 1.15  # issue 45: empriv's DP step <= 1.15x the non-private step, at the tiny shape and at GPT-2-small
GPT2S_VARIANTS = {"np": "non-private", "dp": "empriv DP", "opacus": "opacus hooks", "ghost": "opacus ghost"}
# --gpt2s-alternatives: empriv's DP step with the per-parameter choice forced one way (is the default right at T 128?)
GPT2S_ALTERNATIVES = {"dp_ghost": "empriv all-ghost", "dp_nocap": "empriv no cap"}
GPT2S_JSON = "benchmarks/results/dp_step_gpt2s.json"


def gpt2_small(tied: bool = True):
    """GPT-2-small's shape (12 layers x 768, 12 heads, vocabulary 50,257, 1,024 positions: 124,439,808 parameters
    tied), random init, no dropout (as the tiny shape); ``tied=False`` unties the LM head (opacus ghost clipping
    refuses tied trainable weights)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=tied))


def full_windows(n: int, vocab: int, seq: int):
    """n records that fill the window (EOS + seq - 1 random tokens): no padding for the fast step to trim."""
    from empriv.models.lm import encode_fixed

    g = torch.Generator().manual_seed(0)
    return encode_fixed([torch.randint(0, vocab - 1, (seq - 1,), generator=g).tolist() for _ in range(n)], vocab - 1,
                        seq)


def _contiguous_position_ids(ids: torch.Tensor) -> torch.Tensor:
    # opacus' embedding grad sampler views the position ids: an expand()ed [1, L] -> [B, L] tensor fails with
    # "view size is not compatible with input tensor's size and stride"
    return torch.arange(ids.shape[1], device=ids.device).unsqueeze(0).expand_as(ids).contiguous()


def record_layer_choices(into: list) -> None:
    """Make the fast step's ``_clip_and_accumulate`` report, for its first micro-batch, every trainable parameter's
    path (materialised per-example gradient or ghost norm) and what decided it: the same rule replayed
    (``fast_dp._explicit_cheaper`` under the ``max_explicit_elements`` budget, in parameter order) and checked
    against the names the step itself reports."""
    from empriv.models import fast_dp

    original = fast_dp._clip_and_accumulate

    def wrapper(model, named, tape, batch, clip_norm, mode, cap, summed, explicit_names, ghost_names):
        rows = []
        if not into:
            budget = cap
            for name, p in named:
                uses = tape.uses.get(id(p))
                if not uses:
                    continue
                size = batch * p.numel()
                ghostable = all(u[0] in ("lin", "emb") for u in uses)
                cheaper = fast_dp._explicit_cheaper(uses, p.numel()) if ghostable else True
                fits = size <= budget
                if not ghostable:
                    explicit, why = True, "no ghost form"
                elif mode != "auto":
                    explicit, why = mode == "explicit", f"mode {mode}"
                else:
                    explicit = fits and cheaper
                    why = "op count" if explicit or not cheaper else "cap"
                if explicit:
                    budget -= size
                rows.append({"param": name, "numel": p.numel(), "uses": [u[0] for u in uses],
                             "tokens": int(uses[0][-1].shape[1]), "ghostable": ghostable,
                             "op_count_prefers": "explicit" if cheaper else "ghost", "fits_cap": fits,
                             "path": "explicit" if explicit else "ghost", "decided_by": why})
        out = original(model, named, tape, batch, clip_norm, mode, cap, summed, explicit_names, ghost_names)
        for row in rows:
            actual = "explicit" if row["param"] in explicit_names else "ghost"
            assert actual == row["path"], (row, actual)  # the replayed rule is the step's rule
        into.extend(rows)
        return out

    fast_dp._clip_and_accumulate = wrapper


def run_variant(method: str, variant: str, micro: int, steps: int) -> dict:
    """One variant in this process (``--child``): per-step seconds after the first step, ru_maxrss."""
    import functools
    import resource

    import opacus  # noqa: F401  every variant imports the same libraries before its baseline

    from empriv.models.lm import encode_fixed  # noqa: F401

    ids, mask = full_windows(GPT2S_BATCH, 50_257, GPT2S_SEQ)
    baseline = _rss_mb()
    tied = not (variant == "ghost" and method == "full")
    make = functools.partial(gpt2_small, tied=tied)
    choices: list = []
    if variant in ("opacus", "ghost"):
        import empriv.models.lm as lm

        lm.position_ids_like = _contiguous_position_ids
    if variant.startswith("dp"):
        record_layer_choices(choices)
    if variant in GPT2S_ALTERNATIVES:  # train.dp's step imports fast_dp_step from the module at every call
        from empriv.models import fast_dp

        forced = {"mode": "ghost"} if variant == "dp_ghost" else {"max_explicit_elements": 1 << 40}
        fast_dp.fast_dp_step = functools.partial(fast_dp.fast_dp_step, **forced)
    clock = StepClock()
    if variant == "np" or variant.startswith("dp"):
        time_empriv(make, method, ids, mask, steps, micro, None if variant == "np" else 1.0, clock)
    elif variant == "opacus":
        time_opacus(make, method, ids, mask, steps, micro, clock)
    else:
        time_opacus_ghost(make, method, ids, mask, steps, micro, clock)
    if variant.startswith("dp") and not choices:
        raise RuntimeError("empriv's DP step did not take the fast step (train.dp_step auto chose opacus)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # Linux: KiB; MB = 10^6 bytes
    return {"method": method, "variant": variant, "micro": micro, "tied": tied, "steps": clock.steps(),
            "baseline_rss_mb": baseline, "peak_rss_mb": peak, "choices": choices}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        import os

        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _child(method: str, variant: str, micro: int, steps: int, threads: int, malloc: str) -> dict:
    import json
    import os
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, __file__, "--shape", "gpt2-small", "--child", f"{method}:{variant}:{micro}",
                           "--gpt2s-steps", str(steps), "--threads", str(threads), "--malloc", malloc],
                          capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"{method} {variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _layer_table(choices: list[dict]) -> list[str]:
    """One line per transformer block (the paths of its weights), the other weights one line each, the
    parameters without a ghost form summed up."""
    import re

    code = {("explicit", "op count"): "E:ops", ("ghost", "cap"): "G:cap", ("ghost", "op count"): "G:ops"}
    blocks, others, plain = {}, [], []
    for c in choices:
        if not c["ghostable"]:
            plain.append(c)
            continue
        m = re.search(r"\.h\.(\d+)\.(.*)$", c["param"])
        if m:
            short = m.group(2).replace(".default", "").removesuffix(".weight")
            blocks.setdefault(int(m.group(1)), {})[short] = c
        else:
            others.append(c)
    lines = []
    for c in others:
        lines.append(f"  {c['param']} ({'+'.join(c['uses'])}, {c['numel']:,} weights, T {c['tokens']}): {c['path']}, "
                     f"decided by the {c['decided_by']} (op count prefers {c['op_count_prefers']}, "
                     f"{'fits' if c['fits_cap'] else 'over'} the cap)")
    if blocks:
        names = list(next(iter(blocks.values())))
        width = max(len(n) for n in names) + 2
        lines.append("  block " + "".join(f"{n:>{width}}" for n in names))
        for i in sorted(blocks):
            lines.append(f"  h.{i:<4}" + "".join(f"{code.get((blocks[i][n]['path'], blocks[i][n]['decided_by']), '?'):>{width}}"
                                                   for n in names))
    if plain:
        lines.append(f"  {len(plain)} biases / LayerNorm parameters ({sum(c['numel'] for c in plain):,} weights): "
                     "materialised (no ghost form)")
    return lines


def main_gpt2_small(args) -> tuple[list[str], dict]:
    """Every variant in a process of its own, ``--repeats`` rounds; returns the verdict inputs and the JSON."""
    import datetime
    import subprocess

    methods = ("full", "lora")
    variants = {**GPT2S_VARIANTS, **(GPT2S_ALTERNATIVES if args.gpt2s_alternatives else {})}
    per_round = [(m, v, GPT2S_MICRO) for m in methods for v in variants]
    results: dict = {}
    for r in range(args.gpt2s_rounds):
        jobs = per_round + ([(m, v, GPT2S_MICRO // 2) for m in methods for v in ("np", "dp")] if r == 0 else [])
        for method, variant, micro in jobs:
            res = _child(method, variant, micro, args.gpt2s_steps if micro == GPT2S_MICRO else 1, args.threads, args.malloc)
            results.setdefault((method, variant, micro), []).append(res)
            print(f"# round {r + 1}: {method} {variant} micro-batch {micro}: cpu s/step "
                  f"{' '.join(f'{c:.2f}' for _, c in res['steps'])}, peak RSS {res['peak_rss_mb']:.0f} MB",
                  file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"shape": {"model": "gpt2-small", "layers": 12, "d_model": 768, "heads": 12, "vocab": 50_257, "tied": True,
                     "seq_len": GPT2S_SEQ, "batch": GPT2S_BATCH, "micro_batch": GPT2S_MICRO, "records": "full windows"},
           "threads": args.threads, "steps": args.gpt2s_steps, "rounds": args.gpt2s_rounds, "allocator": args.malloc,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
           "command": f"OMP_NUM_THREADS={args.threads} python benchmarks/dp_step.py --shape {args.shape} "
                      f"--gpt2s-rounds {args.gpt2s_rounds} --gpt2s-steps {args.gpt2s_steps}"
                      + (" --gpt2s-alternatives" if args.gpt2s_alternatives else ""),
           "memory": "peak_rss_mb: ru_maxrss of the variant's own process (torch's tensors are malloc'd by C++: "
                     "tracemalloc does not see them); per_example_mb = (peak at micro-batch 8 - peak at 4) / 4",
           "goal": GPT2S_GOAL, "methods": {}}
    print(f"gpt2-small: 12 layers x 768, vocabulary 50,257, tied embeddings (opacus ghost, full: untied LM head), random "
          f"init; {GPT2S_BATCH} records filling {GPT2S_SEQ} tokens, micro-batch {GPT2S_MICRO}, q = 1, "
          f"{args.threads} torch thread; every variant in a process of its own, {args.gpt2s_rounds} round(s) of "
          f"{args.gpt2s_steps} timed steps after an untimed first; median s/step over all timed steps; peak memory = the "
          f"process' ru_maxrss (median over rounds)")
    print(f"{'model':11} {'method':6} {'variant':21} {'cpu s':>7} {'wall s':>7} {'peak MB':>8} {'above imports':>13} "
          f"{'cpu/np':>6} {'wall/np':>7} {'mem/np':>6}")
    verdict = []
    for method in methods:
        med = {}
        for variant in variants:
            rs = results[(method, variant, GPT2S_MICRO)]
            med[variant] = {"cpu_s": statistics.median(c for r in rs for _, c in r["steps"]),
                            "wall_s": statistics.median(w for r in rs for w, _ in r["steps"]),
                            "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
                            "above_imports_mb": statistics.median(r["peak_rss_mb"] - r["baseline_rss_mb"] for r in rs),
                            "tied": rs[0]["tied"], "cpu_steps": [c for r in rs for _, c in r["steps"]]}
        np_ = med["np"]
        for variant, m in med.items():
            m["cpu_over_np"] = m["cpu_s"] / np_["cpu_s"]
            m["wall_over_np"] = m["wall_s"] / np_["wall_s"]
            m["mem_over_np"] = m["peak_rss_mb"] / np_["peak_rss_mb"]
            label = variants[variant] + ("" if m["tied"] else " (untied)")
            print(f"{'gpt2-small':11} {method:6} {label[:21]:21} {m['cpu_s']:>7.2f} {m['wall_s']:>7.2f} "
                  f"{m['peak_rss_mb']:>8.0f} {m['above_imports_mb']:>13.0f} {m['cpu_over_np']:>6.2f} "
                  f"{m['wall_over_np']:>7.2f} {m['mem_over_np']:>6.2f}")
        per_example = {v: (results[(method, v, GPT2S_MICRO)][0]["peak_rss_mb"]
                           - results[(method, v, GPT2S_MICRO // 2)][0]["peak_rss_mb"]) / (GPT2S_MICRO // 2)
                       for v in ("np", "dp")}
        choices = results[(method, "dp", GPT2S_MICRO)][0]["choices"]
        for variant in GPT2S_ALTERNATIVES:
            if variant in med:
                forced = results[(method, variant, GPT2S_MICRO)][0]["choices"]
                med[variant]["paths"] = {p: sum(c["path"] == p for c in forced) for p in ("explicit", "ghost")}
        out["methods"][method] = {"variants": med, "per_example_mb": per_example,
                                  "dp_over_np_cpu": med["dp"]["cpu_over_np"],
                                  "dp_over_np_memory": med["dp"]["mem_over_np"], "layer_choices": choices}
        verdict.append((method, med["dp"]["cpu_over_np"]))
        print(f"{'':11} {method:6} per example of the micro-batch (peak at 8 - peak at 4, / 4): non-private "
              f"{per_example['np']:.0f} MB, empriv DP {per_example['dp']:.0f} MB")
    for method in methods:
        choices = out["methods"][method]["layer_choices"]
        counts = {}
        for c in choices:
            counts[(c["path"], c["decided_by"])] = counts.get((c["path"], c["decided_by"]), 0) + 1
        print(f"\nempriv's per-parameter path at this shape ({method}; first micro-batch of {GPT2S_MICRO}, T "
              f"{choices[0]['tokens']}, cap max_explicit_elements = 2^25 per micro-batch): "
              + ", ".join(f"{n} {p} ({d})" for (p, d), n in sorted(counts.items())))
        print("  E:ops materialised, op count (fits the cap); G:cap ghost norm because of the cap (the op count "
              "preferred materialising); G:ops ghost norm, op count")
        for line in _layer_table(choices):
            print(line)
    return verdict, out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("tiny", "gpt2-small", "all"), default="tiny",
                        help="tiny: the default run's GPT-2 (2 x 64); gpt2-small: GPT-2-small's shape, every variant in "
                        "a process of its own, with peak memory (issue 45); all: both, and the issue-45 verdict")
    parser.add_argument("--repeats", type=int, default=7, help="tiny: interleaved runs")
    parser.add_argument("--steps", type=int, default=2, help="tiny: timed steps per run")
    parser.add_argument("--gpt2s-rounds", type=int, default=1, help="gpt2-small: processes per variant")
    parser.add_argument("--gpt2s-steps", type=int, default=5, help="gpt2-small: timed steps per process")
    parser.add_argument("--gpt2s-alternatives", action="store_true", help="gpt2-small: also empriv's DP step with "
                        "ghost norms everywhere and with no memory cap (op count alone)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None, help=f"gpt2-small: write the figures as JSON here (the committed "
                        f"one: {GPT2S_JSON}, which empriv study plan reads)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # method:variant:micro, one process
    parser.add_argument("--smollm", action="store_true", help="also SmolLM2-135M (LoRA; slow on a CPU)")
    parser.add_argument("--malloc", choices=("tuned", "default"), default="tuned",
                        help="glibc's allocator as the stage processes set it (tuned, empriv.infra.allocator) or "
                        "glibc's defaults (every side's large tensors faulted in again each step)")
    args = parser.parse_args(argv)
    import os

    from empriv.infra.allocator import ENV, tune_malloc

    os.environ[ENV] = args.malloc
    allocator = tune_malloc()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(args.threads)
    if args.child:
        import json

        method, variant, micro = args.child.split(":")
        print(json.dumps(run_variant(method, variant, int(micro), args.gpt2s_steps)))
        return 0
    verdicts = []
    if args.shape != "gpt2-small":
        verdicts = run_tiny(args, allocator)
    if args.shape == "tiny":
        return 0
    gpt2s_verdict, figures = main_gpt2_small(args)
    if args.json:
        import json

        tmp = f"{args.json}.tmp"
        with open(tmp, "w") as f:
            json.dump(figures, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.json)
    tiny = {method: loop for method, _, loop, _ in verdicts}
    shapes = [*(f"tiny {m} {r:.2f}x" for m, r in tiny.items()), *(f"gpt2-small {m} {r:.2f}x" for m, r in gpt2s_verdict)]
    worst = max([*tiny.values(), *(r for _, r in gpt2s_verdict)])
    print(f"\ngoal (issue 45: empriv's DP step <= {GPT2S_GOAL:.2f}x the non-private step at "
          f"{'both shapes' if tiny else 'gpt2-small (run --shape all for both)'}, cpu clock): "
          f"{'met' if worst <= GPT2S_GOAL else 'NOT met'} ({', '.join(shapes)})")
    return 0


def run_tiny(args, allocator) -> list:
    """The tiny shape (and --smollm): every variant in this process, interleaved; returns the issue-30 verdicts."""
    cases = [("tiny-gpt2", tiny_gpt2, "full", 64, 32), ("tiny-gpt2", tiny_gpt2, "lora", 64, 32)]
    if args.smollm:
        cases.append(("smollm2-135m", smollm2, "lora", 8, 8))
    print(f"torch threads {args.threads}; records of 33-64 tokens padded to {SEQ_LEN}, q = 1; median s/step over "
          f"{args.repeats} runs of {args.steps} steps (interleaved, after a warm-up run; each run's first step "
          f"untimed); clock cpu = the process' CPU time, wall = elapsed time; allocator: {allocator}")
    verdicts = []
    print(f"{'model':13} {'method':6} {'clock':5} {'batch':>5} {'non-priv':>8} {'np-trim':>7} {'empriv':>7} "
          f"{'fast':>7} {'opacus':>7} {'ghost':>7} {'empriv/np':>9} {'fast/np':>7} {'fast/np-trim':>12} "
          f"{'fast/opacus':>11} {'fast/ghost':>10} {'ghost err':>9}")
    for name, make, method, n, micro in cases:
        vocab = make().get_input_embeddings().weight.shape[0] if name != "tiny-gpt2" else 2048
        ids, mask = batch(n, vocab)
        runs = {"np": lambda: time_empriv(make, method, ids, mask, args.steps, micro, None),
                "np_trim": lambda: time_np_trimmed(make, method, ids, mask, args.steps, micro),
                "dp": lambda: time_empriv(make, method, ids, mask, args.steps, micro, 1.0),
                "fast": lambda: time_fast(make, method, ids, mask, args.steps, micro),
                "opacus": lambda: time_opacus(make, method, ids, mask, args.steps, micro),
                "ghost": lambda: time_opacus_ghost(make, method, ids, mask, args.steps, micro)}
        try:
            runs["ghost"]()
            err = ghost_norm_error(make, method, ids[:micro], mask[:micro])
        except NotImplementedError:  # opacus ghost clipping refuses tied trainable parameters
            del runs["ghost"]
            err = math.nan
        for fn in runs.values():
            fn()
        times = {k: [] for k in runs}
        for _ in range(args.repeats):
            for k, fn in runs.items():
                times[k].append(fn())
        for index, clock in ((1, "cpu"), (0, "wall")):
            m = {k: statistics.median(t[index] for t in v) for k, v in times.items()}
            m.setdefault("ghost", math.nan)
            print(f"{name:13} {method:6} {clock:5} {n:>5} {m['np']:>8.4f} {m['np_trim']:>7.4f} {m['dp']:>7.4f} "
                  f"{m['fast']:>7.4f} {m['opacus']:>7.4f} {m['ghost']:>7.4f} {m['dp'] / m['np']:>9.2f} "
                  f"{m['fast'] / m['np']:>7.2f} {m['fast'] / m['np_trim']:>12.2f} {m['fast'] / m['opacus']:>11.2f} "
                  f"{m['fast'] / m['ghost']:>10.2f} {err:>9.1e}".replace("nan", "n/a"), flush=True)
            if clock == "cpu" and name == "tiny-gpt2":
                verdicts.append((method, GOALS[method], m["dp"] / m["np"], m["fast"] / m["np"]))
    print()
    for method, goal, loop, fast in verdicts:
        ok = max(loop, fast) <= goal
        print(f"goal ({method}: empriv's DP step <= {goal:.2f}x the non-private step, cpu clock): "
              f"{'met' if ok else 'NOT met'} (training loop {loop:.2f}x, fast step alone {fast:.2f}x)")
    print("one run's ratios move by about +-4 % between runs on this machine: judge by the median of several runs")
    return verdicts


if __name__ == "__main__":
    sys.exit(main())
