"""The training-method registry (empriv.train.methods, names in empriv.config.methods): a toy method defined here and
registered by name alone goes through config validation, prepare, the standard DP loop, the facts it records and
saving — no other file knows it; the shipped methods are registered with their declared traits; an unknown name is
one error listing the known ones."""

from __future__ import annotations

import pytest
import torch

from empriv.config import (BUILTIN, ConfigError, MethodTraits, RunConfig, UnknownMethodError, method_names, method_traits,
                           parse_params)
from empriv.models.lm import encode_fixed
from empriv.train.methods import TrainingMethod, get_method, register, registered_names, unregister

EOS = 299


def _params(method: str):
    return parse_params({
        "runtime": {"device": "cpu", "threads": 1, "wandb_mode": "disabled"},
        "data": {"n_train": 64},
        "base": {"seq_len": 16, "n_positions": 32},
        "canaries": {"prefix_length": 8},
        "privacy": {"delta": 1e-5},
        "train": {"micro_batch_size": 16, "variants": {"toy-sgd": {"method": method}}},
        "cube": {"epsilon": [8], "batch_size": [16], "steps": [3], "learning_rate": [0.01], "seed": [0],
                 "method": [method, "toy-sgd"]},
    })


def _data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return encode_fixed([torch.randint(0, EOS, (4 + i % 10,), generator=g).tolist() for i in range(n)], EOS, 16)


@pytest.fixture
def toy():
    """A method that trains the final layer norm only (``ln_f``), with the standard DP-SGD loop."""

    @register("toy-ln", traits=MethodTraits())
    class LayerNormTuning(TrainingMethod):
        def check(self, params, run, *, canaries=None):
            if run.privacy_unit.user_level:
                raise ConfigError(f"cube.method {params.train.run_method!r}: record-level only")

        def prepare(self, params, base, *, init_seed):
            for name, p in base.named_parameters():
                p.requires_grad_(name.startswith("transformer.ln_f."))
            return base

        def facts(self, params):
            return {**super().facts(params), "toy_settings": {"trains": "ln_f"}}

    yield LayerNormTuning
    unregister("toy-ln")


def test_a_method_registered_alone_validates_prepares_trains_and_records(toy, tmp_path):
    from tiny_models import tiny_gpt2

    from empriv.models.adapters import load_finetuned, save_finetuned
    from empriv.train.finetune import TrainingRecords, TrainRequest, train_model

    assert "toy-ln" in method_names() and "toy-ln" in registered_names()
    params = _params("toy-ln")  # config accepts the name, as a cube.method and as a variant's method
    assert {r.method for r in params.runs()} == {"toy-ln", "toy-sgd"}
    assert params.for_method("toy-sgd").train.method == "toy-ln"
    base = tiny_gpt2(n_positions=32)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    ids, mask = _data()
    run = RunConfig(8, 16, 3, 0.01, 0, method="toy-sgd")
    model, m = train_model(TrainRequest(params.for_method("toy-sgd"), run, base, TrainingRecords(ids, mask)))
    assert (m["method"], m["adaptation"], m["toy_settings"]) == ("toy-sgd", "toy-ln", {"trains": "ln_f"})
    assert m["trainable_parameters"] == 2 * 16 and m["optimizer"] == "adam" and len(m["loss_curve"]) == 3
    assert m["noise_multiplier"] > 0 and m["epsilon_prv"] <= 8 + 1e-6
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"transformer.ln_f.weight", "transformer.ln_f.bias"}
    # its traits say it is saved as a whole model
    save_finetuned(model, "toy-ln", tmp_path / "run")
    reloaded = load_finetuned(tmp_path / "run", tmp_path / "unused")
    torch.testing.assert_close(reloaded.state_dict()["transformer.ln_f.bias"], after["transformer.ln_f.bias"])
    # its own check runs before training
    with pytest.raises(ConfigError, match="record-level only"):
        train_model(TrainRequest(params.for_method("toy-ln"), RunConfig(8, 16, 3, 0.01, 0, "group-k2-random", "toy-ln"),
                                 tiny_gpt2(n_positions=32), TrainingRecords(ids, mask, unit_ids=list(range(64)))))


def test_an_unregistered_method_is_unknown_again(toy):
    unregister("toy-ln")
    with pytest.raises(ConfigError, match=r"train.variants.toy-sgd.method: unknown method \(got .toy-ln.; allowed: full"):
        _params("toy-ln")
    with pytest.raises(UnknownMethodError, match=r"unknown training method 'toy-ln' \(known: dpzero, full"):
        get_method("toy-ln")
    with pytest.raises(UnknownMethodError, match=r"unknown training method 'toy-ln' \(known: full, lora, prefix"):
        method_traits("toy-ln")
    register("toy-ln", traits=MethodTraits())(toy)  # the fixture unregisters it again


def test_the_shipped_methods_are_registered_with_their_declared_traits():
    assert set(registered_names()) >= set(BUILTIN) and method_names()[:len(BUILTIN)] == tuple(BUILTIN)
    for name, traits in BUILTIN.items():
        method = get_method(name)
        assert method.name == name and method.traits is traits and method_traits(name) is traits
    with pytest.raises(ValueError, match="shipped"):
        register("lora", traits=MethodTraits())
    with pytest.raises(ValueError, match="shipped"):
        unregister("full")
    with pytest.raises(ValueError, match="unknown training method 'nope'"):
        register("nope")  # a method not shipped must say what it is


def test_traits_answer_what_name_lists_did():
    from empriv.models.adaptations import METHODS
    from empriv.models.adapters import VIRTUAL_TOKEN_METHODS

    assert VIRTUAL_TOKEN_METHODS == ("prefix", "prompt", "dpzero") and METHODS == ("full", "lora", "prefix", "prompt",
                                                                                    "head")
    p = _params("full").train
    assert [method_traits(m).virtual_tokens(p) for m in ("full", "prefix", "prompt", "dpzero")] == [0, 0, 10, 10]
    public = {"kd": True, "kd_data": "public"}
    params = parse_params({"data": {"n_train": 64}, "base": {"n_positions": 80},
                           "cube": {"epsilon": [8], "batch_size": [16], "steps": [3], "learning_rate": [0.01],
                                    "seed": [0], "method": list(BUILTIN) + ["flat"]},
                           "train": {"dpzero": public, "variants": {"flat": {"method": "prefix", "dpflat": public}}}})
    # which runs read the public split: DP-Flat's and DPZero's public KD only
    assert [m for m in [*BUILTIN, "flat"] if get_method(params.for_method(m).train.method).needs_public_split(
        params.for_method(m))] == ["dpzero", "flat"]
