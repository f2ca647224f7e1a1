"""base.name: the named bases, local model directories, hub ids (offline: one clear error), tokenizer.kind."""

from __future__ import annotations

import pytest

from empriv.config import ConfigError, parse_params

CUBE = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0]}


def _params(**sections):
    return parse_params({"cube": CUBE, **sections})


def test_named_bases_and_the_default_tokenizer_kind():
    assert _params().base.name == "tiny-gpt2" and _params().tokenizer.kind == "auto"
    assert _params(base={"name": "smollm2-135m"}).base.name == "smollm2-135m"
    assert _params(base={"name": "openai-community/gpt2"}).base.name == "openai-community/gpt2"


@pytest.mark.parametrize("name, shown", [("gpt-foo", "'gpt-foo'"), ("./no/such/dir", "'./no/such/dir'")])
def test_unknown_base_names_fail_naming_the_value_and_what_is_allowed(name, shown):
    with pytest.raises(ConfigError) as err:
        _params(base={"name": name})
    msg = str(err.value)
    assert "base.name" in msg and shown in msg and "tiny-gpt2" in msg and "smollm2-135m" in msg


@pytest.mark.parametrize("kind", ["bpe", "gpt2"])
def test_a_pretrained_base_brings_its_own_tokenizer(kind):
    with pytest.raises(ConfigError, match=rf"tokenizer.kind '{kind}' cannot be used with base.name 'smollm2-135m'.*tokenizer.kind: auto"):
        _params(base={"name": "smollm2-135m"}, tokenizer={"kind": kind})
    assert _params(tokenizer={"kind": kind}).tokenizer.kind == kind  # fine for the toy base


def test_a_hub_id_that_is_not_cached_fails_offline_with_one_line_naming_it_and_the_fix(monkeypatch):
    from transformers import AutoModelForCausalLM

    from empriv.models.registry import hf_from_pretrained

    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # offline as a user is who sets the variable before starting: huggingface_hub reads it once, at its import (done
    # above, or by an earlier test); without this its hub requests still run, ~23 s of retries where there is no network
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError) as err:
        hf_from_pretrained(AutoModelForCausalLM, "empriv-test/does-not-exist", what="weights")
    msg = str(err.value)
    assert "\n" not in msg
    assert "base.name 'empriv-test/does-not-exist'" in msg and "weights" in msg
    assert "hf download empriv-test/does-not-exist" in msg and "local model directory" in msg


def test_a_local_model_directory_is_a_pretrained_base_with_its_own_tokenizer(tmp_path, public_bpe, make_tiny_gpt2):
    from transformers import AutoModelForCausalLM

    from empriv.models.registry import hf_from_pretrained, is_pretrained
    from empriv.models.tokenizer import load_pretrained_tokenizer

    d = tmp_path / "my-model"
    make_tiny_gpt2(vocab_size=public_bpe.vocab_size, n_embd=16, n_head=2, n_layer=1, n_positions=32).save_pretrained(str(d))
    public_bpe.save(d)
    assert _params(base={"name": str(d)}).base.name == str(d)
    assert is_pretrained(str(d)) and not is_pretrained("tiny-gpt2") and is_pretrained("smollm2-135m")
    tok = load_pretrained_tokenizer(str(d))
    assert tok.kind == "pretrained" and tok.vocab_size == public_bpe.vocab_size and tok.eos_id == public_bpe.eos_id
    text = "Please review the attached draft."
    assert tok.encode(text) == public_bpe.encode(text)
    model = hf_from_pretrained(AutoModelForCausalLM, str(d))
    assert model.get_input_embeddings().weight.shape[0] == public_bpe.vocab_size
