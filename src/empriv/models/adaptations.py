"""Private adaptations of a causal LM: prefix, prompt and head tuning (plus full and LoRA), with
per-sample gradients and one DP-SGD step that tests can check against a naive loop.

Methods (:data:`METHODS`), all prepared by :func:`prepare_adaptation`:

- ``full``, ``lora``: delegated to :func:`empriv.models.adapters.prepare_for_finetuning` (every weight,
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

How the prefix enters attention
-------------------------------
Not through ``past_key_values``: Hugging Face builds one attention mask for all layers from the cache
length, so a prefix on a subset of layers could not be masked correctly. Instead the base model's
attention implementation is switched to a registered wrapper (``transformers``' ``AttentionInterface``,
name ``empriv_prefix_<inner>``) around its own implementation (``sdpa``, or ``eager`` if the model used
eager; others fall back to sdpa). :class:`PrefixTunedLM` computes the per-layer (k, v) once per forward and
passes them down as a keyword argument, which GPT-2 and Llama thread from the model's ``forward``
to every attention call. In a layer that has a prefix, the wrapper concatenates the P prefix keys and
values in front of the layer's keys and values (after RoPE for Llama, i.e. the prefix vectors are the
post-rotation keys, like a cache entry) and extends that layer's mask by P columns: every query may
attend to every prefix position (unless ``prefix_attention_mask`` masks some), and the causal and
padding mask over the real tokens is unchanged. Other layers run the base attention untouched. The
real tokens keep positions 0..L−1 (the prefix has no position), so a prefix whose keys and values are
those a real token sequence t would leave in the cache gives exactly the logits of the base on t ⊕ x
with x at positions |t|..; the tests check this. With a KV cache (generation) the cache holds only
real tokens; the prefix is prepended again at every call.

Per-sample gradients
--------------------
The trainable prefix / prompt tensors live in :class:`VirtualTokens`, a small module whose output is
its [P, W] table broadcast to [B, P, W] (B read off the batch it is given). Its opacus grad sampler is
registered here: each sample's output is the table itself, so the per-sample gradient of the table is
exactly the gradient that flowed into that sample's copy (opacus' "backprops"). The reparameterised
prefix runs its MLP on the broadcast [B, P, d] embeddings, so the MLP's ``nn.Linear`` layers get their
per-sample gradients from opacus' own Linear hooks; the head is an ``nn.Linear``; LoRA and full use
opacus' hooks on the converted GPT-2 ``nn.Linear`` layers (Conv1D → Linear, as in adapters). So
:func:`per_sample_gradients` is one forward and one backward through
``opacus.GradSampleModule(loss_reduction="sum")`` on the summed per-sample mean NLL
(:func:`empriv.models.lm.per_sample_mean_nll`), as :mod:`empriv.train.dp` does; modules without an
opacus grad sampler (Llama's RMSNorm under ``last_block``) fall back to opacus' functorch path.

:func:`dp_step` clips each sample's gradient over all trainable parameters to norm C with opacus'
factor min(1, C / (‖g_i‖ + 10⁻⁶)), sums, adds N(0, σ²C²) per coordinate (one ``torch.normal`` per
trainable parameter, in ``model.parameters()`` order, as opacus' ``DPOptimizer`` draws it) and divides
by the expected batch size b, leaving the result in ``p.grad``. With the same generator state it
reproduces the ``DPOptimizer`` step of :mod:`empriv.train.dp`.

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

import numbers
import sys
import warnings
from dataclasses import dataclass

import torch
from torch import nn

METHODS = ("full", "lora", "prefix", "prompt", "head")
HEAD_TARGETS = ("lm_head", "last_block")
#: ``config.model_type`` values whose attention modules carry ``layer_idx`` and dispatch through
#: transformers' AttentionInterface with the forward's keyword arguments (checked by the tests for both).
PREFIX_ARCHITECTURES = ("gpt2", "llama")

_PREFIX_KWARG = "empriv_prefix"
_ATTENTION_PREFIX = "empriv_prefix_"


# ----------------------------------------------------------------------------- validation


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


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
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= v < n_layers:
            raise ValueError(f"layers must hold indices in [0, {n_layers}) (the base's layers), got {values!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"layers must not repeat an index, got {values!r}")
    return tuple(sorted(int(v) for v in values))


# ----------------------------------------------------------------------------- virtual tokens


class VirtualTokens(nn.Module):
    """A trainable table [P, W], returned broadcast to [B, P, W] for a batch of B samples.

    ``forward(batch)`` reads only ``batch.shape[0]`` (any batch-first tensor: token ids or embeddings);
    the opacus grad sampler registered for this class returns, for sample i, the gradient that reached
    sample i's copy of the table — its exact per-sample gradient.
    """

    def __init__(self, n_virtual: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_virtual, width))

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.weight.unsqueeze(0).expand(batch.shape[0], -1, -1)


def _virtual_tokens_grad_sample(layer: VirtualTokens, activations, backprops: torch.Tensor) -> dict:
    if not layer.weight.requires_grad:
        return {}
    return {layer.weight: backprops}


_registered = False


def register_grad_samplers() -> None:
    """Register :class:`VirtualTokens`' per-sample-gradient rule with opacus (idempotent)."""
    global _registered
    if _registered:
        return
    from opacus.grad_sample.utils import register_grad_sampler

    register_grad_sampler(VirtualTokens)(_virtual_tokens_grad_sample)
    _registered = True


# ----------------------------------------------------------------------------- prefix attention


@dataclass
class _PrefixState:
    key_values: dict  # layer index -> (k, v), each [B, kv_heads, P, head_dim]
    visible: torch.Tensor | None  # [B, P] bool (True: attendable) or None (all visible)


def _inner_attention(module: nn.Module, inner: str):
    if inner == "eager":
        return getattr(sys.modules[type(module).__module__], "eager_attention_forward")
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS["sdpa"]


def _extend_mask(mask: torch.Tensor | None, n_prefix: int, query: torch.Tensor, key: torch.Tensor,
                 visible: torch.Tensor | None) -> torch.Tensor:
    """The layer's mask over [prefix ⊕ real keys]: prefix columns attendable (or ``visible``), real ones as given."""
    q_len, k_len = query.shape[2], key.shape[2]
    device = query.device
    if mask is None:  # sdpa's implicit is_causal mask, made explicit (the queries are the last q_len keys)
        rows = torch.arange(q_len, device=device).unsqueeze(1) + (k_len - q_len)
        mask = (torch.arange(k_len, device=device).unsqueeze(0) <= rows)[None, None]
    batch = mask.shape[0] if visible is None else max(mask.shape[0], visible.shape[0])
    if visible is None:
        cols = torch.ones((batch, 1, mask.shape[2], n_prefix), dtype=torch.bool, device=device)
    else:
        cols = visible.to(device)[:, None, None, :].expand(batch, 1, mask.shape[2], n_prefix)
    mask = mask.expand(batch, *mask.shape[1:])
    if mask.dtype != torch.bool:  # additive float mask (eager): 0 attendable, dtype minimum masked
        cols = torch.zeros(cols.shape, dtype=mask.dtype, device=device).masked_fill(~cols, torch.finfo(mask.dtype).min)
    return torch.cat([cols, mask], dim=-1)


def _make_prefix_attention(inner: str):
    def prefix_attention(module, query, key, value, attention_mask, **kwargs):
        state = kwargs.pop(_PREFIX_KWARG, None)
        fn = _inner_attention(module, inner)
        if state is not None and module.layer_idx in state.key_values:
            k, v = state.key_values[module.layer_idx]
            n_prefix = k.shape[2]
            attention_mask = _extend_mask(attention_mask, n_prefix, query, key, state.visible)
            key = torch.cat([k.to(key.dtype), key], dim=2)
            value = torch.cat([v.to(value.dtype), value], dim=2)
        return fn(module, query, key, value, attention_mask, **kwargs)

    return prefix_attention


def _use_prefix_attention(base: nn.Module) -> None:
    """Switch ``base`` to the prefix-aware wrapper of its own attention implementation."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    current = base.config._attn_implementation
    if isinstance(current, str) and current.startswith(_ATTENTION_PREFIX):
        raise ValueError("the base already carries a prefix (prepare_adaptation was called on it before): "
                         "load a fresh base")
    inner = "eager" if current == "eager" else "sdpa"
    name = _ATTENTION_PREFIX + inner
    if name not in ALL_ATTENTION_FUNCTIONS:
        ALL_ATTENTION_FUNCTIONS.register(name, _make_prefix_attention(inner))
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[inner])
    base.set_attn_implementation(name)
    if base.config._attn_implementation != name:
        raise ValueError(f"prefix tuning could not switch the attention of model_type {base.config.model_type!r} "
                         f"(implementation {current!r})")


class PrefixEncoder(nn.Module):
    """The trainable prefix: per selected layer, P keys and P values of shape [kv_heads, head_dim].

    Flat: one :class:`VirtualTokens` table [P, n_sel·2·kv_heads·head_dim]. Reparameterised: a table of
    P embeddings [P, d] and an MLP Linear(d, h) → tanh → Linear(h, n_sel·2·kv_heads·head_dim).
    """

    def __init__(self, n_virtual: int, layers: tuple[int, ...], kv_heads: int, head_dim: int, *,
                 reparameterize: bool, hidden: int, embed_dim: int):
        super().__init__()
        self.n_virtual, self.layers, self.kv_heads, self.head_dim = n_virtual, tuple(layers), kv_heads, head_dim
        self.reparameterize = reparameterize
        width = len(self.layers) * 2 * kv_heads * head_dim
        if reparameterize:
            self.embedding = VirtualTokens(n_virtual, embed_dim)
            self.mlp = nn.Sequential(nn.Linear(embed_dim, hidden), nn.Tanh(), nn.Linear(hidden, width))
        else:
            self.table = VirtualTokens(n_virtual, width)

    def forward(self, batch: torch.Tensor) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        flat = self.mlp(self.embedding(batch)) if self.reparameterize else self.table(batch)
        b = flat.shape[0]
        kv = flat.reshape(b, self.n_virtual, len(self.layers), 2, self.kv_heads, self.head_dim)
        kv = kv.permute(2, 3, 0, 4, 1, 5)  # [layer, k/v, B, kv_heads, P, head_dim]
        return {layer: (kv[j, 0], kv[j, 1]) for j, layer in enumerate(self.layers)}


class PrefixTunedLM(nn.Module):
    """A frozen causal LM (``base``) with a trainable :class:`PrefixEncoder` (``prefix``) in its attention.

    ``forward`` takes the base's arguments (and returns its output: logits over the real tokens) plus
    ``prefix_attention_mask`` ([P] or [B, P], 1 = the prefix position may be attended; default all 1).
    """

    def __init__(self, base: nn.Module, prefix: PrefixEncoder):
        super().__init__()
        self.base = base
        self.prefix = prefix

    @property
    def config(self):
        return self.base.config

    def get_input_embeddings(self) -> nn.Module:
        return self.base.get_input_embeddings()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, prefix_attention_mask=None, **kwargs):
        batch = input_ids if input_ids is not None else inputs_embeds
        if batch is None:
            raise ValueError("PrefixTunedLM needs input_ids or inputs_embeds, got neither")
        visible = None
        if prefix_attention_mask is not None:
            given = torch.as_tensor(prefix_attention_mask, device=batch.device).bool()
            visible = given.unsqueeze(0).expand(batch.shape[0], -1) if given.dim() == 1 else given
            if visible.shape != (batch.shape[0], self.prefix.n_virtual):
                raise ValueError(f"prefix_attention_mask must be [{self.prefix.n_virtual}] or "
                                 f"[{batch.shape[0]}, {self.prefix.n_virtual}], got {list(given.shape)}")
        state = _PrefixState(self.prefix(batch), visible)
        return self.base(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                         **{_PREFIX_KWARG: state}, **kwargs)


# ----------------------------------------------------------------------------- soft prompt


class PromptTunedLM(nn.Module):
    """A frozen causal LM (``base``) with P trainable input embeddings (``prompt``) before every sequence.

    The virtual tokens sit at positions 0..P−1; a caller's ``position_ids`` (default 0..L−1) are those
    of the real tokens and are shifted by P; a 2-D ``attention_mask`` over the real tokens is extended
    by P ones. Logits are returned for the real tokens only ([B, L, V]). With a KV cache the prompt is
    prepended on the first call only (the cache then holds it).
    """

    def __init__(self, base: nn.Module, prompt: VirtualTokens):
        super().__init__()
        self.base = base
        self.prompt = prompt

    @property
    def config(self):
        return self.base.config

    @property
    def n_virtual(self) -> int:
        return self.prompt.weight.shape[0]

    def get_input_embeddings(self) -> nn.Module:
        return self.base.get_input_embeddings()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, **kwargs):
        if inputs_embeds is None:
            if input_ids is None:
                raise ValueError("PromptTunedLM needs input_ids or inputs_embeds, got neither")
            inputs_embeds = self.base.get_input_embeddings()(input_ids)
        b, n = inputs_embeds.shape[:2]
        p = self.n_virtual
        device = inputs_embeds.device
        first = past_key_values is None or past_key_values.get_seq_length() == 0
        if position_ids is None:
            start = 0 if first else past_key_values.get_seq_length() - p
            position_ids = torch.arange(start, start + n, device=device).unsqueeze(0).expand(b, -1)
        positions = position_ids.to(device) + p
        if first:
            soft = self.prompt(inputs_embeds).to(inputs_embeds.dtype)
            inputs_embeds = torch.cat([soft, inputs_embeds], dim=1)
            positions = torch.cat([torch.arange(p, device=device).unsqueeze(0).expand(b, -1), positions], dim=1)
        limit = getattr(self.base.config, "n_positions", None)  # a learned position table (GPT-2) cannot extrapolate
        if limit is not None and int(positions.max()) >= limit:
            raise ValueError(f"n_virtual + sequence length = {p} + {int(positions.max()) + 1 - p} exceeds the "
                             f"model's {limit} positions")
        if attention_mask is not None:
            attention_mask = torch.cat([torch.ones((b, p), dtype=attention_mask.dtype, device=attention_mask.device),
                                        attention_mask], dim=1)
        out = self.base(inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=positions,
                        past_key_values=past_key_values, use_cache=use_cache, **kwargs)
        if first:
            out.logits = out.logits[:, p:]
        return out


# ----------------------------------------------------------------------------- preparation


def _random_token_ids(vocab_size: int, n: int, init_seed: int | None) -> torch.Tensor:
    generator = None if init_seed is None else torch.Generator().manual_seed(init_seed)
    return torch.randint(0, vocab_size, (n,), generator=generator)


def _freeze(model: nn.Module) -> None:
    for p in model.parameters():
        p.requires_grad_(False)


def _prepare_prefix(model, *, n_virtual, layers, reparameterize, hidden, init_seed) -> PrefixTunedLM:
    n_layers, kv_heads, head_dim = _geometry(model)
    layers = _check_layers(layers, n_layers)
    if reparameterize:
        hidden = _check_int("hidden", hidden, 1)
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
        tokens = _random_token_ids(embed.weight.shape[0], n_virtual, init_seed).to(device).unsqueeze(0)
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
    tokens = _random_token_ids(embed.weight.shape[0], n_virtual, init_seed).to(embed.weight.device)
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
            from empriv.models.adapters import conv1d_to_linear

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
        from empriv.models.adapters import prepare_for_finetuning

        if method == "lora" and lora is None:
            from empriv.config import LoraParams

            lora = LoraParams()
        return prepare_for_finetuning(model, method, lora, init_seed=init_seed)
    if method in ("prefix", "prompt"):
        n_virtual = _check_int("n_virtual", n_virtual, 1)
        register_grad_samplers()
        if method == "prefix":
            return _prepare_prefix(model, n_virtual=n_virtual, layers=layers, reparameterize=reparameterize,
                                   hidden=hidden, init_seed=init_seed)
        return _prepare_prompt(model, n_virtual=n_virtual, init_seed=init_seed)
    return _prepare_head(model, head_target)


def adaptation_trainable_parameters(model: nn.Module) -> int:
    """Number of parameters that train (the adaptation's size, recorded per run)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------- per-sample gradients, DP step


def _trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("the model has no trainable parameters (call prepare_adaptation first)")
    return named


def _check_batch(ids: torch.Tensor, mask: torch.Tensor) -> None:
    if ids.dim() != 2 or tuple(ids.shape) != tuple(mask.shape):
        raise ValueError(f"ids and mask must both be [B, L], got {list(ids.shape)} and {list(mask.shape)}")


def _per_sample(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor):
    """(names, params, per-sample gradients [B, *shape] per parameter, per-sample losses [B])."""
    from opacus import GradSampleModule

    from empriv.models.lm import model_device, per_sample_mean_nll

    register_grad_samplers()
    _check_batch(ids, mask)
    inner = model._module if isinstance(model, GradSampleModule) else model
    named = _trainable(inner)
    names = [n for n, _ in named]
    params = [p for _, p in named]
    if ids.shape[0] == 0:
        zeros = [torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device) for p in params]
        return names, params, zeros, torch.zeros(0)
    device = model_device(inner)
    saved = [p.grad for p in params]
    was_training = inner.training
    wrapped = not isinstance(model, GradSampleModule)
    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum") if wrapped else model
    try:
        for p in params:
            p.grad = None
            p.grad_sample = None
        inner.train()
        with warnings.catch_warnings():
            # opacus' hooks fire on modules whose input (token ids) needs no gradient: harmless.
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            losses = per_sample_mean_nll(gsm, ids.to(device), mask.to(device))
            losses.sum().backward()
        grads = [p.grad_sample.detach() for p in params]
    finally:
        inner.train(was_training)
        if wrapped:
            gsm._close()
        else:
            for p in params:
                p.grad_sample = None
        for p, g in zip(params, saved):
            p.grad = g
    return names, params, grads, losses.detach()


def per_sample_gradients(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per trainable parameter (by name): the [B, *shape] gradients of each sample's mean NLL.

    One forward/backward through opacus' ``GradSampleModule`` (``model`` may already be one), in train
    mode (restored afterwards); ``p.grad`` is left as it was. An empty batch gives [0, *shape] zeros.
    """
    names, _, grads, _ = _per_sample(model, ids, mask)
    return dict(zip(names, grads))


@dataclass(frozen=True)
class DPStepStats:
    """What one :func:`dp_step` computed from the batch (un-noised: for monitoring, not release)."""

    losses: torch.Tensor  # [B] per-sample mean NLL
    per_sample_norms: torch.Tensor  # [B] ‖g_i‖ over all trainable parameters, before clipping
    clip_factors: torch.Tensor  # [B] min(1, C / (‖g_i‖ + 1e-6))


def dp_step(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, clip_norm: float, noise_multiplier: float,
            generator: torch.Generator | None, expected_batch_size: float) -> DPStepStats:
    """One DP-SGD gradient: p.grad = (Σ_i clip_C(g_i) + N(0, σ²C²·I)) / b for every trainable p.

    g_i is sample i's gradient over all trainable parameters, clipped by opacus' factor
    min(1, C / (‖g_i‖ + 10⁻⁶)); the noise is drawn per parameter in ``model.parameters()`` order with
    ``torch.normal(0, σC, p.shape, generator=generator)`` (none drawn when σ = 0), as opacus'
    ``DPOptimizer`` does; b = ``expected_batch_size``. An empty batch gives noise / b.
    """
    if isinstance(clip_norm, bool) or not isinstance(clip_norm, numbers.Real) or not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm!r}")
    if isinstance(noise_multiplier, bool) or not isinstance(noise_multiplier, numbers.Real) \
            or not noise_multiplier >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    if isinstance(expected_batch_size, bool) or not isinstance(expected_batch_size, numbers.Real) \
            or not expected_batch_size > 0:
        raise ValueError(f"expected_batch_size must be > 0, got {expected_batch_size!r}")
    _, params, grads, losses = _per_sample(model, ids, mask)
    n = ids.shape[0]
    if n:
        norms = torch.stack([g.reshape(n, -1).norm(2, dim=-1) for g in grads], dim=1).norm(2, dim=1)
        factors = (clip_norm / (norms + 1e-6)).clamp(max=1.0)
    else:
        norms = factors = torch.zeros(0)
    std = float(noise_multiplier) * float(clip_norm)
    for p, g in zip(params, grads):
        summed = torch.einsum("i,i...->...", factors.to(device=g.device, dtype=p.dtype), g.to(p.dtype)) if n \
            else torch.zeros_like(p)
        if std > 0:
            summed = summed + torch.normal(mean=0.0, std=std, size=tuple(p.shape), device=p.device,
                                           generator=generator, dtype=p.dtype)
        p.grad = (summed / expected_batch_size).view_as(p)
    return DPStepStats(losses=losses, per_sample_norms=norms.detach(), clip_factors=factors.detach())
