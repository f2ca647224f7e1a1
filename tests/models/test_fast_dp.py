"""empriv.models.fast_dp: the fast DP step (ghost norms / materialised per-example gradients, book-keeping
clipped sum, padding trim) against a naive loop that runs every example alone, and against opacus' DPOptimizer."""

from __future__ import annotations

import pytest
import torch

from empriv.config import LoraParams
from empriv.models.adapters import prepare_for_finetuning
from empriv.models.fast_dp import fast_dp_step, record_lengths, trim_padding
from empriv.models.lm import encode_fixed, per_sample_mean_nll

V, D = 300, 16
EOS = V - 1
# right-padded records of lengths 10, 4, 7, 3, 12, 6 (with the leading EOS) in a 16-column batch; repeated tokens
# (5, 17 in the first) make an embedding row receive several positions' gradients within one example
SEQS = [[5, 17, 250, 8, 5, 42, 17, 3, 11], [1, 2, 3], [10, 11, 12, 13, 14, 15], [200, 201],
        [7, 7, 7, 9, 9, 100, 101, 102, 103, 104, 105], [40, 41, 42, 43, 44]]
IDS, MASK = encode_fixed(SEQS, EOS, 16)


def gpt2(dtype=torch.float64):
    from tiny_models import tiny_gpt2

    return tiny_gpt2(vocab_size=V, n_embd=D, n_head=2, n_layer=2, n_positions=16, seed=0).to(dtype)


def llama(dtype=torch.float64):
    """A tiny Llama (SmolLM2's architecture): RoPE, RMSNorm, grouped-query attention, tied head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
                         bos_token_id=EOS, eos_token_id=EOS)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(dtype)


def build(case: str, dtype=torch.float64):
    arch, method = case.split("-")
    model = gpt2(dtype) if arch == "gpt2" else llama(dtype)
    model = prepare_for_finetuning(model, method, LoraParams(rank=2, alpha=4.0), init_seed=0)
    if method == "lora":  # LoRA's B starts at zero (so A's gradient is zero): move it so both are exercised
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model.train()


def trainable(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def naive_per_sample(model, ids, mask) -> dict[str, torch.Tensor]:
    """Each example alone through the model (its full padded row), its own loss backpropagated."""
    named = trainable(model)
    out = {n: [] for n, _ in named}
    for i in range(ids.shape[0]):
        model.zero_grad(set_to_none=True)
        per_sample_mean_nll(model, ids[i:i + 1], mask[i:i + 1]).sum().backward()
        for n, p in named:
            out[n].append(p.grad.clone() if p.grad is not None else torch.zeros_like(p))
    model.zero_grad(set_to_none=True)
    return {n: torch.stack(g) for n, g in out.items()}


def naive_step(model, ids, mask, clip_norm):
    """(per-example norms, clip factors, clipped sum per parameter) from the naive loop."""
    grads = naive_per_sample(model, ids, mask)
    norms = torch.stack([g.reshape(len(g), -1).norm(dim=1) for g in grads.values()], dim=1).norm(dim=1)
    factors = (clip_norm / (norms + 1e-6)).clamp(max=1.0)
    return norms, factors, {n: torch.einsum("i,i...->...", factors, g) for n, g in grads.items()}


CASES = ["gpt2-full", "gpt2-lora", "llama-full", "llama-lora"]


@pytest.mark.parametrize("mode", ["auto", "ghost", "explicit"])
@pytest.mark.parametrize("case", CASES)
def test_step_equals_naive_loop(case, mode):
    model = build(case)
    norms, _, _ = naive_step(model, IDS, MASK, 1.0)
    clip = float(norms.median())  # some examples clipped (factor < 1), the others not (factor = 1)
    norms, factors, clipped = naive_step(model, IDS, MASK, clip)
    assert (factors < 1).sum() >= 2 and (factors == 1).sum() >= 2
    b = 4.5
    stats = fast_dp_step(model, IDS, MASK, clip_norm=clip, noise_multiplier=0.0, expected_batch_size=b,
                         generator=None, micro_batch_size=4, mode=mode)
    torch.testing.assert_close(stats.per_sample_norms, norms, rtol=1e-9, atol=0)
    torch.testing.assert_close(stats.clip_factors, factors, rtol=1e-9, atol=0)
    expected_losses = per_sample_mean_nll(model, IDS, MASK).detach()
    torch.testing.assert_close(stats.losses, expected_losses, rtol=1e-6, atol=0)  # the NLL is float32
    for n, p in trainable(model):
        torch.testing.assert_close(p.grad * b, clipped[n], rtol=1e-8, atol=1e-12, msg=n)
    assert sum(float(g.norm()) for g in clipped.values()) > 1e-3
    if mode == "ghost":
        assert stats.ghost and all(n.endswith("bias") or "ln_" in n or "norm" in n for n in stats.explicit)
    if mode == "explicit":
        assert stats.ghost == ()


@pytest.mark.parametrize("mode", ["ghost", "explicit"])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_tied_embedding_norm_includes_both_uses(arch, mode):
    """The tied table's per-example gradient is head + embedding: its norm is not either use's norm nor their sum."""
    model = build(f"{arch}-full")
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    assert head.weight is emb.weight
    name = next(n for n, p in trainable(model) if p is emb.weight)
    grads = naive_per_sample(model, IDS, MASK)[name]
    stats = fast_dp_step(model, IDS, MASK, clip_norm=1e9, noise_multiplier=0.0, expected_batch_size=1.0,
                         generator=None, mode=mode)
    assert name in (stats.ghost if mode == "ghost" else stats.explicit)
    torch.testing.assert_close(emb.weight.grad, grads.sum(0), rtol=1e-9, atol=1e-12)
    # the table's per-example norms, from the fast step with only the table trainable
    for n, p in trainable(model):
        p.requires_grad_(p is emb.weight)
    only = fast_dp_step(model, IDS, MASK, clip_norm=1e9, noise_multiplier=0.0, expected_batch_size=1.0,
                        generator=None, mode=mode)
    naive_norms = grads.reshape(len(grads), -1).norm(dim=1)
    torch.testing.assert_close(only.per_sample_norms, naive_norms, rtol=1e-9, atol=0)
    # the head's use alone (untied copy) gives different norms: the cross term matters
    untied = build(f"{arch}-full")
    untied.get_output_embeddings().weight = torch.nn.Parameter(untied.get_input_embeddings().weight.detach().clone())
    for n, p in trainable(untied):
        p.requires_grad_(p is untied.get_output_embeddings().weight)
    head_only = fast_dp_step(untied, IDS, MASK, clip_norm=1e9, noise_multiplier=0.0, expected_batch_size=1.0,
                             generator=None, mode=mode)
    assert (head_only.per_sample_norms - naive_norms).abs().max() > 1e-3 * naive_norms.max()


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-10), (torch.float32, 1e-6)])
@pytest.mark.parametrize("case", ["gpt2-full", "gpt2-lora", "llama-full"])
def test_noised_step_equals_opacus_dp_optimizer(case, dtype, rtol):
    """Same generator state: p.grad equals empriv.train.dp's opacus path (micro-batches of 2, σ = 1.3)."""
    import warnings

    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    clip, sigma, b = 0.5, 1.3, 5.0
    reference = build(case, dtype)
    fast = build(case, dtype)
    params = [p for p in reference.parameters() if p.requires_grad]
    warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
    gsm = GradSampleModule(reference, batch_first=True, loss_reduction="sum")
    optimizer = DPOptimizer(torch.optim.SGD(params, lr=0.0), noise_multiplier=sigma, max_grad_norm=clip,
                            expected_batch_size=b, loss_reduction="mean", generator=torch.Generator().manual_seed(7))
    chunks = [torch.arange(k, min(k + 2, len(IDS))) for k in range(0, len(IDS), 2)]
    for k, chunk in enumerate(chunks):
        per_sample_mean_nll(gsm, IDS[chunk], MASK[chunk]).sum().backward()
        if k < len(chunks) - 1:
            optimizer.signal_skip_step(do_skip=True)
        optimizer.step()
        if k < len(chunks) - 1:
            optimizer.zero_grad(set_to_none=True)
    expected = [p.grad.clone() for p in params]
    gsm._close()
    gen = torch.Generator().manual_seed(7)
    stats = fast_dp_step(fast, IDS, MASK, clip_norm=clip, noise_multiplier=sigma, expected_batch_size=b,
                         generator=gen, micro_batch_size=2)
    assert (stats.clip_factors < 1).any()
    got = [p.grad for p in fast.parameters() if p.requires_grad]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=rtol, atol=rtol * float(e.abs().max()))
    # the generators advanced alike: the next draws agree
    assert torch.equal(torch.randn(3, generator=gen), torch.randn(3, generator=optimizer.generator))


def test_empty_batch_is_noise_only():
    model = build("gpt2-lora")
    gen = torch.Generator().manual_seed(3)
    stats = fast_dp_step(model, IDS[:0], MASK[:0], clip_norm=2.0, noise_multiplier=0.5, expected_batch_size=8,
                         generator=gen)
    assert stats.losses.shape == stats.per_sample_norms.shape == (0,)
    check = torch.Generator().manual_seed(3)
    for _, p in trainable(model):
        noise = torch.normal(mean=0, std=1.0, size=p.shape, generator=check, dtype=p.dtype)
        torch.testing.assert_close(p.grad, noise / 8, rtol=0, atol=0)
    zero = fast_dp_step(model, IDS[:0], MASK[:0], clip_norm=2.0, noise_multiplier=0.0, expected_batch_size=8,
                        generator=gen)
    assert zero.losses.numel() == 0 and all(float(p.grad.abs().max()) == 0 for _, p in trainable(model))


def test_trim_padding_keeps_losses_and_gradients():
    ids, mask = IDS[[1, 3, 5]], MASK[[1, 3, 5]]  # lengths 4, 3, 6 in 16 columns
    t_ids, t_mask = trim_padding(ids, mask)
    assert t_ids.shape == (3, 6) and torch.equal(t_ids, ids[:, :6]) and torch.equal(t_mask, mask[:, :6])
    assert record_lengths(mask).tolist() == [4, 3, 6]
    model = build("gpt2-full")
    full = per_sample_mean_nll(model, ids, mask)
    cut = per_sample_mean_nll(model, t_ids, t_mask)
    torch.testing.assert_close(cut, full, rtol=1e-6, atol=0)  # the NLL is float32
    g_full = torch.autograd.grad(full.sum(), [p for _, p in trainable(model)])
    g_cut = torch.autograd.grad(cut.sum(), [p for _, p in trainable(model)])
    for a, c in zip(g_full, g_cut):
        torch.testing.assert_close(c, a, rtol=1e-10, atol=1e-14)
    # the step with and without trimming / sorting / micro-batching agrees
    results = []
    for kwargs in [dict(trim=False, sort_by_length=False), dict(), dict(micro_batch_size=1), dict(micro_batch_size=4)]:
        stats = fast_dp_step(model, IDS, MASK, clip_norm=0.3, noise_multiplier=0.0, expected_batch_size=6,
                             generator=None, **kwargs)
        results.append((stats, [p.grad.clone() for _, p in trainable(model)]))
    (s0, g0), rest = results[0], results[1:]
    for s, g in rest:
        torch.testing.assert_close(s.per_sample_norms, s0.per_sample_norms, rtol=1e-10, atol=0)
        torch.testing.assert_close(s.losses, s0.losses, rtol=1e-6, atol=0)
        for a, c in zip(g0, g):
            torch.testing.assert_close(c, a, rtol=1e-9, atol=1e-14)
    # a record without loss tokens keeps two columns
    assert trim_padding(IDS[:2], torch.zeros_like(MASK[:2]))[0].shape == (2, 2)


def test_model_is_restored_and_plain_grads_untouched():
    model = build("gpt2-full")
    before = per_sample_mean_nll(model, IDS, MASK).detach()
    fast_dp_step(model, IDS, MASK, clip_norm=1.0, noise_multiplier=0.0, expected_batch_size=6, generator=None)
    assert not any("forward" in m.__dict__ for m in model.modules())
    torch.testing.assert_close(per_sample_mean_nll(model, IDS, MASK).detach(), before, rtol=0, atol=0)


def test_errors_are_one_line_value_errors():
    model = build("gpt2-full")
    kw = dict(noise_multiplier=1.0, expected_batch_size=4, generator=None)
    with pytest.raises(ValueError, match=r"clip_norm: out of range \(got 0; allowed: a finite number > 0\)"):
        fast_dp_step(model, IDS, MASK, clip_norm=0, **kw)
    with pytest.raises(ValueError, match=r"noise_multiplier: out of range \(got -1; allowed: a finite number >= 0\)"):
        fast_dp_step(model, IDS, MASK, clip_norm=1.0, noise_multiplier=-1, expected_batch_size=4, generator=None)
    for key, bad in (("clip_norm", float("inf")), ("noise_multiplier", float("inf")), ("expected_batch_size", float("nan"))):
        args = {"clip_norm": 1.0, **kw, key: bad}  # infinite noise or clipping is no DP step: never a NaN model
        with pytest.raises(ValueError, match=rf"{key}: not a finite number \(got {bad}; allowed: a finite number"):
            fast_dp_step(model, IDS, MASK, **args)
    with pytest.raises(ValueError, match="mode must be one of auto, ghost, explicit, got 'fast'"):
        fast_dp_step(model, IDS, MASK, clip_norm=1.0, mode="fast", **kw)
    with pytest.raises(ValueError, match=r"micro_batch_size \(None: the whole batch at once\): "
                                         r"out of range \(got 0; allowed: an integer >= 1\)"):
        fast_dp_step(model, IDS, MASK, clip_norm=1.0, micro_batch_size=0, **kw)
    with pytest.raises(ValueError, match=r"ids and mask must both be \[B, L\]"):
        fast_dp_step(model, IDS, MASK[:, :5], clip_norm=1.0, **kw)
    def shared_positions(m, ids, mask):  # GPT-2 then embeds positions as one [1, L] tensor for the whole batch
        logits = m(input_ids=ids, use_cache=False).logits
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
        return (nll * mask[:, 1:]).sum(1) / mask[:, 1:].sum(1)

    with pytest.raises(ValueError, match=r"'transformer.wpe.weight' saw inputs whose first dimension is \[1\]"):
        fast_dp_step(model, IDS, MASK, clip_norm=1.0, per_sample_loss=shared_positions, **kw)
    raw = gpt2()  # GPT-2's Conv1D not converted to nn.Linear
    with pytest.raises(ValueError, match="module 'transformer.h.0.attn.c_attn' of type Conv1D owns trainable"):
        fast_dp_step(raw, IDS, MASK, clip_norm=1.0, **kw)
    assert not any("forward" in m.__dict__ for m in raw.modules())  # restored after the failure


@pytest.mark.parametrize("case", ["gpt2-full", "llama-lora"])
def test_bf16_forward_keeps_float32_clipping(case):
    """Under bf16 autocast (runtime.precision bf16) the step runs, sums and noises in float32, close to fp32."""
    model = build(case, torch.float32)
    ref = fast_dp_step(model, IDS, MASK, clip_norm=1.0, noise_multiplier=0.0, expected_batch_size=6, generator=None)
    ref_grads = [p.grad.clone() for _, p in trainable(model)]
    bf16 = fast_dp_step(model, IDS, MASK, clip_norm=1.0, noise_multiplier=0.0, expected_batch_size=6, generator=None,
                        forward_context=lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    assert all(p.grad.dtype == torch.float32 for _, p in trainable(model))
    torch.testing.assert_close(bf16.per_sample_norms, ref.per_sample_norms, rtol=0.05, atol=0)
    for (n, p), r in zip(trainable(model), ref_grads):
        assert float((p.grad - r).norm()) <= 0.1 * float(r.norm()) + 1e-6, n


@pytest.mark.parametrize("case", ["gpt2-full", "gpt2-lora"])
def test_gradients_carry_no_autograd_graph(case):
    """The clipping arithmetic runs without autograd: the recorded activations require grad, and a graph built from
    them would hang off every p.grad (keeping the micro-batches' activations alive until the grads are dropped)."""
    model = build(case, torch.float32)
    fast_dp_step(model, IDS, MASK, clip_norm=1.0, noise_multiplier=1.0, expected_batch_size=6.0,
                 generator=torch.Generator().manual_seed(0), micro_batch_size=4)
    for n, p in trainable(model):
        assert p.grad is not None and p.grad.grad_fn is None and not p.grad.requires_grad, n
