"""Adversarial compression ratio (ACR) by Greedy Coordinate Gradient prompt minimisation.

ACR(s) = |s| / |p*|, where p* is the shortest prompt whose greedy decoding reproduces the secret s
exactly: under teacher forcing every token of s is the arg-max of the model's next-token
distribution (which is the same as greedy generation emitting s token by token). **Lengths are
token lengths** (token ids of the run's tokenizer), not characters: the research writes |·| for
string length, but the search works on tokens and token ratios are comparable across secrets.

The prompt consists of free tokens only (no template, no begin-of-text token), followed directly
by the target tokens, as in the published ACR procedure. A search seed ξ draws the initial prompt
uniformly from the vocabulary and drives the candidate sampling; ACR = max over seeds of
|s| / |p*_ξ|.

**A failed search is censored, not measured.** If no seed finds a prompt at any length it tries, the
result has ``success`` False and **no ACR value** (``acr`` None). It carries an upper bound instead,
``upper_bound`` = |s| / (L + 1), where L is the longest prompt length the search tried (the shortest
such L over seeds): the schedule takes a failure at a length as ruling out every shorter length, so a
prompt that works — if one exists — has at least L + 1 tokens, and ACR ≤ |s| / (L + 1) (equivalently
ACR < |s| / L). That is the published procedure's |s| / max_length only when the schedule reaches
L = max_length − 1; with start 5, grow 5 and max_length 15 it tries 5 and 10 and stops (15 is never
tried), so the bound is |s| / 11, not |s| / 15 — lengths 11–14 were never searched. The bound is not
capped at 1: a bound above 1 means the search could not rule out compression. Like every ACR here it
is relative to GCG at the given budget, a heuristic: a prompt GCG misses may still exist.

**GCG step** (Zou et al., 2023): one forward/backward pass gives the gradient of the target loss
with respect to the one-hot prompt tokens; the ``top_k`` tokens with the most negative gradient are
the candidates of each position; ``candidates`` prompts, each with one random position swapped to a
random one of its top-k tokens, are scored in one batched forward pass; the best is kept.

**Length schedule** (the published *MiniPrompt* rule): start at ``start_length``; after a success
shrink by one, after a failure grow by ``grow`` (and give the next length ``step_growth`` × the
steps); stop when the next length reaches the shortest success or falls to the longest failure.
``max_length`` is the initial "shortest success" bound, so (as published) lengths ≥ ``max_length``
are never tried (except ``start_length`` itself when it equals ``max_length``); the lengths a failed
search tried are in each seed's ``lengths_tried``, and its bound (above) follows from the longest of them.

Two strategies run this same search:

- ``published`` — the procedure as published: a random restart at every length, a separate
  forward pass per step to check the kept prompt for success, every seed searched from scratch,
  a fixed number of steps per length.
- ``fast`` (the default) — the seeds search as one population (:mod:`empriv.score.acr_fast`): one shared length
  schedule, the seeds' GCG steps batched together with ``fast_candidates`` swaps each (drawn from the ``fast_top_k``
  best tokens of their position), a length won the moment any seed's candidate reproduces the target (read off the
  candidate batch, no extra pass), warm starts from the best one-token deletions of the winning prompt, lengths
  abandoned after ``patience`` steps without a real improvement, the seeds raced at a length (half of them, those with
  the lowest loss, go on every ``race_steps`` steps), a length given up after ``steps`` steps of a ``give_up`` rung
  when no candidate came within its ``wrong`` target tokens, the candidate with the fewest wrong target tokens kept at
  each step (``keep``), the gradient weighted toward the target tokens still wrong (``wrong_weight``), a walk down to
  shorter prompts that goes on past ``skip`` failures in a row (GCG's success is not monotone in the length), an
  exhaustive pass over the vocabulary at length 1, duplicate candidates scored once.

Passes are counted (forward calls, backward calls, sequences scored) so costs can be compared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from empriv.config import ACRParams, ACRSearchParams, parse_section
from empriv.score.gcg import (  # noqa: F401  (re-exported: the search's names, as before)
    PassCount,
    SEARCH_FIELDS,
    _LengthSearch,
    _Member,
    _Objective,
    _accepts_logits_to_keep,
    _candidates,
    _random_prompt,
    _seed_of,
)

log = logging.getLogger("empriv.acr")


@dataclass
class ACRResult:
    """One target's search. A success has ``acr`` = |s| / |p*| and no bound; a failure has ``acr`` None (nothing
    was measured) and ``upper_bound`` = |s| / (L + 1), L the longest prompt length tried (see the module docstring)."""

    acr: float | None  # |s| / |p*| on a success; None when no prompt was found
    success: bool
    target_tokens: int
    prompt_tokens: int | None  # shortest successful prompt over seeds (None: no success)
    per_seed: list[dict] = field(default_factory=list)
    counts: PassCount = field(default_factory=PassCount)
    wall_time_s: float = 0.0
    max_length: int | None = None  # the length bound the search used (lowered where the window is short)
    upper_bound: float | None = None  # failures only: ACR ≤ |s| / (longest length tried + 1)
    longest_tried: int | None = None  # failures only: the L of the bound (shortest over seeds of each one's longest)

    def record(self) -> dict:
        """Numbers only (never token ids or text: a prompt that elicits a secret is itself sensitive)."""
        return {"acr": self.acr, "acr_success": self.success, "acr_upper_bound": self.upper_bound,
                "acr_longest_tried": self.longest_tried, "acr_target_tokens": self.target_tokens,
                "acr_prompt_tokens": self.prompt_tokens, "acr_max_length": self.max_length, "acr_per_seed": self.per_seed,
                "acr_forward_calls": self.counts.forward_calls, "acr_backward_calls": self.counts.backward_calls,
                "acr_sequences": self.counts.sequences, "acr_wall_time_s": self.wall_time_s}


def _seed_schedule(obj: _Objective, s: ACRSearchParams, seed: int, key: str):
    """The MiniPrompt length schedule of one search seed, as a generator: it yields the GCG searches it needs
    (a ``_Member``) and is sent back each one's (success, prompt, loss); it returns the seed's record."""
    gen = torch.Generator().manual_seed(_seed_of(seed, key))
    vocab = obj.embed.shape[0]
    running_max, running_min = s.max_length, 0  # shortest success known (exclusive bound), longest failure known
    n, steps = s.start_length, s.steps
    best_success: int | None = None
    tried = []
    while True:
        obj.check_length(n)
        ok, prompt, _ = yield _Member(_random_prompt(n, vocab, gen, obj.device), steps, gen)
        tried.append((n, ok))
        if ok:
            best_success = running_max = n
            new_n = n - 1
        else:
            running_min = n
            new_n = n + s.grow
            steps = int(steps * s.step_growth)
        if new_n >= running_max or new_n <= running_min or new_n > s.max_length:
            break
        n = new_n
    return {"seed": seed, "prompt_tokens": best_success, "lengths_tried": [f"{m}{'+' if ok else '-'}" for m, ok in tried],
            "longest_tried": max(m for m, _ in tried)}


def _search_seeds(obj: _Objective, s: ACRSearchParams, key: str, bar) -> list[dict]:
    """Run every seed's schedule. Published: one seed after the other, each a full MiniPrompt search of its own.
    Fast: the seeds as one population (:func:`empriv.score.acr_fast.search_population`)."""
    search = _LengthSearch(obj, s, bar)
    if s.strategy == "fast":
        from empriv.score.acr_fast import search_population

        return search_population(obj, s, key, search)
    records: dict[int, dict] = {}
    for seed in s.seeds:
        schedule = _seed_schedule(obj, s, seed, key)
        member = schedule.send(None)
        try:
            while True:
                member = schedule.send(search.run_batch([member])[0])
        except StopIteration as done:
            records[seed] = done.value
    return [records[seed] for seed in s.seeds]


def adversarial_compression_ratio(model, target_ids: Sequence[int], settings: ACRSearchParams = ACRSearchParams(),
                                  key: str = "", progress: bool = False) -> ACRResult:
    """ACR of one target (token ids) under ``model``; ``key`` (e.g. the secret id) seeds the search.

    On a success, ``acr`` = |s| / |p*| with p* the shortest prompt any seed found. When no seed finds a prompt,
    nothing is measured: ``acr`` is None, ``success`` False, and ``upper_bound`` = |s| / (L + 1) with L the
    longest length the search tried (``longest_tried``; the shortest such L over seeds): ACR ≤ that bound
    provided, as the schedule assumes, a failure at L also rules out every shorter length. L is
    ``max_length`` − 1 only when the schedule reaches it (start_length + k·grow = max_length − 1); otherwise
    lengths between L and ``max_length`` were never tried and the bound is looser than |s| / max_length.

    Where prompt + target cannot fit the model's positions, the length bound becomes window − |s|
    (``max_length`` in the result says which bound was used); a target that leaves no more than
    ``start_length`` positions raises ``ValueError``.
    """
    if len(target_ids) == 0:
        raise ValueError("ACR needs a non-empty target")
    t0 = time.time()
    counts = PassCount()
    was_training = model.training
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    obj = _Objective(model, target_ids, counts)
    if obj.limit is not None and settings.max_length + len(target_ids) > obj.limit:
        # the model's window bounds the prompt: search below window − |s| instead (recorded)
        room = obj.limit - len(target_ids)
        if room <= settings.start_length:
            raise ValueError(f"a {len(target_ids)}-token target leaves {max(room, 0)} of the model's {obj.limit} positions "
                             f"for the prompt, not more than start_length {settings.start_length}: no ACR search fits")
        settings = settings.model_copy(update={"max_length": room})
    bar = None
    if progress:
        from empriv.infra.progress import progress as progress_of

        # unknown total: a bar on a terminal, else a log line every 30 s of a long search
        bar = progress_of(desc=f"ACR {key}", unit="steps", leave=False, logger=log)
    try:
        per_seed = _search_seeds(obj, settings, key, bar)
    finally:
        if bar is not None:
            bar.close()
        model.train(was_training)
    found = [r["prompt_tokens"] for r in per_seed if r["prompt_tokens"] is not None]
    best = min(found) if found else None  # ACR = max over seeds of |s| / |p*_seed|
    n = len(target_ids)
    if best is not None:
        acr, bound, longest = n / best, None, None
    else:  # censored: no value, only the bound the lengths tried support
        longest = min(r["longest_tried"] for r in per_seed)
        acr, bound = None, n / (longest + 1)
    return ACRResult(acr=acr, success=best is not None, target_tokens=n, prompt_tokens=best, per_seed=per_seed,
                     counts=counts, wall_time_s=time.time() - t0, max_length=settings.max_length, upper_bound=bound,
                     longest_tried=longest)


def acr_target_ids(secret: dict, tokenizer) -> list[int]:
    """The target of a secret's search: its ids as trained on (``context_token_ids`` of the secrets stage: a BPE
    tokenizer merges the space before a secret into its first word), else the tokens of its text alone."""
    ids = secret.get("context_token_ids")
    return list(ids) if ids else tokenizer.encode(secret["text"])


def acr_of_secrets(model, tokenizer, secrets: Sequence[dict], settings: ACRSearchParams, progress: bool = True) -> dict[str, dict]:
    """ACR record per secret id (the whole secret, as trained on, is the target: :func:`acr_target_ids`), one model
    loaded once.

    A searched secret's record has ``acr_success``; a failure has ``acr`` None and ``acr_upper_bound``. A secret
    too long for the model's window is not searched: ``{"acr": None, "acr_skipped": …}`` (no ``acr_success``)."""
    from empriv.infra.progress import progress as progress_of

    out = {}
    chosen = progress_of(secrets, desc="ACR search", unit="secrets", logger=log) if progress else secrets
    for s in chosen:
        try:
            res = adversarial_compression_ratio(model, acr_target_ids(s, tokenizer), settings, key=s["id"], progress=progress)
        except ValueError as err:
            if "no ACR search fits" not in str(err):
                raise
            log.warning("ACR %s skipped: %s", s["id"], err)
            out[s["id"]] = {"acr": None, "acr_skipped": "too long for the model's window"}
            continue
        out[s["id"]] = res.record()
        what = (f"{res.acr:.3f} (a {res.prompt_tokens}-token prompt)" if res.success else
                f"no prompt of ≤ {res.longest_tried} tokens found (ACR ≤ {res.upper_bound:.3f})")
        log.info("ACR %s: %s, %d target tokens, %d passes, %.1f s", s["id"], what, res.target_tokens,
                 res.counts.passes, res.wall_time_s)
    return out


def settings_from_params(p: ACRParams | ACRSearchParams | dict) -> ACRSearchParams:
    """The search settings of a ``score.acr`` section (an :class:`~empriv.config.ACRParams`, or a mapping validated as
    one: a key it lacks gets the documented default, the only default there is; an invalid value raises
    :class:`~empriv.config.ConfigError` naming the ``score.acr`` key): the search keys alone, an
    :class:`~empriv.config.ACRSearchParams`."""
    if type(p) is ACRSearchParams:
        return p
    return parse_section(ACRParams, p, "score.acr").search


__all__ = ["ACRSearchParams", "ACRResult", "PassCount", "adversarial_compression_ratio", "acr_of_secrets",
           "settings_from_params"]
