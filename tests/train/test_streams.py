"""Independent and reproducible random streams (empriv.randomness) as training uses them."""

from __future__ import annotations

import math

import pytest
import torch

from empriv.config import LoraParams, RunConfig
from empriv.models.adapters import prepare_for_finetuning
from empriv.randomness import STREAMS, RunStreams, configuration_key, stream_seed
from empriv.train.dp import dp_finetune
from train.test_dp import CPU, deltas, first_batch, make_data, make_model, make_params, state


def test_stream_seeds_are_deterministic_distinct_and_name_the_configuration_by_value():
    a = RunStreams.of(RunConfig(2, 64, 16, 0.005, 0), method="full")
    assert a.record() == RunStreams.of(RunConfig(2.0, 64, 16, 0.005, 0), method="full").record()  # 2 == 2.0
    assert len({a.seed_of(s) for s in STREAMS}) == len(STREAMS)
    others = [RunConfig(64, 64, 16, 0.005, 0), RunConfig(2, 128, 16, 0.005, 0), RunConfig(2, 64, 32, 0.005, 0),
              RunConfig(2, 64, 16, 0.01, 0), RunConfig(2, 64, 16, 0.005, 1)]
    for run in others:
        assert RunStreams.of(run, method="full").seed_of("noise") != a.seed_of("noise")
    assert RunStreams.of(RunConfig(2, 64, 16, 0.005, 0), method="lora").seed_of("noise") != a.seed_of("noise")
    assert RunStreams.of(RunConfig(2, 64, 16, 0.005, 0), method="full", purpose="audit").seed_of("noise") != a.seed_of("noise")
    assert "inf" in configuration_key(RunConfig(math.inf, 64, 16, 0.005, 0), method="full")
    assert 0 <= stream_seed("k", 0, "generation:3") < 2**63
    with pytest.raises(ValueError, match="unknown random stream 'nosie'"):
        stream_seed("k", 0, "nosie")


def _seed_with_empty_first_batches(n, runs):
    for seed in range(400):
        if all(first_batch(n, RunConfig(r.epsilon, r.batch_size, r.steps, r.learning_rate, seed)).numel() == 0 for r in runs):
            return seed
    raise AssertionError("no seed with an empty first batch for every run")


def test_noise_of_two_configurations_with_the_same_seed_is_uncorrelated():
    # With an empty Poisson batch the update is pure noise: −lr·σC·z/b. Same seed, ε = 2 vs ε = 8
    # (same b, T, η; the caller's σ): the two z must be independent, not one draw scaled twice.
    n, b = 400, 1
    ids, mask = make_data(n)
    templates = [RunConfig(2.0, b, 1, 0.1, 0), RunConfig(8.0, b, 1, 0.1, 0)]
    seed = _seed_with_empty_first_batches(n, templates)
    zs = []
    for template, sigma in zip(templates, (3.0, 1.5)):
        run = RunConfig(template.epsilon, b, 1, 0.1, seed)
        model = make_model()
        before = state(model)
        res = dp_finetune(model, ids, mask, run=run, noise_multiplier=sigma, params=make_params(clip_norm=0.2), device=CPU)
        assert res.batch_sizes == [0]
        d = torch.cat([v.flatten() for k, v in deltas(state(model), before).items() if k != "lm_head.weight"]).double()
        zs.append(d / (run.learning_rate * sigma * 0.2 / b))
    assert zs[0].numel() > 5000
    corr = float(torch.corrcoef(torch.stack(zs))[0, 1])
    assert abs(corr) < 0.05  # ~8k coordinates: independent draws give |ρ| ≈ 0.01; a shared draw gives ρ = −1 or 1
    for z in zs:
        assert float(z.std()) == pytest.approx(1.0, abs=0.05)


def test_a_b64_batch_is_not_a_subset_of_the_b128_batch():
    n = 1000
    ids, mask = make_data(n)
    batches = {}
    for b in (64, 128):
        res = dp_finetune(make_model(), ids, mask, run=RunConfig(math.inf, b, 2, 0.1, 0), noise_multiplier=None,
                          params=make_params(), device=CPU)
        batches[b] = [set(x) for x in res.batches]
    for step in range(2):
        small, large = batches[64][step], batches[128][step]
        assert not small <= large
        # Independent Poisson draws share about b₁·b₂/n = 8 records; one shared uniform per record would nest them.
        assert len(small & large) < 0.5 * len(small)


def _lora_run(run: RunConfig, sigma: float = 1.0):
    ids, mask = make_data(300)
    streams = RunStreams.of(run, method="lora")
    model = prepare_for_finetuning(make_model(convert=False), "lora", LoraParams(rank=2, alpha=4.0, target_modules=None),
                                   init_seed=streams.seed_of("init"))
    init = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
    dp_finetune(model, ids, mask, run=run, noise_multiplier=sigma, params=make_params(method="lora", clip_norm=1.0),
                device=CPU, streams=streams)
    return init, {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}


def test_a_lora_run_repeated_gives_identical_weights_and_other_configurations_differ():
    run = RunConfig(8.0, 32, 3, 0.05, 0)
    init_a, final_a = _lora_run(run)
    init_b, final_b = _lora_run(run)
    assert final_a.keys() == final_b.keys() and any("lora_A" in k for k in final_a)
    for k in final_a:
        assert torch.equal(init_a[k], init_b[k]), k
        assert torch.equal(final_a[k], final_b[k]), k
    init_c, _ = _lora_run(RunConfig(8.0, 32, 3, 0.05, 1))  # another seed: another initialisation
    a_keys = [k for k in init_a if "lora_A" in k]
    assert all(not torch.equal(init_a[k], init_c[k]) for k in a_keys)


def test_lora_target_modules_default_per_architecture():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

    from empriv.models.adapters import lora_target_modules

    assert lora_target_modules(make_model(convert=False), None) == ["c_attn", "c_proj"]
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    assert lora_target_modules(llama, None) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    neox = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                            num_attention_heads=2))
    assert lora_target_modules(neox, None) == ["query_key_value", "dense"]
    assert lora_target_modules(llama, ["q_proj"]) == ["q_proj"]
    wrapped = prepare_for_finetuning(llama, "lora", LoraParams(rank=2, target_modules=None), init_seed=0)
    adapted = {n.split(".lora_A")[0].split(".")[-1] for n, _ in wrapped.named_parameters() if "lora_A" in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj"}
