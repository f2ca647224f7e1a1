"""empriv.models.adapters: Conv1D ↔ Linear, which parameters train, save/load round trips."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from empriv.config import LoraParams
from empriv.models.adapters import (
    conv1d_to_linear,
    linear_to_conv1d,
    load_finetuned,
    prepare_for_finetuning,
    save_finetuned,
    trainable_parameters,
)

IDS = torch.tensor([[299, 3, 17, 250, 8, 99, 42, 7], [299, 1, 2, 3, 4, 5, 6, 7]])


def _model(seed=0):
    from tiny_models import tiny_gpt2

    return tiny_gpt2(vocab_size=300, n_embd=16, n_head=2, n_layer=2, n_positions=16, seed=seed)


def _logits(model):
    model.eval()
    with torch.no_grad():
        return model(input_ids=IDS).logits


def _count(model, cls):
    return sum(type(m) is cls for m in model.modules())


def test_conv1d_linear_round_trip_same_logits():
    model = _model()
    ref = _logits(model)
    n_conv = _count(model, Conv1D)
    assert n_conv == 2 * 4  # c_attn, attn.c_proj, c_fc, mlp.c_proj per block
    assert conv1d_to_linear(model) == n_conv
    assert _count(model, Conv1D) == 0
    lin = model.transformer.h[0].attn.c_attn
    assert type(lin) is nn.Linear and (lin.in_features, lin.out_features) == (16, 48)
    torch.testing.assert_close(_logits(model), ref, rtol=1e-5, atol=1e-6)
    assert linear_to_conv1d(model) == n_conv
    assert _count(model, Conv1D) == n_conv
    assert type(model.lm_head) is nn.Linear  # the output layer is not a Conv1D and stays
    torch.testing.assert_close(_logits(model), ref, rtol=0, atol=0)


def test_prepare_full_trains_everything():
    model = _model()
    for p in model.parameters():
        p.requires_grad_(False)
    out = prepare_for_finetuning(model, "full")
    assert out is model
    assert _count(out, Conv1D) == 0
    assert trainable_parameters(out) == sum(p.numel() for p in out.parameters())


def test_prepare_lora_trains_only_lora_parameters():
    lora = LoraParams(rank=4, alpha=8.0, target_modules=["c_attn", "c_proj"])
    ref = _logits(_model())
    model = prepare_for_finetuning(_model(), "lora", lora)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    # rank 4 on c_attn (16→48) and both c_proj (16→16, 64→16) in 2 blocks
    expected = 2 * (4 * (16 + 48) + 4 * (16 + 16) + 4 * (64 + 16))
    assert trainable_parameters(model) == expected
    # LoRA starts as the identity (B = 0)
    torch.testing.assert_close(_logits(model), ref, rtol=1e-5, atol=1e-6)


def test_prepare_unknown_method():
    with pytest.raises(ValueError, match="train.method must be one of full, lora, got 'prefix'"):
        prepare_for_finetuning(_model(), "prefix")


def test_save_load_full_round_trip(tmp_path):
    model = prepare_for_finetuning(_model(), "full")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))  # "fine-tuned"
    ref = _logits(model)
    save_finetuned(model, "full", tmp_path / "run")
    assert (tmp_path / "run" / "model.safetensors").exists()
    assert _count(model, Conv1D) == 0  # the training model is left converted
    torch.testing.assert_close(_logits(model), ref, rtol=0, atol=0)
    loaded = load_finetuned(tmp_path / "run", tmp_path / "unused-base")
    assert _count(loaded, Conv1D) == 8  # a standard GPT-2 on disk
    torch.testing.assert_close(_logits(loaded), ref, rtol=1e-5, atol=1e-6)


def test_save_load_lora_round_trip(tmp_path):
    base = _model()
    base.save_pretrained(tmp_path / "base", safe_serialization=True)
    model = prepare_for_finetuning(copy.deepcopy(base), "lora", LoraParams(rank=2, alpha=4.0))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    ref = _logits(model)
    assert not torch.allclose(ref, _logits(base), atol=1e-4)  # the adapter changes the function
    save_finetuned(model, "lora", tmp_path / "run")
    assert (tmp_path / "run" / "adapter_config.json").exists()
    assert json.loads((tmp_path / "run" / "adapter_config.json").read_text())["r"] == 2
    loaded = load_finetuned(tmp_path / "run", tmp_path / "base")
    assert not any("lora_" in n for n, _ in loaded.named_parameters())  # merged
    torch.testing.assert_close(_logits(loaded), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_saved_runs_load_with_the_auto_classes_from_any_working_directory(tmp_path, monkeypatch, method, public_tokenizer_dir):
    """A run directory is a standard artifact: AutoTokenizer + AutoModelForCausalLM / AutoPeftModelForCausalLM."""
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from empriv.models.tokenizer import Tokenizer

    from tiny_models import tiny_gpt2

    tok = Tokenizer.load(public_tokenizer_dir)
    base = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=16, n_head=2, n_layer=2, n_positions=16, seed=0)
    base_dir = tmp_path / "project" / "models" / "base"
    base.save_pretrained(str(base_dir), safe_serialization=True)
    model = prepare_for_finetuning(copy.deepcopy(base), method, LoraParams(rank=2, alpha=4.0), init_seed=3)
    with torch.no_grad():  # move the weights away from the base so the comparison means something
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    want = _logits(model)
    run_dir = tmp_path / "project" / "models" / "runs" / "r"
    save_finetuned(model, method, run_dir, tokenizer_dir=public_tokenizer_dir, base_directory=base_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    hf_tok = AutoTokenizer.from_pretrained(str(run_dir))
    assert len(hf_tok) == tok.vocab_size > 1
    assert hf_tok.eos_token_id == tok.eos_id and hf_tok.pad_token_id is not None
    assert hf_tok("Please review the draft", add_special_tokens=False).input_ids == tok.encode("Please review the draft")
    if method == "full":
        loaded = AutoModelForCausalLM.from_pretrained(str(run_dir))
    else:
        cfg = json.loads((run_dir / "adapter_config.json").read_text())
        assert cfg["base_model_name_or_path"] == str(base_dir.resolve())
        loaded = AutoPeftModelForCausalLM.from_pretrained(str(run_dir))
    torch.testing.assert_close(_logits(loaded), want, rtol=1e-4, atol=1e-5)
