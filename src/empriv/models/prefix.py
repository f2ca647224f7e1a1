"""Prefix tuning's modules: the prefix-aware attention wrapper, :class:`PrefixEncoder` (the trainable keys and
values) and :class:`PrefixTunedLM` (a frozen base with a prefix in its attention). Prepared by
:func:`empriv.models.adaptations.prepare_adaptation` (method ``prefix``).

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
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from torch import nn

from empriv.models.virtual_tokens import FrozenBaseLM, VirtualTokens

#: ``config.model_type`` values whose attention modules carry ``layer_idx`` and dispatch through
#: transformers' AttentionInterface with the forward's keyword arguments (checked by the tests for both).
PREFIX_ARCHITECTURES = ("gpt2", "llama")

_PREFIX_KWARG = "empriv_prefix"
_ATTENTION_PREFIX = "empriv_prefix_"


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


class PrefixTunedLM(FrozenBaseLM):
    """A frozen causal LM (``base``) with a trainable :class:`PrefixEncoder` (``prefix``) in its attention.

    ``forward`` takes the base's arguments (and returns its output: logits over the real tokens) plus
    ``prefix_attention_mask`` ([P] or [B, P], 1 = the prefix position may be attended; default all 1).
    """

    def __init__(self, base: nn.Module, prefix: PrefixEncoder):
        super().__init__(base)
        self.prefix = prefix

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
