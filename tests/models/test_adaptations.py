"""empriv.models.adaptations: prefix / prompt / head (and full, LoRA) — per-sample gradients and the DP
step against a naive loop, what trains, parameter counts, masking and padding, exact prefix semantics."""

from __future__ import annotations

import functools

import pytest
import torch

from empriv.config import LoraParams
from empriv.models.adaptations import (
    PrefixTunedLM,
    PromptTunedLM,
    adaptation_trainable_parameters,
    dp_step,
    per_sample_gradients,
    prepare_adaptation,
)
from empriv.models.lm import encode_fixed, per_sample_mean_nll

V, D, NL, P = 300, 16, 3, 3  # vocabulary, width, layers, virtual tokens
EOS = V - 1
SEQS = [[5, 17, 250, 8, 99, 42, 7, 3, 11], [1, 2, 3], [10, 11, 12, 13, 14, 15], [200, 201]]
IDS, MASK = encode_fixed(SEQS, EOS, 12)  # right-padded, lengths 10, 4, 7, 3

CASES = {
    "prefix": ("prefix", dict(n_virtual=P)),
    "prefix-reparam": ("prefix", dict(n_virtual=P, reparameterize=True, hidden=8)),
    "prefix-sparse": ("prefix", dict(n_virtual=P, layers=[0, 2])),
    "prompt": ("prompt", dict(n_virtual=P)),
    "head": ("head", {}),
    "head-last-block": ("head", dict(head_target="last_block")),
    "full": ("full", {}),
    "lora": ("lora", dict(lora=LoraParams(rank=2, alpha=4.0))),
}
FROZEN_BASE = ["prefix", "prefix-reparam", "prefix-sparse", "prompt", "head", "head-last-block"]


def gpt2(dtype=torch.float64, attn="sdpa"):
    from tiny_models import tiny_gpt2

    model = tiny_gpt2(vocab_size=V, n_embd=D, n_head=2, n_layer=NL, n_positions=24, seed=0).to(dtype)
    model.set_attn_implementation(attn)
    return model


def llama(dtype=torch.float64):
    """A tiny Llama (SmolLM2's architecture): RoPE, RMSNorm, grouped-query attention, tied head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
                         bos_token_id=EOS, eos_token_id=EOS)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype)
    model.eval()
    return model


def build(case: str, base=None):
    method, kwargs = CASES[case]
    return prepare_adaptation(gpt2() if base is None else base, method, init_seed=0, **kwargs)


def trainable(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def naive_gradients(model, ids, mask) -> dict[str, torch.Tensor]:
    """Each sample alone through the model, its own loss backpropagated."""
    named = trainable(model)
    out = {n: [] for n, _ in named}
    for i in range(ids.shape[0]):
        model.zero_grad(set_to_none=True)
        per_sample_mean_nll(model, ids[i:i + 1], mask[i:i + 1]).sum().backward()
        for n, p in named:
            out[n].append(p.grad.clone() if p.grad is not None else torch.zeros_like(p))
    model.zero_grad(set_to_none=True)
    return {n: torch.stack(g) for n, g in out.items()}


def assert_grads_close(fast, slow):
    assert list(fast) == list(slow)
    for n in slow:
        assert fast[n].shape == slow[n].shape, n
        torch.testing.assert_close(fast[n], slow[n], rtol=1e-7, atol=1e-10, msg=n)
    assert sum(float(g.norm()) for g in slow.values()) > 1e-4  # not a comparison of zeros


# ----------------------------------------------------------------------------- per-sample gradients


@pytest.mark.parametrize("case", list(CASES))
def test_per_sample_gradients_equal_naive_loop(case):
    model = build(case)
    fast = per_sample_gradients(model, IDS, MASK)
    assert_grads_close(fast, naive_gradients(model, IDS, MASK))
    assert all(p.grad is None for _, p in trainable(model))  # .grad left as it was


@pytest.mark.parametrize("case", ["prefix", "prefix-reparam", "prefix-sparse", "prompt", "head", "head-last-block"])
def test_per_sample_gradients_equal_naive_loop_llama(case):
    method, kwargs = CASES[case]
    if case == "prefix-sparse":
        kwargs = dict(kwargs, layers=[1])
    model = prepare_adaptation(llama(), method, init_seed=0, **kwargs)
    assert_grads_close(per_sample_gradients(model, IDS, MASK), naive_gradients(model, IDS, MASK))


def test_per_sample_gradients_accepts_a_grad_sample_module():
    from opacus import GradSampleModule

    model = build("prefix-reparam")
    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum")
    fast = per_sample_gradients(gsm, IDS, MASK)
    gsm._close()
    assert_grads_close(fast, naive_gradients(model, IDS, MASK))


def test_per_sample_gradients_of_an_empty_batch_are_empty():
    model = build("prefix")
    grads = per_sample_gradients(model, IDS[:0], MASK[:0])
    assert [tuple(g.shape) for g in grads.values()] == [(0, P, NL * 2 * D)]


# ----------------------------------------------------------------------------- the DP step


def naive_dp_gradient(model, ids, mask, *, clip_norm, noise_multiplier, seed, expected_batch_size):
    """Clip each naive per-sample gradient (opacus' factor), sum, add N(0, σ²C²) per parameter, divide by b."""
    grads = naive_gradients(model, ids, mask)
    n = ids.shape[0]
    norms = torch.sqrt(sum((g.reshape(n, -1) ** 2).sum(1) for g in grads.values()))
    factors = torch.clamp(clip_norm / (norms + 1e-6), max=1.0)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for (name, p), g in zip(trainable(model), grads.values()):
        total = (factors.view(-1, *[1] * p.dim()) * g).sum(0)
        noise = torch.normal(0.0, noise_multiplier * clip_norm, size=tuple(p.shape), generator=gen, dtype=p.dtype)
        out[name] = (total + noise) / expected_batch_size
    return out, norms, factors


@pytest.mark.parametrize("case", list(CASES))
def test_dp_step_equals_naive_clip_sum_noise(case):
    model = build(case)
    norms = torch.sqrt(sum((g.reshape(4, -1) ** 2).sum(1) for g in naive_gradients(model, IDS, MASK).values()))
    clip = float(norms.median())  # some samples clipped, some not
    expected, ref_norms, ref_factors = naive_dp_gradient(model, IDS, MASK, clip_norm=clip, noise_multiplier=0.7,
                                                         seed=3, expected_batch_size=5.0)
    stats = dp_step(model, IDS, MASK, clip_norm=clip, noise_multiplier=0.7,
                    generator=torch.Generator().manual_seed(3), expected_batch_size=5.0)
    assert (ref_factors < 1).any() and (ref_factors == 1).any()
    torch.testing.assert_close(stats.per_sample_norms, ref_norms, rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(stats.clip_factors, ref_factors, rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(stats.losses, per_sample_mean_nll(model, IDS, MASK).detach(), rtol=1e-9, atol=1e-12)
    for name, p in trainable(model):
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-7, atol=1e-10, msg=name)


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.parametrize("case", ["prefix-reparam", "prompt", "head"])
def test_dp_step_reproduces_the_opacus_dp_optimizer_step(case):
    """The pipeline's path (train/dp.py: GradSampleModule + DPOptimizer) gives the same noisy gradient."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    ref_model = build(case)
    params = [p for _, p in trainable(ref_model)]
    gsm = GradSampleModule(ref_model, batch_first=True, loss_reduction="sum")
    opt = DPOptimizer(torch.optim.SGD(params, lr=0.0), noise_multiplier=0.9, max_grad_norm=0.05,
                      expected_batch_size=6, loss_reduction="mean", generator=torch.Generator().manual_seed(11))
    per_sample_mean_nll(gsm, IDS, MASK).sum().backward()
    opt.pre_step()  # clip, accumulate, noise, scale
    expected = [p.grad.clone() for p in params]
    gsm._close()

    model = build(case)
    dp_step(model, IDS, MASK, clip_norm=0.05, noise_multiplier=0.9, generator=torch.Generator().manual_seed(11),
            expected_batch_size=6)
    for (name, p), e in zip(trainable(model), expected):
        torch.testing.assert_close(p.grad, e, rtol=1e-7, atol=1e-10, msg=name)


def test_dp_step_on_an_empty_batch_is_noise_over_b():
    model = build("prompt")
    dp_step(model, IDS[:0], MASK[:0], clip_norm=2.0, noise_multiplier=1.5, generator=torch.Generator().manual_seed(5),
            expected_batch_size=4)
    gen = torch.Generator().manual_seed(5)
    noise = torch.normal(0.0, 3.0, size=(P, D), generator=gen, dtype=torch.float64)
    torch.testing.assert_close(model.prompt.weight.grad, noise / 4, rtol=0, atol=0)


def test_dp_step_without_noise_is_the_mean_of_clipped_gradients_and_draws_nothing():
    model = build("head")
    mean = naive_gradients(model, IDS, MASK)["lm_head.weight"].mean(0)
    gen = torch.Generator().manual_seed(0)
    before = gen.get_state()
    stats = dp_step(model, IDS, MASK, clip_norm=1e6, noise_multiplier=0.0, generator=gen, expected_batch_size=4)
    assert torch.equal(gen.get_state(), before)
    assert (stats.clip_factors == 1).all()
    torch.testing.assert_close(model.lm_head.weight.grad, mean, rtol=1e-7, atol=1e-10)


# ----------------------------------------------------------------------------- what trains


EXPECTED_NAMES = {
    "prefix": lambda n: n == "prefix.table.weight",
    "prefix-reparam": lambda n: n.startswith("prefix.embedding.") or n.startswith("prefix.mlp."),
    "prefix-sparse": lambda n: n == "prefix.table.weight",
    "prompt": lambda n: n == "prompt.weight",
    "head": lambda n: n == "lm_head.weight",
    "head-last-block": lambda n: n.startswith(f"transformer.h.{NL - 1}.") or n.startswith("transformer.ln_f."),
}


@pytest.mark.parametrize("case", FROZEN_BASE)
def test_a_dp_step_moves_only_the_adaptation(case):
    model = build(case)
    names = [n for n, _ in trainable(model)]
    assert names and all(EXPECTED_NAMES[case](n) for n in names)
    before = {n: t.detach().clone() for n, t in model.state_dict().items()}
    opt = torch.optim.SGD([p for _, p in trainable(model)], lr=0.5)
    dp_step(model, IDS, MASK, clip_norm=1.0, noise_multiplier=1.0, generator=torch.Generator().manual_seed(0),
            expected_batch_size=4)
    opt.step()
    after = model.state_dict()
    for n, t in before.items():
        if n in names:
            assert not torch.equal(after[n], t), f"{n} did not move"
        else:
            assert torch.equal(after[n], t), f"{n} is not part of the adaptation but changed"
    if case == "head":  # untied: the input embeddings stayed while the head moved
        assert model.lm_head.weight is not model.transformer.wte.weight
        assert model.config.tie_word_embeddings is False


def test_untying_the_head_keeps_the_function_at_step_zero():
    ref = gpt2()(input_ids=IDS).logits
    for case in ("head", "head-last-block"):
        torch.testing.assert_close(build(case)(input_ids=IDS).logits, ref, rtol=1e-9, atol=1e-12)


def _full_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_trainable_parameter_counts_match_their_formulas():
    h = 8
    gpt2_block = 12 * D * D + 13 * D  # ln_1, c_attn, attn.c_proj, ln_2, c_fc, mlp.c_proj
    expected = {
        "prefix": P * NL * 2 * D,
        "prefix-reparam": P * D + (D * h + h) + (h * NL * 2 * D + NL * 2 * D),
        "prefix-sparse": P * 2 * 2 * D,
        "prompt": P * D,
        "head": V * D,
        "head-last-block": gpt2_block + 2 * D,
        "full": _full_params(gpt2()),  # wte and lm_head tied: counted once
        "lora": NL * 2 * (D + 3 * D + D + D + 4 * D + D),  # rank 2 on c_attn, attn.c_proj, mlp.c_proj
    }
    for case, count in expected.items():
        assert adaptation_trainable_parameters(build(case)) == count, case
    assert expected["full"] == V * D + 24 * D + NL * gpt2_block + 2 * D
    # Llama: 2 layers, 2 key/value heads of width 4 (4 query heads share them)
    assert adaptation_trainable_parameters(prepare_adaptation(llama(), "prefix", n_virtual=5)) == 5 * 2 * 2 * 2 * 4
    sparse = prepare_adaptation(llama(), "prefix", n_virtual=5, layers=[1])
    assert adaptation_trainable_parameters(sparse) == 5 * 2 * 2 * 4


def test_init_seed_reproduces_the_adaptation_and_leaves_the_global_rng_alone():
    bases = [gpt2() for _ in range(6)]  # building a base seeds the global RNG: do it first
    state = torch.random.get_rng_state()
    a, b = (build("prefix-reparam", base).prefix.mlp[2].weight for base in bases[:2])
    other = prepare_adaptation(bases[2], "prefix", n_virtual=P, reparameterize=True, hidden=8, init_seed=1)
    c = other.prefix.mlp[2].weight
    p0, p1 = (build("prompt", base).prompt.weight for base in bases[3:5])
    p2 = prepare_adaptation(bases[5], "prompt", n_virtual=P, init_seed=1).prompt.weight
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(p0, p1) and not torch.equal(p0, p2)


# ----------------------------------------------------------------------------- masks and padding


@pytest.mark.parametrize("case", list(CASES))
def test_padding_content_does_not_change_real_tokens(case):
    model = build(case)
    noisy = IDS.clone()
    pad = MASK == 0
    pad[:, 0] = False  # the leading EOS is input, not padding
    noisy[pad] = torch.randint(0, V - 1, (int(pad.sum()),), generator=torch.Generator().manual_seed(0))
    assert not torch.equal(noisy, IDS)
    torch.testing.assert_close(per_sample_mean_nll(model, noisy, MASK), per_sample_mean_nll(model, IDS, MASK),
                               rtol=1e-9, atol=1e-12)
    a, b = per_sample_gradients(model, noisy, MASK), per_sample_gradients(model, IDS, MASK)
    for n in a:
        torch.testing.assert_close(a[n], b[n], rtol=1e-7, atol=1e-10, msg=n)
    # the padded sample's loss is its loss alone, without any padding
    short_ids, short_mask = encode_fixed([SEQS[1]], EOS, len(SEQS[1]) + 1)
    torch.testing.assert_close(per_sample_mean_nll(model, short_ids, short_mask)[0],
                               per_sample_mean_nll(model, IDS, MASK)[1], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", ["prefix", "prefix-sparse", "prompt"])
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_left_padding_with_an_attention_mask_is_exact(case, arch):
    """A left-padded row (attention_mask 0 on the pads) gives the logits of the same row unpadded."""
    method, kwargs = CASES[case]
    if arch == "llama" and case == "prefix-sparse":
        kwargs = dict(kwargs, layers=[1])
    model = prepare_adaptation(gpt2() if arch == "gpt2" else llama(), method, init_seed=0, **kwargs)
    row = torch.tensor([EOS, 5, 17, 250, 8, 99])
    padded = torch.stack([torch.cat([torch.tensor([7, 7, 7]), row]), torch.tensor([EOS, 1, 2, 3, 4, 5, 6, 8, 9])])
    attn = torch.ones(2, 9, dtype=torch.long)
    attn[0, :3] = 0
    pos = torch.stack([torch.tensor([0, 0, 0, 0, 1, 2, 3, 4, 5]), torch.arange(9)])
    out = model(input_ids=padded, attention_mask=attn, position_ids=pos).logits
    alone = model(input_ids=row.unsqueeze(0)).logits
    torch.testing.assert_close(out[0, 3:], alone[0], rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(out[1], model(input_ids=padded[1:]).logits[0], rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("arch", ["gpt2-sdpa", "gpt2-eager", "llama"])
def test_an_all_masked_prefix_has_no_effect(arch):
    base = {"gpt2-sdpa": lambda: gpt2(), "gpt2-eager": lambda: gpt2(attn="eager"), "llama": llama}[arch]
    ref = base()(input_ids=IDS).logits
    model = prepare_adaptation(base(), "prefix", n_virtual=P, init_seed=0)
    assert not torch.allclose(model(input_ids=IDS).logits, ref, atol=1e-4)  # the prefix does act
    hidden = model(input_ids=IDS, prefix_attention_mask=torch.zeros(P)).logits
    torch.testing.assert_close(hidden, ref, rtol=1e-9, atol=1e-12)
    partly = torch.ones(IDS.shape[0], P)
    partly[1] = 0  # per-sample masks: only row 1 sees no prefix
    out = model(input_ids=IDS, prefix_attention_mask=partly).logits
    torch.testing.assert_close(out[1], ref[1], rtol=1e-9, atol=1e-12)
    assert not torch.allclose(out[0], ref[0], atol=1e-4)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_prefix_equals_the_cache_of_real_tokens(arch):
    """Prefix k/v = what tokens t leave in the cache ⇒ logits of the base on t ⊕ x (x at positions |t|..)."""
    base = gpt2() if arch == "gpt2" else llama()
    t = torch.tensor([[5, 6, 7]])
    cache = base(input_ids=t, use_cache=True).past_key_values
    model = prepare_adaptation(gpt2() if arch == "gpt2" else llama(), "prefix", n_virtual=3, init_seed=0)
    n_layers = len(model.prefix.layers)
    with torch.no_grad():
        rows = torch.stack([torch.stack([cache.layers[i].keys[0], cache.layers[i].values[0]]) for i in range(n_layers)])
        model.prefix.table.weight.copy_(rows.permute(3, 0, 1, 2, 4).reshape(3, -1))
    b, n = IDS.shape
    expected = base(input_ids=torch.cat([t.expand(b, -1), IDS], 1)).logits[:, 3:]
    got = model(input_ids=IDS, position_ids=torch.arange(3, 3 + n).unsqueeze(0).expand(b, -1)).logits
    torch.testing.assert_close(got, expected, rtol=1e-7, atol=1e-9)


def test_a_soft_prompt_equals_real_tokens_in_front():
    base = gpt2()
    t = torch.tensor([5, 6, 7])
    model = prepare_adaptation(gpt2(), "prompt", n_virtual=3, init_seed=0)
    with torch.no_grad():
        model.prompt.weight.copy_(base.get_input_embeddings().weight[t])
    b = IDS.shape[0]
    expected = base(input_ids=torch.cat([t.expand(b, -1), IDS], 1)).logits[:, 3:]
    torch.testing.assert_close(model(input_ids=IDS).logits, expected, rtol=1e-7, atol=1e-9)


def test_layer_sparse_prefix_leaves_the_layers_below_it_alone():
    ref = gpt2()(input_ids=IDS, output_hidden_states=True).hidden_states
    model = prepare_adaptation(gpt2(), "prefix", n_virtual=P, layers=[1, 2], init_seed=0)
    got = model(input_ids=IDS, output_hidden_states=True).hidden_states
    torch.testing.assert_close(got[1], ref[1], rtol=0, atol=0)  # after block 0: no prefix there
    assert not torch.allclose(got[2], ref[2], atol=1e-4)  # after block 1: prefixed


@pytest.mark.parametrize("case", ["prefix-sparse", "prompt"])
def test_decoding_with_a_cache_matches_the_full_forward(case):
    model = build(case)
    x = IDS[:2, :8]
    full = model(input_ids=x).logits
    first = model(input_ids=x[:, :5], use_cache=True)
    second = model(input_ids=x[:, 5:], past_key_values=first.past_key_values, use_cache=True,
                   position_ids=torch.arange(5, 8).unsqueeze(0).expand(2, -1))
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), full, rtol=1e-7, atol=1e-9)


# ----------------------------------------------------------------------------- learning


def _chains(step: int, low: int, n: int, generator) -> list[list[int]]:
    starts = torch.randint(0, 100, (n,), generator=generator).tolist()
    return [[low + (s + step * i) % 100 for i in range(11)] for s in starts]


@functools.lru_cache(maxsize=1)
def _pretrained_state() -> dict:
    """A tiny base pre-trained (full, non-private) on two counting patterns, so that its output layer is
    not uniform noise: on a random 16-wide base, prompt and prefix tuning have nothing to steer."""
    g = torch.Generator().manual_seed(0)
    ids, mask = encode_fixed(_chains(1, 0, 8, g) + _chains(3, 100, 8, g), EOS, 12)
    base = gpt2(dtype=torch.float32)
    opt = torch.optim.Adam(base.parameters(), lr=2e-2)
    for _ in range(30):
        loss = per_sample_mean_nll(base, ids, mask).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in base.state_dict().items()}


@pytest.mark.parametrize("case", list(CASES))
def test_a_short_non_private_loop_lowers_the_loss(case):
    base = gpt2(dtype=torch.float32)
    base.load_state_dict(_pretrained_state())
    ids, mask = encode_fixed(_chains(1, 0, 8, torch.Generator().manual_seed(1)), EOS, 12)  # new sequences
    model = build(case, base=base)
    opt = torch.optim.Adam([p for _, p in trainable(model)], lr=0.05)
    with torch.no_grad():
        first = float(per_sample_mean_nll(model, ids, mask).mean())
    for _ in range(20):
        loss = per_sample_mean_nll(model, ids, mask).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = float(per_sample_mean_nll(model, ids, mask).mean())
    assert final < first - 0.2, (case, first, final)  # the prompt, the weakest here: 3.86 -> 3.57


# ----------------------------------------------------------------------------- bad input


def _neox():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    return GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                            intermediate_size=32, max_position_embeddings=32))


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="adapter"), "method must be one of full, lora, prefix, prompt, head, got 'adapter'"),
    (dict(method="prefix", n_virtual=0), r"n_virtual: out of range \(got 0; allowed: an integer >= 1\)"),
    (dict(method="prompt", n_virtual=0), r"n_virtual: out of range \(got 0; allowed: an integer >= 1\)"),
    (dict(method="prompt", n_virtual=2.5), r"n_virtual: not an integer \(got 2.5; allowed: an integer >= 1\)"),
    (dict(method="prefix", n_virtual=25), "n_virtual must be <= the model's 24 positions"),
    (dict(method="prefix", layers=[]),
     r"layers must be None \(all layers\) or a non-empty list of indices in \[0, 3\), got \[\]"),
    (dict(method="prefix", layers=[3]),
     r"layers entry \(an index of the base's layers\): out of range \(got 3; allowed: an integer in \[0, 2\]\)"),
    (dict(method="prefix", layers=[-1]), r"layers entry \(an index of the base's layers\): out of range \(got -1;"),
    (dict(method="prefix", layers=[1, 1]), r"layers must not repeat an index, got \[1, 1\]"),
    (dict(method="prefix", reparameterize=True, hidden=0), r"hidden: out of range \(got 0; allowed: an integer >= 1\)"),
    (dict(method="prompt", layers=[0]), "layers applies to method 'prefix' only"),
    (dict(method="head", reparameterize=True), "reparameterize applies to method 'prefix' only"),
    (dict(method="head", head_target="embeddings"), "head_target must be one of lm_head, last_block, got 'embeddings'"),
])
def test_bad_arguments_raise_one_line_errors(kwargs, match):
    method = kwargs.pop("method")
    with pytest.raises(ValueError, match=match) as err:
        prepare_adaptation(gpt2(), method, **kwargs)
    assert "\n" not in str(err.value)


def test_unsupported_architectures_are_named():
    with pytest.raises(ValueError,
                       match="prefix tuning needs a base of architecture gpt2, llama, got model_type 'gpt_neox'"):
        prepare_adaptation(_neox(), "prefix")
    with pytest.raises(ValueError, match="head_target 'last_block' supports model_type gpt2, llama, got 'gpt_neox'"):
        prepare_adaptation(_neox(), "head", head_target="last_block")


def test_other_bad_input_is_refused():
    model = build("prefix")
    with pytest.raises(ValueError, match="the base already carries a prefix"):
        prepare_adaptation(model.base, "prefix")
    with pytest.raises(ValueError, match=r"prefix_attention_mask must be \[3\] or \[4, 3\], got \[2\]"):
        model(input_ids=IDS, prefix_attention_mask=torch.ones(2))
    with pytest.raises(ValueError, match=r"n_virtual \+ sequence length = 20 \+ 12 exceeds the model's 24 positions"):
        per_sample_mean_nll(prepare_adaptation(gpt2(), "prompt", n_virtual=20), IDS, MASK)
    with pytest.raises(ValueError, match=r"clip_norm: out of range \(got 0; allowed: a finite number > 0\)"):
        dp_step(model, IDS, MASK, clip_norm=0, noise_multiplier=1.0, generator=None, expected_batch_size=4)
    with pytest.raises(ValueError, match=r"noise_multiplier: out of range \(got -1; allowed: a finite number >= 0\)"):
        dp_step(model, IDS, MASK, clip_norm=1.0, noise_multiplier=-1, generator=None, expected_batch_size=4)
    with pytest.raises(ValueError, match=r"expected_batch_size: out of range \(got 0; allowed: a finite number > 0\)"):
        dp_step(model, IDS, MASK, clip_norm=1.0, noise_multiplier=1.0, generator=None, expected_batch_size=0)
    with pytest.raises(ValueError, match=r"ids and mask must both be \[B, L\]"):
        per_sample_gradients(model, IDS, MASK[:, :5])
    frozen = gpt2()
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="the model has no trainable parameters"):
        per_sample_gradients(frozen, IDS, MASK)


def test_wrappers_expose_the_base():
    prefix, prompt = build("prefix"), build("prompt")
    assert isinstance(prefix, PrefixTunedLM) and isinstance(prompt, PromptTunedLM)
    assert prefix.config is prefix.base.config and prompt.config.model_type == "gpt2"
    assert prompt.n_virtual == P and prefix.prefix.layers == (0, 1, 2)
    for model in (prefix, prompt):  # the shared FrozenBaseLM: the base's embeddings, its parameters first
        assert model.get_input_embeddings() is model.base.get_input_embeddings()
        names = [n for n, _ in model.named_parameters()]
        assert names[0].startswith("base.") and not names[-1].startswith("base.")
