"""Private adaptations of a causal LM: prefix, prompt and head tuning (plus full and LoRA), with
per-sample gradients and one DP-SGD step that tests can check against a naive loop.

Methods (:data:`METHODS`), all prepared by :func:`prepare_adaptation`:

- ``full``, ``lora``: delegated to :func:`empriv.models.lora.prepare_for_finetuning` (every weight,
  or peft LoRA adapters), listed here so one entry covers every method.
- ``prefix``: P trainable key/value vectors per attention layer (prefix tuning, Li & Liang 2021), on
  every layer or on a chosen subset of layers ("layer-sparse", what DP-Flat's cross-layer
  elimination removes layer by layer). The base is frozen. With ``reparameterize=True`` the prefix is
  produced by an MLP, as in Li & Liang: P virtual-token embeddings [P, d] → Linear(d, h) → tanh →
  Linear(h, n_layers·2·kv_width), reshaped into the k/v of each selected layer; the embedding and the
  MLP train.
- ``prompt``: P trainable input embeddings prepended to every sequence (soft prompt, Lester et al.
  2021). The virtual tokens take positions 0..P−1 and the real tokens P..P+L−1 (as in
  :func:`empriv.train.dpzero.soft_prompt_losses`); the model returns logits for the real tokens only,
  so :func:`empriv.models.lm.per_sample_mean_nll` is the loss on real tokens, unchanged.
- ``head``: only the output layer trains, chosen by ``head_target``:
  ``"lm_head"`` (default) trains the LM head W_out [V, d]. GPT-2 (and SmolLM2) tie it to the input
  embedding table; training a tied head would also move every input embedding, so the head is
  *untied*: a new ``nn.Linear`` initialised as a copy of the tied table (the model computes the same
  function at step 0) trains, and the input embeddings stay frozen (``config.tie_word_embeddings`` is set
  False so nothing re-ties them). This is "the last layer" of the auditing paper (Pythia's untied
  ``embed_out``). ``"last_block"`` instead trains the last transformer block and the final norm
  (``ln_f`` / ``norm``), with the tied head frozen.

The modules live beside this one: :mod:`empriv.models.prefix` (how the prefix enters attention),
:mod:`empriv.models.prompt`, :mod:`empriv.models.virtual_tokens` (the trainable table and its opacus grad
sampler), :mod:`empriv.models.per_sample` (per-sample gradients, :func:`dp_step`); their names are importable
from here too.

Initialisation (public, seeded by ``init_seed``): a flat prefix starts as the keys/values that P random
vocabulary tokens leave in the base's cache (Li & Liang found real-token activations train better than
noise); the reparameterised prefix draws its embeddings from N(0, 1) and its MLP from torch's default
Linear init; a soft prompt starts as the input embeddings of P random vocabulary tokens (Lester et
al.'s sampled-vocabulary init). No training record is read.

The base passed in is modified in place: frozen; for prefix its attention implementation is switched
(in memory only: ``_attn_implementation`` is not written by ``save_pretrained``); for head its tied LM
head is replaced (``lm_head``) or its Conv1D layers become ``nn.Linear`` (GPT-2, ``last_block``; convert
back with :func:`empriv.models.adapters.linear_to_conv1d` before saving it as a GPT-2).

Supported architectures: prefix on GPT-2 and Llama-class models (SmolLM2), see
:data:`PREFIX_ARCHITECTURES`; prompt and ``head_target="lm_head"`` on any causal LM whose forward accepts
``inputs_embeds`` / whose output embeddings are an ``nn.Linear``; ``head_target="last_block"`` on GPT-2
and Llama. Anything else is a one-line ``ValueError`` naming the ``model_type``.
"""


from __future__ import annotations


import torch
from torch import nn

from empriv.checks import require_int
from empriv.config.methods import BUILTIN
from empriv.models.conv1d import conv1d_to_linear
from empriv.models.lora import prepare_for_finetuning
from empriv.models.per_sample import DPStepStats, dp_step, per_sample_gradients
from empriv.models.prefix import PREFIX_ARCHITECTURES, PrefixEncoder, PrefixTunedLM, _use_prefix_attention
from empriv.models.prompt import PromptTunedLM
from empriv.models.virtual_tokens import VirtualTokens, random_token_ids, register_grad_samplers

# the shipped methods that adapt the model's own forward pass (all but the black-box ones: DPZero's prompt is a tensor
# beside the base, empriv.train.methods.dpzero)
METHODS = tuple(name for name, traits in BUILTIN.items() if not traits.black_box)
HEAD_TARGETS = ("lm_head", "last_block")


# ----------------------------------------------------------------------------- validation


def _model_type(model: nn.Module) -> str | None:
    return getattr(getattr(model, "config", None), "model_type", None)


def _geometry(model: nn.Module) -> tuple[int, int, int]:
    """(number of attention layers, key/value heads, head dimension) of a supported base."""
    config = model.config
    model_type = config.model_type
    if model_type == "gpt2":
        return config.n_layer, config.n_head, config.n_embd // config.n_head
    if model_type == "llama":
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return config.num_hidden_layers, kv_heads, head_dim
    raise ValueError(f"prefix tuning needs a base of architecture {', '.join(PREFIX_ARCHITECTURES)}, "
                     f"got model_type {model_type!r}")


def _check_layers(layers, n_layers: int) -> tuple[int, ...]:
    if layers is None:
        return tuple(range(n_layers))
    try:
        values = list(layers)
    except TypeError:
        raise ValueError(f"layers must be None or a non-empty list of layer indices in [0, {n_layers}), "
                         f"got {layers!r}") from None
    if not values:
        raise ValueError(f"layers must be None (all layers) or a non-empty list of indices in [0, {n_layers}), got []")
    for v in values:
        require_int("layers entry", v, 0, n_layers - 1, meaning="an index of the base's layers")
    if len(set(values)) != len(values):
        raise ValueError(f"layers must not repeat an index, got {values!r}")
    return tuple(sorted(int(v) for v in values))


# ----------------------------------------------------------------------------- preparation


def _freeze(model: nn.Module) -> None:
    for p in model.parameters():
        p.requires_grad_(False)


def _prepare_prefix(model, *, n_virtual, layers, reparameterize, hidden, init_seed) -> PrefixTunedLM:
    n_layers, kv_heads, head_dim = _geometry(model)
    layers = _check_layers(layers, n_layers)
    if reparameterize:
        hidden = require_int("hidden", hidden, 1)
    embed = model.get_input_embeddings()
    dtype, device = embed.weight.dtype, embed.weight.device

    def build() -> PrefixEncoder:
        encoder = PrefixEncoder(n_virtual, layers, kv_heads, head_dim, reparameterize=reparameterize,
                                hidden=hidden, embed_dim=embed.weight.shape[1])
        if reparameterize:
            nn.init.normal_(encoder.embedding.weight)
        return encoder

    if init_seed is None:
        encoder = build()
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            encoder = build()
    encoder.to(device=device, dtype=dtype)
    if not reparameterize:
        limit = getattr(model.config, "n_positions", None)
        if limit is not None and n_virtual > limit:
            raise ValueError(f"n_virtual must be <= the model's {limit} positions (its tokens initialise the prefix), "
                             f"got {n_virtual}")
        # Start from the keys/values P random vocabulary tokens leave in the base's cache (Li & Liang:
        # real-token activations initialise better than noise). Public: no training record is read.
        tokens = random_token_ids(embed.weight.shape[0], n_virtual, init_seed).to(device).unsqueeze(0)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            cache = model(input_ids=tokens, use_cache=True).past_key_values
            rows = [torch.stack([cache.layers[layer].keys[0], cache.layers[layer].values[0]]) for layer in layers]
            # [n_sel, 2, kv_heads, P, head_dim] -> [P, n_sel·2·kv_heads·head_dim]
            table = torch.stack(rows).permute(3, 0, 1, 2, 4).reshape(n_virtual, -1)
            encoder.table.weight.copy_(table)
        model.train(was_training)
    _freeze(model)
    _use_prefix_attention(model)
    return PrefixTunedLM(model, encoder)


def _prepare_prompt(model, *, n_virtual, init_seed) -> PromptTunedLM:
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embed is None or not hasattr(embed, "weight"):
        raise ValueError(f"prompt tuning needs a model with input embeddings, got {type(model).__name__}")
    prompt = VirtualTokens(n_virtual, embed.weight.shape[1]).to(device=embed.weight.device, dtype=embed.weight.dtype)
    # Start from the embeddings of P random vocabulary tokens (Lester et al.'s sampled-vocabulary init).
    tokens = random_token_ids(embed.weight.shape[0], n_virtual, init_seed).to(embed.weight.device)
    with torch.no_grad():
        prompt.weight.copy_(embed.weight[tokens])
    _freeze(model)
    return PromptTunedLM(model, prompt)


def _last_block(model: nn.Module) -> list[nn.Module]:
    model_type = _model_type(model)
    if model_type == "gpt2":
        return [model.transformer.h[-1], model.transformer.ln_f]
    if model_type == "llama":
        return [model.model.layers[-1], model.model.norm]
    raise ValueError(f"head_target 'last_block' supports model_type gpt2, llama, got {model_type!r}")


def _prepare_head(model: nn.Module, head_target: str) -> nn.Module:
    if head_target == "last_block":
        parts = _last_block(model)
        if _model_type(model) == "gpt2":
            conv1d_to_linear(model)  # opacus' fast Linear hooks for the block's projections
            parts = _last_block(model)
        _freeze(model)
        for part in parts:
            for p in part.parameters():
                p.requires_grad_(True)
        return model
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        raise ValueError(f"head tuning needs a model whose output embeddings are an nn.Linear (an LM head), "
                         f"got {type(head).__name__ if head is not None else None} in {type(model).__name__}")
    embed = model.get_input_embeddings()
    if head.weight is getattr(embed, "weight", None):  # tied: untie into a separate head, same values
        untied = nn.Linear(head.in_features, head.out_features, bias=head.bias is not None,
                           device=head.weight.device, dtype=head.weight.dtype)
        with torch.no_grad():
            untied.weight.copy_(head.weight)
            if head.bias is not None:
                untied.bias.copy_(head.bias)
        model.set_output_embeddings(untied)
        model.config.tie_word_embeddings = False
        head = untied
    _freeze(model)
    for p in head.parameters():
        p.requires_grad_(True)
    return model


def prepare_adaptation(model: nn.Module, method: str, *, n_virtual: int = 10, layers=None,
                       reparameterize: bool = False, hidden: int = 512, init_seed: int | None = None,
                       head_target: str = "lm_head", lora=None) -> nn.Module:
    """Set up ``method`` on ``model``; returns the module to train (exactly the adaptation's parameters
    require grad; for prefix/prompt a wrapper around ``model``, whose own weights are frozen).

    ``n_virtual`` P: virtual tokens (prefix, prompt). ``layers``: the attention layers that get a prefix
    (None: all). ``reparameterize``/``hidden`` h: the prefix's MLP and its hidden width. ``init_seed``
    seeds the adaptation's initialisation (prefix tokens / MLP, prompt tokens, LoRA) without touching
    torch's global random state; None draws from the global state. ``head_target``: ``"lm_head"`` (untied
    output layer) or ``"last_block"`` (last block + final norm), see the module docstring. ``lora``:
    :class:`empriv.config.LoraParams` for ``lora`` (default: its defaults).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if layers is not None and method != "prefix":
        raise ValueError(f"layers applies to method 'prefix' only, got layers={layers!r} with method {method!r}")
    if reparameterize and method != "prefix":
        raise ValueError(f"reparameterize applies to method 'prefix' only, got method {method!r}")
    if head_target not in HEAD_TARGETS:
        raise ValueError(f"head_target must be one of {', '.join(HEAD_TARGETS)}, got {head_target!r}")
    if method in ("full", "lora"):
        if method == "lora" and lora is None:
            from empriv.config import LoraParams

            lora = LoraParams()
        return prepare_for_finetuning(model, method, lora, init_seed=init_seed)
    if method in ("prefix", "prompt"):
        n_virtual = require_int("n_virtual", n_virtual, 1)
        register_grad_samplers()
        if method == "prefix":
            return _prepare_prefix(model, n_virtual=n_virtual, layers=layers, reparameterize=reparameterize,
                                   hidden=hidden, init_seed=init_seed)
        return _prepare_prompt(model, n_virtual=n_virtual, init_seed=init_seed)
    return _prepare_head(model, head_target)


def adaptation_trainable_parameters(model: nn.Module) -> int:
    """Number of parameters that train (the adaptation's size, recorded per run)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)



__all__ = [
    "HEAD_TARGETS",
    "METHODS",
    "PREFIX_ARCHITECTURES",
    "DPStepStats",
    "PrefixEncoder",
    "PrefixTunedLM",
    "PromptTunedLM",
    "VirtualTokens",
    "adaptation_trainable_parameters",
    "dp_step",
    "per_sample_gradients",
    "prepare_adaptation",
    "register_grad_samplers",
]
