"""The GCG machinery of the ACR search, shared by both strategies (:mod:`empriv.score.acr` runs the published
procedure, :mod:`empriv.score.acr_fast` the fast one): the objective and its candidate swaps,
one length's search state, the model-pass counts, random prompts and per-secret seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from empriv.config import ACRSearchParams

SEARCH_FIELDS = tuple(ACRSearchParams.model_fields)  # the search's settings: the config model itself


@dataclass
class PassCount:
    forward_calls: int = 0
    backward_calls: int = 0
    sequences: int = 0  # rows pushed through the model (a candidate batch of 100 counts 100)

    @property
    def passes(self) -> int:
        """Model calls: batched forward calls + backward calls (a gradient step counts 2)."""
        return self.forward_calls + self.backward_calls

    def add(self, other: "PassCount") -> None:
        self.forward_calls += other.forward_calls
        self.backward_calls += other.backward_calls
        self.sequences += other.sequences

class _Objective:
    """The target loss of prompts for one (model, target) pair, counting every model call."""

    def __init__(self, model, target: Sequence[int], counts: PassCount):
        self.model = model
        self.counts = counts
        self.embed = model.get_input_embeddings().weight
        self.device = self.embed.device
        self.target = torch.tensor(list(target), dtype=torch.long, device=self.device)
        self.n = len(target)
        limit = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
        self.limit = limit
        # Only the n positions that predict the target need the output layer (its vocabulary-sized matmul is
        # most of a small model's cost): transformers is given those positions, so the logits come back as a
        # contiguous [B, n, V] (a slice of n + 1 kept positions would be copied again by every reshape after it).
        self.keep = _accepts_logits_to_keep(model)

    def _target_logits(self, L: int, **inputs) -> torch.Tensor:
        """Logits [B, n, V] at the positions L-1 … L+n-2 (each predicts one target token)."""
        if self.keep:
            positions = torch.arange(L - 1, L - 1 + self.n, device=self.device)
            return self.model(**inputs, use_cache=False, logits_to_keep=positions).logits
        return self.model(**inputs, use_cache=False).logits[:, L - 1 : L - 1 + self.n]

    def check_length(self, prompt_len: int) -> None:
        if self.limit is not None and prompt_len + self.n > self.limit:
            raise ValueError(f"an ACR prompt of {prompt_len} tokens plus the {self.n}-token target exceeds the model's "
                             f"{self.limit} positions: lower score.acr.max_length or score longer-window models")

    def _losses(self, logits: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the target per row ([B, n, V] → [B]). Over [B·n, V] rows: the same values as
        the class-dimension-1 form on [B, V, n] up to float rounding (~1e-6), ~7× faster on the CPU (contiguous
        rows; the transposed layout made this the largest single cost of a tiny model's ACR search)."""
        return self._token_losses(logits).mean(1)

    def _token_losses(self, logits: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of each target token ([B, n, V] → [B, n])."""
        B, n, V = logits.shape
        return F.cross_entropy(logits.reshape(B * n, V).float(), self.target.repeat(B), reduction="none").view(B, n)

    def evaluate(self, prompts: torch.Tensor, batch: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss [B], exact greedy match [B]) of prompts [B, L]."""
        losses, wrong = self.evaluate_wrong(prompts, batch)
        return losses, wrong == 0

    @torch.no_grad()
    def evaluate_wrong(self, prompts: torch.Tensor, batch: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss [B], wrong [B]) of prompts [B, L]: ``wrong`` counts the target tokens whose greedy (arg-max)
        prediction under teacher forcing is not the target token — 0 is an exact match."""
        L = prompts.shape[1]
        losses, wrong = [], []
        for start in range(0, prompts.shape[0], batch):
            p = prompts[start : start + batch]
            ids = torch.cat([p, self.target.expand(p.shape[0], -1)], dim=1)
            logits = self._target_logits(L, input_ids=ids)
            self.counts.forward_calls += 1
            self.counts.sequences += p.shape[0]
            losses.append(self._losses(logits))
            wrong.append((greedy_tokens(logits) != self.target).sum(1))
        return torch.cat(losses), torch.cat(wrong)

    def gradients(self, prompts: torch.Tensor, wrong_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(∂loss/∂one-hot [B, L, V], loss [B], exact match [B]) at prompts [B, L]: one forward and one
        backward call for the whole batch (rows do not interact, so each row's gradient is its own).

        With ``wrong_weight`` w > 0 the gradient is that of a weighted mean of the target tokens' cross-entropies,
        where a token the prompt gets wrong (greedy arg-max under teacher forcing) weighs 1 + w and the others 1; the
        loss returned is the plain mean either way."""
        B, L = prompts.shape
        one_hot = F.one_hot(prompts, self.embed.shape[0]).to(self.embed.dtype).requires_grad_(True)
        x = torch.cat([one_hot @ self.embed, self.embed[self.target].detach().expand(B, -1, -1)], dim=1)
        logits = self._target_logits(L, inputs_embeds=x)
        hits = greedy_tokens(logits.detach()) == self.target
        if wrong_weight:
            per_token = self._token_losses(logits)
            weights = 1.0 + wrong_weight * (~hits).to(per_token.dtype)
            losses = per_token.mean(1)
            (grad,) = torch.autograd.grad(((per_token * weights).sum(1) / weights.sum(1)).sum(), one_hot)
        else:
            losses = self._losses(logits)
            (grad,) = torch.autograd.grad(losses.sum(), one_hot)
        self.counts.forward_calls += 1
        self.counts.backward_calls += 1
        self.counts.sequences += B
        return grad, losses.detach(), hits.all(1)

def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """The arg-max over the last dimension, the same index as ``argmax(-1)`` (the first maximum wins a tie; NaN
    counts as the maximum), through ``max(-1)``: about half the CPU time of torch's ``argmax`` at the search's
    [B, n, vocabulary] logits, where the arg-max was the largest single operation of a tiny model's ACR search."""
    return logits.max(-1).indices


def _accepts_logits_to_keep(model) -> bool:
    import inspect

    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False

def _candidates(prompt: torch.Tensor, grad: torch.Tensor, top_k: int, n: int, gen: torch.Generator,
                dedupe: bool) -> torch.Tensor:
    """``n`` single-token swaps of ``prompt``: position uniform, token uniform among the position's top-k."""
    L, V = grad.shape
    k = min(top_k, V)
    top = (-grad).topk(k, dim=1).indices.cpu()  # [L, k]
    pos = torch.randint(0, L, (n,), generator=gen)
    tok = top[pos, torch.randint(0, k, (n,), generator=gen)]
    cands = prompt.cpu().repeat(n, 1)
    cands[torch.arange(n), pos] = tok
    if dedupe:
        cands = torch.unique(cands, dim=0)  # sorted, so order no longer depends on sampling order
        cands = cands[(cands != prompt.cpu()).any(1)]
    return cands.to(prompt.device)

@dataclass
class _Member:
    """One search seed's GCG at one prompt length (state of a batched length search)."""

    prompt: torch.Tensor
    steps: int
    gen: torch.Generator
    best_prompt: torch.Tensor | None = None
    best_loss: float = math.inf
    loss_at_reset: float = math.inf
    since_best: int = 0
    step: int = 0
    result: tuple[bool, torch.Tensor, float] | None = None
    candidates: int | None = None  # swaps scored per step (None: settings.candidates)
    fewest_wrong: int | None = None  # fewest wrong target tokens of any candidate scored so far (fast only)

class _LengthSearch:
    """GCG at one prompt length for one or several seeds at once; each gets (success, best prompt, best loss).

    Fast strategy: the seeds searching the same length share one gradient call (a batch of prompts) and one
    candidate forward call (every seed's candidates together). Published strategy: one seed per call."""

    def __init__(self, obj: _Objective, s: ACRSearchParams, bar=None):
        self.obj, self.s, self.bar = obj, s, bar

    def run(self, prompt: torch.Tensor, steps: int, gen: torch.Generator) -> tuple[bool, torch.Tensor, float]:
        return self.run_batch([_Member(prompt, steps, gen)])[0]

    def run_batch(self, members: list[_Member], first_success_stops: bool = False, race_steps: int | None = None,
                  give_up: Sequence[Sequence[int]] = ()) -> list[tuple[bool, torch.Tensor, float]]:
        """Every member's (success, prompt, loss); with ``first_success_stops`` the others end (unsuccessful, with
        their best so far) as soon as one member succeeds. With ``race_steps``, the members still searching are
        halved every ``race_steps`` steps (:meth:`_race`). For each (k, w) of ``give_up``, every member ends after
        k steps (unsuccessful) when no candidate any member scored so far got fewer than w target tokens wrong."""
        give_up = dict(give_up)
        fast = self.s.strategy == "fast"
        top_k = (self.s.fast_top_k or self.s.top_k) if fast else self.s.top_k
        active = [m for m in members if m.steps > 0]
        for m in members:
            if m.steps <= 0:
                m.result = (False, m.prompt, math.inf)
        while active:
            grads, glosses, gmatches = self.obj.gradients(torch.stack([m.prompt for m in active]),
                                                          self.s.wrong_weight if fast else 0.0)
            batch: list[tuple[_Member, torch.Tensor]] = []
            for j, m in enumerate(active):
                if bool(gmatches[j]):  # the current prompt already works (a warm start)
                    m.result = (True, m.prompt, float(glosses[j]))
                    continue
                if m.best_prompt is None:  # the start prompt; later this prompt is the last kept candidate
                    m.best_prompt, m.best_loss, m.loss_at_reset = m.prompt.clone(), float(glosses[j]), float(glosses[j])
                cands = _candidates(m.prompt, grads[j], top_k, m.candidates or self.s.candidates, m.gen, dedupe=fast)
                if cands.shape[0] == 0:
                    m.result = (False, m.best_prompt, m.best_loss)
                    continue
                batch.append((m, cands))
            if not batch or (first_success_stops and any(m.result is not None and m.result[0] for m in members)):
                break
            losses, wrong = self.obj.evaluate_wrong(torch.cat([c for _, c in batch]))
            matches = wrong == 0
            still, start = [], 0
            for m, cands in batch:
                sl = slice(start, start + cands.shape[0])
                start += cands.shape[0]
                fewest = int(wrong[sl].min())
                m.fewest_wrong = fewest if m.fewest_wrong is None else min(m.fewest_wrong, fewest)
                if self._step(m, cands, losses[sl], matches[sl], fast, wrong[sl]):
                    still.append(m)
            active = still
            if active and active[0].step in give_up and \
                    min(m.fewest_wrong for m in members if m.fewest_wrong is not None) >= give_up[active[0].step]:
                for m in active:  # nothing came near the target: this length is given up
                    m.result = (False, m.best_prompt, m.best_loss)
                break
            if race_steps and len(active) > 1 and active[0].step % race_steps == 0:
                active = self._race(active)
            if first_success_stops and any(m.result is not None and m.result[0] for m in members):
                break
        for m in members:
            if m.result is None:  # cut short: another member succeeded
                m.result = (False, m.best_prompt if m.best_prompt is not None else m.prompt, m.best_loss)
        return [m.result for m in members]

    @staticmethod
    def _race(active: list[_Member]) -> list[_Member]:
        """Successive halving: the members with the lowest best loss so far go on (half of them, rounded up; ties
        by member order); the others end here, unsuccessful, with their best prompt."""
        keep = (len(active) + 1) // 2
        ranked = sorted(range(len(active)), key=lambda j: active[j].best_loss)[:keep]
        for j, m in enumerate(active):
            if j not in ranked:
                m.result = (False, m.best_prompt, m.best_loss)
        return [m for j, m in enumerate(active) if j in ranked]

    def _step(self, m: _Member, cands, losses, matches, fast: bool, wrong=None) -> bool:
        """Apply one GCG step's candidate scores to ``m``; False once its search at this length is over. The
        prompt kept is the candidate with the lowest loss, or (fast, ``keep: fewest_wrong``) the one with the fewest
        wrong target tokens, ties by loss."""
        if fast and bool(matches.any()):  # success read off the batch itself
            i = int(torch.where(matches, losses, torch.full_like(losses, math.inf)).argmin())
            m.result = (True, cands[i], float(losses[i]))
            return False
        if fast and self.s.keep == "fewest_wrong" and wrong is not None:
            i = int(torch.where(wrong == wrong.min(), losses, torch.full_like(losses, math.inf)).argmin())
        else:
            i = int(losses.argmin())
        m.prompt = cands[i]  # GCG keeps the batch's best even when it is worse than the current prompt
        if not fast:  # published: a separate pass checks the kept prompt
            l1, m1 = self.obj.evaluate(m.prompt.unsqueeze(0))
            if bool(m1[0]):
                m.result = (True, m.prompt, float(l1[0]))
                return False
        new_loss = float(losses[i])
        m.since_best += 1
        if new_loss < m.best_loss - 1e-9:
            m.best_prompt, m.best_loss = m.prompt.clone(), new_loss
            # patience restarts only on a real improvement: by patience_tolerance of the loss at the last restart
            if new_loss < m.loss_at_reset * (1.0 - self.s.patience_tolerance) - 1e-9:
                m.loss_at_reset, m.since_best = new_loss, 0
        m.step += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(len=m.prompt.shape[0], loss=f"{m.best_loss:.3f}", refresh=False)
        if m.step >= m.steps or (fast and self.s.patience is not None and m.since_best >= self.s.patience):
            m.result = (False, m.best_prompt, m.best_loss)
            return False
        return True

def _random_prompt(length: int, vocab: int, gen: torch.Generator, device) -> torch.Tensor:
    return torch.randint(0, vocab, (length,), generator=gen).to(device)

def _seed_of(seed: int, key: str) -> int:
    import zlib

    return (seed * 1_000_003 + zlib.crc32(key.encode())) % (2**63)
