"""Benchmark: the training step of the default model with empriv's fused kernels against the same step with the
plain ones (issue 41: the DP step at b = 512 is what bounds the default run).

Run:  OMP_NUM_THREADS=1 nice python benchmarks/train_kernels.py [--repeats 9] [--batch 256] [--micro 64]

Peer: the step as it was, PyTorch's ``cross_entropy`` on the logits (``token_nll``) and transformers'
``NewGELUActivation`` (gelu_new as six tensor operations). empriv: :func:`empriv.models.lm.per_sample_mean_nll`
(:class:`empriv.models.kernels.WeightedTokenNLL`) and :func:`empriv.models.kernels.fuse_activations`. Both on the
tiny GPT-2 of the default run (2 × 64, vocabulary 2,048, random init, tied embeddings), the same batch of records of
33–64 tokens, one thread, the stage processes' allocator (:mod:`empriv.infra.allocator`). Two steps each: the fast DP
step (:func:`empriv.models.fast_dp.fast_dp_step`, σ = 1, C = 1, micro-batches of ``--micro``) and the non-private
step (the mean loss's backward over the same micro-batches). Interleaved rounds, each side's CPU time per round;
printed: the median ms per example and the median of the per-round ratios empriv / peer (< 1: faster), and the
largest relative difference of the per-example losses and of the summed gradients between the two (float rounding:
< 1e-5 expected). Goal: ≤ 0.85 for the DP step.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def plain_mean_nll(model, ids, mask):
    """The per-example loss as empriv computed it before the fused kernel."""
    from empriv.models.lm import model_device, position_ids_like

    ids = ids.to(model_device(model))
    logits = model(input_ids=ids, position_ids=position_ids_like(ids), use_cache=False).logits
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1),
                          reduction="none").view(ids.shape[0], -1)
    m = mask[:, 1:].to(nll.device)
    return (nll * m).sum(1) / m.sum(1).clamp(min=1.0)


def models():
    from transformers import GPT2Config, GPT2LMHeadModel

    from empriv.models.conv1d import conv1d_to_linear
    from empriv.models.kernels import fuse_activations

    torch.manual_seed(0)
    plain = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=2048, n_positions=64,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new"))
    conv1d_to_linear(plain)
    fused = copy.deepcopy(plain)
    assert fuse_activations(fused) == 2
    return plain.train(), fused.train()


def batch(n: int):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 2048, (n, 64), generator=g)
    lengths = torch.randint(33, 65, (n,), generator=g)
    mask = (torch.arange(64).unsqueeze(0) < lengths.unsqueeze(1)).float()
    mask[:, 0] = 0
    return ids, mask


def dp_step(model, loss, ids, mask, micro):
    from empriv.models.fast_dp import fast_dp_step

    model.zero_grad(set_to_none=True)
    stats = fast_dp_step(model, ids, mask, clip_norm=1.0, noise_multiplier=1.0, expected_batch_size=ids.shape[0],
                         generator=torch.Generator().manual_seed(0), micro_batch_size=micro, per_sample_loss=loss)
    return stats.losses


def np_step(model, loss, ids, mask, micro):
    model.zero_grad(set_to_none=True)
    losses = []
    for s in range(0, ids.shape[0], micro):
        out = loss(model, ids[s:s + micro], mask[s:s + micro])
        (out.sum() / ids.shape[0]).backward()
        losses.append(out.detach())
    return torch.cat(losses)


def max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--micro", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    from empriv.infra.allocator import tune_malloc
    from empriv.models.lm import per_sample_mean_nll

    malloc = tune_malloc()
    torch.set_num_threads(args.threads)
    plain, fused = models()
    ids, mask = batch(args.batch)
    print(f"tiny GPT-2 (2 x 64, vocabulary 2,048), batch {args.batch}, micro-batches of {args.micro}, "
          f"{args.threads} thread(s), allocator: {malloc}, torch {torch.__version__}")
    rows = []
    for name, step in (("DP (fast step)", dp_step), ("non-private", np_step)):
        lp = step(plain, plain_mean_nll, ids, mask, args.micro)
        gp = [q.grad.clone() for q in plain.parameters()]
        lf = step(fused, per_sample_mean_nll, ids, mask, args.micro)
        gf = [q.grad.clone() for q in fused.parameters()]
        loss_err, grad_err = max_rel(lf, lp), max(max_rel(a, b) for a, b in zip(gf, gp))
        times = {"peer": [], "empriv": []}
        for _ in range(args.repeats):
            for side, model, loss in (("peer", plain, plain_mean_nll), ("empriv", fused, per_sample_mean_nll)):
                t = time.process_time()
                step(model, loss, ids, mask, args.micro)
                times[side].append(time.process_time() - t)
        ratio = statistics.median(e / q for e, q in zip(times["empriv"], times["peer"]))
        per = {k: 1000 * statistics.median(v) / args.batch for k, v in times.items()}
        rows.append((name, per["peer"], per["empriv"], ratio, loss_err, grad_err))
    print(f"{'step':<16}{'peer ms/ex':>12}{'empriv ms/ex':>14}{'empriv/peer':>13}{'loss rel diff':>15}{'grad rel diff':>15}")
    for name, a, b, r, le, ge in rows:
        print(f"{name:<16}{a:>12.3f}{b:>14.3f}{r:>13.3f}{le:>15.1e}{ge:>15.1e}")
    dp = rows[0]
    ok = dp[3] <= 0.85 and dp[4] < 1e-5 and dp[5] < 1e-4
    print(f"verdict: DP step {dp[3]:.2f}x the plain kernels' (goal <= 0.85), same results to float rounding: "
          f"{'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
