"""Language-model helpers shared by training and scoring: encoding, per-sample NLL, sampling.

Every sequence starts with the end-of-text token (as GPT-2 does between documents) and is cut to
``seq_len`` tokens; shorter sequences are right-padded and the padding carries no loss. With right
padding and causal attention the padding cannot influence real tokens, so no attention mask is
needed (which keeps per-sample-gradient hooks simple).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def encode_fixed(token_lists: Sequence[Sequence[int]], eos_id: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[EOS] + tokens`` cut/padded to ``seq_len`` → (input_ids [N, L], loss_mask [N, L]).

    ``loss_mask[i, t]`` is 1 where token t of sample i is a real token to be predicted (t ≥ 1).
    """
    n = len(token_lists)
    ids = torch.full((n, seq_len), eos_id, dtype=torch.long)
    mask = torch.zeros((n, seq_len), dtype=torch.float32)
    for i, toks in enumerate(token_lists):
        seq = [eos_id, *toks][:seq_len]
        ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[i, 1 : len(seq)] = 1.0
    return ids, mask


def position_ids_like(ids: torch.Tensor) -> torch.Tensor:
    return torch.arange(ids.shape[1], device=ids.device).unsqueeze(0).expand_as(ids)


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def token_nll(model, ids: torch.Tensor) -> torch.Tensor:
    """NLL of every next token: [N, L-1] (entry t is −log p(ids[:, t+1] | ids[:, :t+1]))."""
    ids = ids.to(model_device(model))
    logits = model(input_ids=ids, position_ids=position_ids_like(ids), use_cache=False).logits
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1), reduction="none"
    ).view(ids.shape[0], -1)


def per_sample_mean_nll(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean NLL over each sample's real tokens: [N]. This is each example's loss ℓ_i in DP-SGD.

    Computed from the logits by :func:`empriv.models.kernels.weighted_token_nll` (one log-sum-exp pass, a fused
    backward): the values of ``(token_nll · mask).sum / mask.sum`` to float rounding, in ~half the time."""
    from empriv.models.kernels import weighted_token_nll

    ids = ids.to(model_device(model))
    logits = model(input_ids=ids, position_ids=position_ids_like(ids), use_cache=False).logits.float()
    m = mask.to(logits.device, logits.dtype)
    weights = torch.zeros_like(m)
    weights[:, :-1] = m[:, 1:] / m[:, 1:].sum(1, keepdim=True).clamp(min=1.0)
    # position t predicts token t + 1; the last position predicts nothing (weight 0, its target a dummy id)
    return weighted_token_nll(logits, torch.roll(ids, -1, 1), weights)


@torch.no_grad()
def mean_token_nll(model, ids: torch.Tensor, mask: torch.Tensor, batch_size: int = 64) -> float:
    """Mean NLL per real token over a whole split (utility; lower is better)."""
    total, count = 0.0, 0.0
    for start in range(0, ids.shape[0], batch_size):
        b_ids, b_mask = ids[start : start + batch_size], mask[start : start + batch_size]
        nll = token_nll(model, b_ids)
        total += float((nll * b_mask[:, 1:].to(nll.device)).sum())
        count += float(b_mask[:, 1:].sum())
    return total / max(count, 1.0)


def check_fits(model, length: int) -> None:
    """A sequence longer than the model's position table cannot be scored: say so plainly."""
    limit = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
    if limit is not None and length > limit:
        raise ValueError(f"a sequence of {length} tokens exceeds the model's {limit} positions (base.seq_len)")


@torch.no_grad()
def conditional_nll(model, prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], batch_size: int = 64) -> list[float]:
    """Total NLL (nats) of each ``targets[i]`` given ``prompts[i]``; pads on the right, batched."""
    out: list[float] = []
    for start in range(0, len(prompts), batch_size):
        ps, ts = prompts[start : start + batch_size], targets[start : start + batch_size]
        seqs = [list(p) + list(t) for p, t in zip(ps, ts)]
        width = max(len(s) for s in seqs)
        check_fits(model, width)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width))
        for i, (p, s) in enumerate(zip(ps, seqs)):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, len(p) : len(s)] = 1.0
        nll = token_nll(model, ids)
        out.extend((nll * mask[:, 1:].to(nll.device)).sum(1).tolist())
    return out


@torch.no_grad()
def sample_continuations(
    model,
    prompt: Sequence[int],
    num_samples: int,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int = 50,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Stochastic decoding (temperature, top-k, nucleus top-p) of ``num_samples`` continuations.

    Implements the sampling rule of Hugging Face's defaults used by the research
    (temperature 1.0, top_k 50, top_p 1.0) with an explicit generator, so results are seeded.
    """
    check_fits(model, len(prompt) + max_new_tokens)
    device = model_device(model)
    ids = torch.tensor([list(prompt)] * num_samples, dtype=torch.long, device=device)
    past = None
    new: list[torch.Tensor] = []
    step_input = ids
    offset = 0
    for _ in range(max_new_tokens):
        pos = torch.arange(offset, offset + step_input.shape[1], device=device).unsqueeze(0).expand_as(step_input)
        out = model(input_ids=step_input, position_ids=pos, past_key_values=past, use_cache=True)
        past = out.past_key_values
        offset += step_input.shape[1]
        logits = out.logits[:, -1, :].float() / temperature
        if 0 < top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            drop = cum - sorted_logits.softmax(-1) > top_p  # keep the smallest prefix with mass ≥ top_p
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
        probs = logits.softmax(-1)
        # The generator lives on the CPU (seeded draws identical on every device): sample there.
        nxt = torch.multinomial(probs.cpu(), 1, generator=generator).to(device)
        new.append(nxt)
        step_input = nxt
    if not new:
        return [[] for _ in range(num_samples)]
    return torch.cat(new, dim=1).cpu().tolist()
