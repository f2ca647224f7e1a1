"""Saving and loading a fine-tuned model, whatever its method.

A saved run is a standard Hugging Face directory: the full model (``config.json`` +
``model.safetensors``) or the adapter (``adapter_config.json`` + ``adapter_model.safetensors``,
whose ``base_model_name_or_path`` is the base's absolute path), plus the tokenizer files, so
``AutoTokenizer`` and ``AutoModelForCausalLM`` / ``AutoPeftModelForCausalLM`` load it from any
working directory.

Which parameters train is set up in :mod:`empriv.models.lora` (full, LoRA) and :mod:`empriv.models.adaptations`
(prefix, prompt, head); GPT-2's ``Conv1D`` conversion is :mod:`empriv.models.conv1d`. Their names are importable
from here too. GPT-2 is saved with its ``Conv1D`` layers back, so saved weights load as a normal GPT-2.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from empriv.config.methods import BUILTIN, method_traits
from empriv.models.conv1d import conv1d_to_linear, linear_to_conv1d
from empriv.models.lora import (LORA_TARGET_MODULES, METHODS, lora_target_modules, prepare_for_finetuning,
                                trainable_parameters)

__all__ = ["ADAPTER_SPEC", "ADAPTER_WEIGHTS", "LORA_TARGET_MODULES", "METHODS", "VIRTUAL_TOKEN_METHODS",
           "conv1d_to_linear", "linear_to_conv1d", "load_finetuned", "lora_target_modules", "prepare_for_finetuning",
           "save_finetuned", "trainable_parameters"]


def _is_gpt2(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    return getattr(config, "model_type", None) == "gpt2"


ADAPTER_SPEC = "empriv_adapter.json"
ADAPTER_WEIGHTS = "empriv_adapter.safetensors"
# saved as empriv adapters (peft cannot hold a layer-sparse prefix): config.methods' saved_as "virtual_tokens"
VIRTUAL_TOKEN_METHODS = tuple(name for name, traits in BUILTIN.items() if traits.saved_as == "virtual_tokens")


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
    safetensors. ``head`` is saved as a full model (its LM head untied: ``tie_word_embeddings`` false). ``method``
    names a training method; its traits (:mod:`empriv.config.methods`, ``saved_as``) say which of these it is.

    ``tokenizer_dir``: copy its Hugging Face tokenizer files next to the weights. ``base_directory``:
    for an adapter, record the base's absolute path, so peft's ``AutoPeftModelForCausalLM`` finds it
    from any working directory (empriv's own :func:`load_finetuned` is told the base explicitly).
    ``include_base`` (prefix/prompt): save the wrapped base model in the same directory (audit models).
    """
    directory = Path(directory)
    saved_as = method_traits(method).saved_as  # how the method's model is saved (config.methods)
    if saved_as == "virtual_tokens":
        _save_virtual_tokens(model, directory, base_directory, include_base)
    elif saved_as == "model":
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
