"""Prompt tuning's module: :class:`PromptTunedLM`, a frozen base with P trainable input embeddings (a soft prompt,
Lester et al. 2021) before every sequence. Prepared by :func:`empriv.models.adaptations.prepare_adaptation`
(method ``prompt``)."""

from __future__ import annotations

import torch
from torch import nn

from empriv.models.virtual_tokens import FrozenBaseLM, VirtualTokens


class PromptTunedLM(FrozenBaseLM):
    """A frozen causal LM (``base``) with P trainable input embeddings (``prompt``) before every sequence.

    The virtual tokens sit at positions 0..P−1; a caller's ``position_ids`` (default 0..L−1) are those
    of the real tokens and are shifted by P; a 2-D ``attention_mask`` over the real tokens is extended
    by P ones. Logits are returned for the real tokens only ([B, L, V]). With a KV cache the prompt is
    prepended on the first call only (the cache then holds it).
    """

    def __init__(self, base: nn.Module, prompt: VirtualTokens):
        super().__init__(base)
        self.prompt = prompt

    @property
    def n_virtual(self) -> int:
        return self.prompt.weight.shape[0]

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
