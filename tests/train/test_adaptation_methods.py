"""Every cube.method through train_model, save_finetuned and load_finetuned (issue 17): full, LoRA, prefix (flat and
with the MLP), prompt, head (LM head, last block), DPZero (with and without KD) and DP-Flat (published and strict
variants) on a tiny GPT-2 — the trainable parameter counts, what stays frozen, the recorded facts and caveats, that a
saved run reloads to the same function, and the one-line errors before training."""

from __future__ import annotations

import math

import pytest
import torch

from empriv.config import ConfigError, RunConfig, parse_params
from empriv.models.adapters import load_finetuned, save_finetuned
from empriv.models.lm import encode_fixed, per_sample_mean_nll
from empriv.train.finetune import PublicSplit, TrainingRecords, TrainRequest, train_model

EOS = 299
VARIANTS = {
    "prefix-mlp": {"method": "prefix", "prefix": {"n_virtual": 4, "reparameterize": True, "hidden": 8}},
    "head-block": {"method": "head", "head": {"target": "last_block"}},
    "dpflat": {"method": "prefix", "dpflat": {"awp": True, "awp_steps": 2, "kd": True, "kd_lambda": 0.01,
                                              "nor_steps": 3, "nor_batch_size": 8}},
    "dpflat-strict": {"method": "prefix", "dpflat": {"awp": True, "awp_variant": "strict", "awp_steps": 2, "kd": True,
                                                     "kd_data": "public", "nor_steps": 3, "nor_batch_size": 8}},
    "dpzero-kd": {"method": "dpzero", "dpzero": {"n_prompt": 4, "kd": True, "kd_lambda": 0.1, "nor_steps": 3}},
}
METHODS = ["full", "lora", "prefix", "prompt", "head", "dpzero", *VARIANTS]


def _params():
    return parse_params({
        "runtime": {"device": "cpu", "threads": 1, "wandb_mode": "disabled"},
        "data": {"n_train": 64},
        "base": {"seq_len": 16, "n_positions": 32},
        "canaries": {"prefix_length": 8},
        "privacy": {"delta": 1e-5},
        "train": {"micro_batch_size": 16, "prefix": {"n_virtual": 4}, "prompt": {"n_virtual": 4},
                  "dpzero": {"n_prompt": 4}, "variants": VARIANTS},
        "cube": {"epsilon": [8, "inf"], "batch_size": [16], "steps": [3], "learning_rate": [0.01], "seed": [0],
                 "method": METHODS},
    })


def _data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = [torch.randint(0, EOS, (4 + i % 10,), generator=g).tolist() for i in range(n)]
    return encode_fixed(tokens, EOS, 16)


def _base():
    from tiny_models import tiny_gpt2

    return tiny_gpt2(n_positions=32)


def _train(method, epsilon=8):
    params = _params().for_method(method)
    ids, mask = _data()
    pub_ids, pub_mask = _data(32, seed=1)
    run = RunConfig(epsilon, 16, 3, 0.01, 0, method=method)
    base = _base()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model, metrics = train_model(TrainRequest(params, run, base, TrainingRecords(ids, mask),
                                              public=PublicSplit(pub_ids, pub_mask)))
    return params, model, metrics, before, base


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


# tiny GPT-2: vocab 300, width 16, 1 layer, 2 heads (so 2·16 = 32 key/value numbers per prefix token and layer)
EXPECTED_TRAINABLE = {
    "prefix": 4 * 1 * 2 * 16,
    "prefix-mlp": 4 * 16 + (16 * 8 + 8) + (8 * 32 + 32),
    "prompt": 4 * 16,
    "head": 300 * 16,
    "dpzero": 4 * 16,
    "dpzero-kd": 4 * 16,
    "dpflat": 4 * 1 * 2 * 16,
    "dpflat-strict": 4 * 1 * 2 * 16,
}


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_records_its_facts_and_reloads_to_the_same_function(method, tmp_path):
    params, model, m, before, base = _train(method)
    t = params.train
    assert m["method"] == method and m["adaptation"] == t.method
    assert m["config"] == f"eps8-b16-T3-lr0.01-s0-{method}"
    assert len(m["loss_curve"]) == 3 and m["noise_multiplier"] > 0 and m["epsilon_prv"] <= 8 + 1e-6
    if method in EXPECTED_TRAINABLE:
        assert m["trainable_parameters"] == EXPECTED_TRAINABLE[method]
    if t.method in ("prefix", "prompt", "dpzero"):  # the base stays exactly as it was
        after = model.base.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)
    ids, _ = _data(8, seed=3)
    save_finetuned(model, t.method, tmp_path / "run", base_directory=None)
    if t.method in ("prefix", "prompt", "dpzero"):
        base_dir = tmp_path / "base"
        _base().save_pretrained(base_dir)
        reloaded = load_finetuned(tmp_path / "run", base_dir)
    elif t.method == "lora":
        base_dir = tmp_path / "base"
        _base().save_pretrained(base_dir)
        reloaded = load_finetuned(tmp_path / "run", base_dir)
    else:
        reloaded = load_finetuned(tmp_path / "run", tmp_path / "unused")
    model.eval()
    torch.testing.assert_close(_logits(reloaded, ids), _logits(model, ids), rtol=1e-5, atol=1e-5)
    # and it has learnt something: the trained function differs from the base's
    assert not torch.allclose(_logits(reloaded, ids), _logits(_base(), ids), atol=1e-6)


def test_head_tuning_trains_the_untied_head_only():
    _, model, m, before, _ = _train("head")
    after = model.state_dict()
    assert not model.config.tie_word_embeddings
    assert torch.equal(after["transformer.wte.weight"], before["transformer.wte.weight"])
    assert not torch.equal(after["lm_head.weight"], before["lm_head.weight"])


def test_dpflat_records_the_published_caveats_and_the_strict_variant_none():
    _, _, published, _, _ = _train("dpflat")
    caveats = [c for c in published["unnoised_outputs"] if c.startswith("DP-Flat")]
    assert len(caveats) == 2 and any("AWP" in c or "perturbation" in c for c in caveats)
    assert published["dpflat_strict"] is False and published["optimizer"] == "adam"
    assert published["dpflat"]["switches"]["awp"] and published["dpflat"]["switches"]["kd"]
    assert len(published["dpflat"]["kd_distances"]) == 3 and len(published["dpflat"]["nor_losses"]) == 3
    _, _, strict, _, _ = _train("dpflat-strict")
    assert strict["dpflat_strict"] is True
    assert not [c for c in strict["unnoised_outputs"] if c.startswith("DP-Flat")]
    # the same Poisson batches as every other run of the configuration: sizes replayed from the sampler stream
    assert len(strict["loss_curve"]) == 3 and strict["mean_batch_size"] > 0


def test_dpzero_kd_records_theta_nor_and_its_caveat_and_plain_dpzero_does_not():
    _, _, kd, _, _ = _train("dpzero-kd")
    assert kd["optimizer"] == "dpzero" and len(kd["dpzero"]["nor_losses"]) == 3
    assert any(c.startswith("DPZero KD") for c in kd["unnoised_outputs"])
    _, _, plain, _, _ = _train("dpzero")
    assert plain["dpzero"]["nor_losses"] == [] and not any(c.startswith("DPZero") for c in plain["unnoised_outputs"])
    # MeZO at ε = ∞: no clipping, no noise
    _, _, mezo, _, _ = _train("dpzero", epsilon=math.inf)
    assert mezo["noise_multiplier"] == 0.0 and mezo["clip_norm"] is None


def test_a_method_the_architecture_cannot_take_is_a_one_line_error_before_training():
    from transformers import OPTConfig, OPTForCausalLM

    params = _params().for_method("prefix")
    base = OPTForCausalLM(OPTConfig(vocab_size=300, hidden_size=16, num_hidden_layers=1, ffn_dim=32,
                                    num_attention_heads=2, max_position_embeddings=32, word_embed_proj_dim=16))
    ids, mask = _data()
    with pytest.raises(ConfigError) as err:
        train_model(TrainRequest(params, RunConfig(8, 16, 3, 0.01, 0, method="prefix"), base,
                                 TrainingRecords(ids, mask)))
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and "cube.method 'prefix'" in lines[0] and "opt" in lines[0]


def test_strict_variants_need_the_public_split():
    params = _params().for_method("dpflat-strict")
    ids, mask = _data()
    with pytest.raises(ConfigError, match="public"):
        train_model(TrainRequest(params, RunConfig(8, 16, 3, 0.01, 0, method="dpflat-strict"), _base(),
                                 TrainingRecords(ids, mask)))


def test_streams_differ_between_methods_and_full_keeps_its_old_key():
    from empriv.randomness import RunStreams

    params = _params()
    run = RunConfig(8, 16, 3, 0.01, 0)
    keys = {m: RunStreams.of(run, method=params.for_method(m).train.run_method).key for m in METHODS}
    assert len(set(keys.values())) == len(METHODS)
    assert keys["full"] == "purpose=train|method=full|epsilon=8.0|batch_size=16|steps=3|learning_rate=0.01"


def test_the_train_stage_checkpoints_under_its_job_and_point_when_asked(tmp_path, monkeypatch):
    from empriv import paths
    from empriv.pipeline.train import checkpointer

    params = parse_params({"data": {"n_train": 64}, "runtime": {"checkpoint_every": 2, "wandb_mode": "disabled"},
                           "cube": {"epsilon": [8], "batch_size": [16], "steps": [3], "learning_rate": [0.01],
                                    "seed": [0], "method": ["lora"]}})
    run = params.runs()[0]
    monkeypatch.setattr(paths, "CHECKPOINTS_DIR", tmp_path / "ck")
    ck = checkpointer(params.for_method("lora"), run, "train")
    assert ck.directory == tmp_path / "ck" / "train" / "record" / "lora" / "eps8-b16-T3-lr0.01-s0" and ck.every == 2
    ids, mask = _data()
    _, m = train_model(TrainRequest(params.for_method("lora"), run, _base(), TrainingRecords(ids, mask), checkpoint=ck))
    assert m["resumed_from_step"] is None and len(m["loss_curve"]) == 3
    ck.clear()
    assert not any(ck.directory.glob("step-*"))
    assert checkpointer(parse_params({"data": {"n_train": 64}, "cube": {"epsilon": [8], "batch_size": [16],
                                      "steps": [3], "learning_rate": [0.01], "seed": [0]}}), run, "train") is None
