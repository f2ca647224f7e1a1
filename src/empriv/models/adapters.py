"""Fine-tuning methods: which parameters train, and how they are saved.

- ``full``: every parameter of the base trains.
- ``lora``: low-rank adapters (peft) on ``train.lora.target_modules`` — by default the attention
  (and for GPT-2 also the MLP output) projections of the base's architecture
  (:data:`LORA_TARGET_MODULES`); only they train. Their random initialisation draws from the run's
  own ``init`` stream (:mod:`empriv.randomness`), so a LoRA run repeated gives identical weights.

A saved run is a standard Hugging Face directory: the full model (``config.json`` +
``model.safetensors``) or the adapter (``adapter_config.json`` + ``adapter_model.safetensors``,
whose ``base_model_name_or_path`` is the base's absolute path), plus the tokenizer files, so
``AutoTokenizer`` and ``AutoModelForCausalLM`` / ``AutoPeftModelForCausalLM`` load it from any
working directory.

GPT-2's ``Conv1D`` layers are converted to ``nn.Linear`` (same function, transposed weight) before
training, so opacus uses its fast per-sample-gradient hooks instead of a generic fallback; they
are converted back before a full model is saved, so saved weights load as a normal GPT-2.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

METHODS = ("full", "lora")

# LoRA's default target modules per architecture (``config.model_type``): the attention projections
# (the research's LoRA adapts attention; GPT-2's ``c_proj`` names both the attention and the MLP output).
LORA_TARGET_MODULES = {
    "gpt2": ["c_attn", "c_proj"],
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mistral": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "qwen2": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "gemma": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "gpt_neox": ["query_key_value", "dense"],
    "opt": ["q_proj", "k_proj", "v_proj", "out_proj"],
}


def lora_target_modules(model: nn.Module, configured: list[str] | None) -> list[str]:
    """``train.lora.target_modules`` when set, else the default for the base's architecture."""
    if configured:
        return list(configured)
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type in LORA_TARGET_MODULES:
        return list(LORA_TARGET_MODULES[model_type])
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS

    if model_type in PEFT_DEFAULTS:
        return list(PEFT_DEFAULTS[model_type])
    raise ValueError(f"train.lora.target_modules is null and there is no default for architecture {model_type!r}: "
                     f"set it to the names of the linear layers to adapt (known defaults: {', '.join(sorted(LORA_TARGET_MODULES))})")


def _swap(model: nn.Module, predicate, make) -> int:
    count = 0
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if predicate(child):
                setattr(module, child_name, make(child))
                count += 1
    return count


def conv1d_to_linear(model: nn.Module) -> int:
    """Replace every HF ``Conv1D`` (y = x W + b, W: [in, out]) by an equivalent ``nn.Linear``."""
    from transformers.pytorch_utils import Conv1D

    def make(c: nn.Module) -> nn.Linear:
        n_in, n_out = c.weight.shape
        lin = nn.Linear(n_in, n_out, bias=True, device=c.weight.device, dtype=c.weight.dtype)
        with torch.no_grad():
            lin.weight.copy_(c.weight.t())
            lin.bias.copy_(c.bias)
        return lin

    return _swap(model, lambda m: isinstance(m, Conv1D), make)


def linear_to_conv1d(model: nn.Module, names: tuple[str, ...] = ("c_attn", "c_proj", "c_fc")) -> int:
    """Inverse of :func:`conv1d_to_linear` for GPT-2 blocks (only the Linear layers named in ``names``)."""
    from transformers.pytorch_utils import Conv1D

    def make(lin: nn.Linear) -> nn.Module:
        c = Conv1D(lin.out_features, lin.in_features)
        with torch.no_grad():
            c.weight.copy_(lin.weight.t())
            c.bias.copy_(lin.bias)
        return c.to(lin.weight.device)

    swapped = 0
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if child_name in names and type(child) is nn.Linear:
                setattr(module, child_name, make(child))
                swapped += 1
    return swapped


def prepare_for_finetuning(model: nn.Module, method: str, lora=None, *, init_seed: int | None = None) -> nn.Module:
    """Convert Conv1D layers and set up ``method``; returns the model to train.

    ``init_seed`` seeds the adapter's random initialisation (LoRA's A matrices) without touching
    torch's global random state; None draws from the global state (unseeded unless the caller seeded it).
    """
    if method not in METHODS:
        raise ValueError(f"train.method must be one of {', '.join(METHODS)}, got {method!r}")
    conv1d_to_linear(model)
    if method == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora_target_modules(model, lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    if init_seed is None:
        return get_peft_model(model, config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        return get_peft_model(model, config)


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _is_gpt2(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    return getattr(config, "model_type", None) == "gpt2"


ADAPTER_SPEC = "empriv_adapter.json"
ADAPTER_WEIGHTS = "empriv_adapter.safetensors"
VIRTUAL_TOKEN_METHODS = ("prefix", "prompt", "dpzero")  # saved as empriv adapters (peft cannot hold a layer-sparse prefix)


def _save_virtual_tokens(model: nn.Module, directory: Path, base_directory, include_base: bool) -> None:
    """A prefix- or prompt-tuned model: the trainable module's tensors (safetensors) and what rebuilds it
    (``empriv_adapter.json``: method, P, layers, MLP), plus the base model itself when ``include_base`` (an audit
    model whose base gained new-token rows) — else the base's absolute path."""
    import json

    from safetensors.torch import save_file

    from empriv.models.adaptations import PrefixTunedLM, PromptTunedLM

    if isinstance(model, PrefixTunedLM):
        enc = model.prefix
        spec = {"method": "prefix", "n_virtual": enc.n_virtual, "layers": list(enc.layers),
                "reparameterize": enc.reparameterize,
                "hidden": enc.mlp[0].out_features if enc.reparameterize else None}
        state = enc.state_dict()
    elif isinstance(model, PromptTunedLM):
        spec = {"method": "prompt", "n_virtual": model.n_virtual}
        state = model.prompt.state_dict()
    else:
        raise ValueError(f"a prefix/prompt adapter is saved from PrefixTunedLM or PromptTunedLM, got {type(model).__name__}")
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(directory / ADAPTER_WEIGHTS))
    if include_base:
        save_finetuned(model.base, "full", directory)
        spec["base"] = "."
    elif base_directory is not None:
        spec["base"] = str(Path(base_directory).resolve())
    (directory / ADAPTER_SPEC).write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")


def save_finetuned(model: nn.Module, method: str, directory: str | Path, *, tokenizer_dir: str | Path | None = None,
                   base_directory: str | Path | None = None, include_base: bool = False) -> None:
    """Save full weights (GPT-2 as a standard GPT-2 again), the LoRA adapter, or a prefix/prompt adapter, as
    safetensors. ``head`` is saved as a full model (its LM head untied: ``tie_word_embeddings`` false).

    ``tokenizer_dir``: copy its Hugging Face tokenizer files next to the weights. ``base_directory``:
    for an adapter, record the base's absolute path, so peft's ``AutoPeftModelForCausalLM`` finds it
    from any working directory (empriv's own :func:`load_finetuned` is told the base explicitly).
    ``include_base`` (prefix/prompt): save the wrapped base model in the same directory (audit models).
    """
    directory = Path(directory)
    if method in VIRTUAL_TOKEN_METHODS:
        _save_virtual_tokens(model, directory, base_directory, include_base)
    elif method in ("full", "head"):
        gpt2 = _is_gpt2(model)
        if gpt2:
            linear_to_conv1d(model)
        model.save_pretrained(str(directory), safe_serialization=True)
        if gpt2:
            conv1d_to_linear(model)
    else:
        model.save_pretrained(str(directory), safe_serialization=True)
        if base_directory is not None:
            import json

            cfg_path = directory / "adapter_config.json"
            cfg = json.loads(cfg_path.read_text())
            cfg["base_model_name_or_path"] = str(Path(base_directory).resolve())
            cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if tokenizer_dir is not None:
        from empriv.models.tokenizer import copy_hf_tokenizer

        copy_hf_tokenizer(tokenizer_dir, directory)


def _load_virtual_tokens(directory: Path, base_directory) -> nn.Module:
    import json

    from safetensors.torch import load_file

    from empriv.models.adaptations import prepare_adaptation
    from empriv.models.registry import load_model

    spec = json.loads((directory / ADAPTER_SPEC).read_text())
    base = load_model(directory if spec.get("base") == "." else base_directory)
    if spec["method"] == "prefix":
        model = prepare_adaptation(base, "prefix", n_virtual=spec["n_virtual"], layers=spec["layers"],
                                   reparameterize=spec["reparameterize"], hidden=spec["hidden"] or 1, init_seed=0)
        module = model.prefix
    else:
        model = prepare_adaptation(base, "prompt", n_virtual=spec["n_virtual"], init_seed=0)
        module = model.prompt
    module.load_state_dict(load_file(str(directory / ADAPTER_WEIGHTS)), strict=True)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


def load_finetuned(directory: str | Path, base_directory: str | Path) -> nn.Module:
    """Load what :func:`save_finetuned` wrote: a full model (also head tuning), base + LoRA adapter merged, or base +
    prefix/prompt adapter (a :class:`~empriv.models.adaptations.PrefixTunedLM` / ``PromptTunedLM``)."""
    from empriv.models.registry import load_model

    directory = Path(directory)
    if (directory / ADAPTER_SPEC).exists():
        return _load_virtual_tokens(directory, base_directory)
    if (directory / "adapter_config.json").exists():
        from peft import PeftModel

        base = load_model(base_directory)
        conv1d_to_linear(base)
        model = PeftModel.from_pretrained(base, str(directory)).merge_and_unload()
        model.eval()
        return model
    return load_model(directory)
