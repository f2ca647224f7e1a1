"""The ``fast`` ACR strategy: the search seeds as one population over one MiniPrompt length schedule.

The published procedure runs each search seed's schedule in full, from random tokens at every length, and ACR is
the maximum over seeds. Most of that cost is spent where nothing is found: a length that fails runs its whole step
budget, once per seed, and the last failure (one token below the shortest success) is paid by every seed even when
another seed already knows a shorter prompt. The fast strategy keeps the schedule's rule and its stopping
criteria (start at ``start_length``; −1 after a success, +``grow`` and × ``step_growth`` steps after a failure; stop
when the next length reaches the shortest success or falls to the longest failure, or passes ``max_length``), and
changes how a length is searched:

1. **one schedule for all seeds**: every seed searches the same length at the same time, its GCG step batched with
   the others' (one gradient call for the seeds' prompts, one forward call for all their candidates). A length is
   a success the moment any seed's candidate reproduces the target, and the other seeds stop there: a prompt of
   that length is known, so their search could not raise ACR. A length fails when every seed has given up on it;
2. **``fast_candidates`` swaps per seed and step, narrower**: each swap draws its token from the ``fast_top_k``
   tokens of its position with the most negative gradient (default 64 where the published budget has 250: on the
   default's 2,048-token vocabulary the published top 250 is an eighth of it), and a seed scores ``fast_candidates``
   swaps a step (default 48 where the published budget has 100): smaller batches of better swaps, more steps. With
   the draw from 250, 48 swaps lost a 25-token prompt and 32 a 3-token one that the published procedure finds; from
   64, 48 keeps both (benchmarks/acr.py, docs/scoring.md "ACR cost");
3. **success read off the candidate batch** (every candidate's arg-maxes come with its loss): no extra pass per
   step;
4. **warm starts**: after a success at L, the L prompts with one token deleted are scored in one pass; the seeds
   start L − 1 from the best distinct ones (a deletion that already reproduces the target makes L − 1 a success at
   the cost of that pass). After a failure each seed keeps its best prompt, with new random tokens in front;
5. **patience**: a length is abandoned by a seed after ``patience`` steps in which its best loss did not improve by
   ``patience_tolerance`` (relative) since the patience last restarted;
6. **the seeds race** (``race_steps``, several seeds only): every ``race_steps`` steps at a length, the half of the
   seeds still searching it with the lowest best loss (rounded up: 3 → 2 → 1) go on and the others stop there, with
   their best prompt for the next length (successive halving). A length that fails — most of the cost — is then paid
   by about one seed past the first rungs instead of three; a success by any seed still in the race wins the length;
7. **hopeless lengths are given up** (``give_up``, rungs of [steps, wrong]): after ``steps`` steps at a length, it
   fails at once when no candidate scored there by any seed got fewer than ``wrong`` target tokens wrong (greedy
   arg-max under teacher forcing; a success has 0). On the default's memorised models every length that was won had
   come within 3 tokens after 10 steps and within 1 after 40, while about half of the lengths that failed for
   every seed were 4–11 tokens away after 10 (docs/scoring.md, "ACR cost");
8. **the step aims at exact reproduction** (``keep``, ``wrong_weight``): a success needs every target token right
   under greedy decoding, while GCG's mean loss can keep falling on tokens already right. Each step keeps the
   candidate with the fewest wrong target tokens (ties by loss; the counts come with the candidate pass), and the
   gradient that proposes the next swaps weighs each still-wrong target token 1 + ``wrong_weight`` against 1 (the
   candidates are still scored, and the race and patience still read, the plain mean loss). Either rule alone
   lost prompts in the benchmark; together, on the default's ε = ∞ model, a 21-token secret whose searches sat one
   token wrong from length 15 to 25 gets 24-token prompts in 2 of 3 draws (the published procedure: 25 in 2 of 3;
   benchmarks/acr.py, docs/scoring.md "ACR cost");
9. **the walk down goes on past a failure** (``skip``): MiniPrompt ends the walk down at the first failure below a
   success, reading it as ruling out every shorter length. GCG's success is not monotone in the prompt length,
   though: on the default's ε = 64 model, cold searches of a 22-token secret (4 random starts, 240 steps each)
   reproduced it at 12 tokens in 4 of 4, at 11 in none, at 10 in 2, at 9 in 4, at 8 in 1, at 7 in 3 and at 6 and 5 in
   none (``benchmarks/studies/acr_lengths.py``). With ``skip`` k the walk down ends at its (k + 1)-th failure in a row
   instead:
   after a failure at L below a success the seeds search L − 1, each from its own best prompt at L with its best
   one-token deletion. Lengths that failed before the first success are searched again when the walk reaches them
   (from these warm starts). A search that never succeeds is unchanged, and so is its bound;
10. **length 1 is searched exhaustively** when the vocabulary is no larger than that length's GCG budget (seeds ×
   steps × swaps): every one-token prompt is scored, so a one-token prompt is found if one exists, and a failure
   there is exact;
11. duplicate candidates (and the current prompt) are not scored again.

With one search seed (params.yaml's budget) the race never runs: such a search is the one without it; ``give_up``
applies to one seed too, and params.yaml sets it to [], ``keep`` to ``loss``, ``wrong_weight`` to 0 and ``skip`` to 0
(its budget is searched as before).

A success is always a prompt whose greedy continuation under teacher forcing is the target, checked on the model's
own arg-maxes; a length that fails stays a failure, and the bound of a failed search follows from the longest
length tried, as in :mod:`empriv.score.acr`. The per-seed records say which seed found which length
(``prompt_tokens`` None for a seed that never won one) and the lengths searched (``+`` a success, ``-`` a failure).
"""

from __future__ import annotations

import math

import torch

from empriv.config import ACRSearchParams
from empriv.score.gcg import _LengthSearch, _Member, _Objective, _random_prompt, _seed_of


def _deletions(obj: _Objective, prompt: torch.Tensor, k: int) -> list[torch.Tensor]:
    """Up to ``k`` distinct prompts with one token of ``prompt`` deleted, best first (one that reproduces the target
    first, then by loss); all deletions scored in one pass."""
    L = prompt.shape[0]
    keep = ~torch.eye(L, dtype=torch.bool, device=prompt.device)
    shorter = torch.unique(prompt.unsqueeze(0).expand(L, -1)[keep].view(L, L - 1), dim=0)
    losses, matches = obj.evaluate(shorter)
    order = torch.where(matches, torch.full_like(losses, -math.inf), losses).argsort()
    return [shorter[int(i)] for i in order[:k]]


def _exhaustive_first_token(obj: _Objective) -> tuple[bool, torch.Tensor, float]:
    """Every one-token prompt scored: (found, the best one — a reproducing one if any — its loss)."""
    prompts = torch.arange(obj.embed.shape[0], device=obj.device).unsqueeze(1)
    losses, matches = obj.evaluate(prompts)
    i = int(torch.where(matches, losses, torch.full_like(losses, math.inf)).argmin()) if bool(matches.any()) \
        else int(losses.argmin())
    return bool(matches[i]), prompts[i], float(losses[i])


def _skip_starts(obj: _Objective, bests: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """The starts of the length after a failure below a success: each seed's best prompt at the failed length with
    its best one-token deletion (one scoring pass per seed)."""
    return {seed: _deletions(obj, prompt, 1)[0].clone() for seed, prompt in bests.items()}


def search_population(obj: _Objective, s: ACRSearchParams, key: str, search: _LengthSearch) -> list[dict]:
    """The fast strategy's search: one length schedule, the seeds as its population; a record per seed."""
    seeds = list(s.seeds)
    gens = {seed: torch.Generator().manual_seed(_seed_of(seed, key)) for seed in seeds}
    vocab = obj.embed.shape[0]
    swaps = s.fast_candidates or s.candidates
    running_max, running_min = s.max_length, 0
    n, steps = s.start_length, s.steps
    starts = {seed: _random_prompt(n, vocab, gens[seed], obj.device) for seed in seeds}
    tried: list[tuple[int, bool]] = []
    found: dict[int, int] = {}  # seed → shortest length it won
    misses = 0  # failures in a row since the last success
    while True:
        obj.check_length(n)
        if n == 1 and vocab <= len(seeds) * steps * swaps:
            ok, prompt, _ = _exhaustive_first_token(obj)
            winner = seeds[0] if ok else None
            bests = {seed: prompt for seed in seeds}
        else:
            members = {seed: _Member(starts[seed], steps, gens[seed], candidates=swaps) for seed in seeds}
            results = dict(zip(seeds, search.run_batch(
                list(members.values()), first_success_stops=True, race_steps=s.race_steps,
                give_up=s.give_up)))
            winners = [seed for seed in seeds if results[seed][0]]
            winner = min(winners, key=lambda seed: results[seed][2]) if winners else None
            ok, prompt = winner is not None, results[winner][1] if winners else None
            bests = {seed: results[seed][1] for seed in seeds}
        tried.append((n, ok))
        if ok:
            found.setdefault(winner, n)
            found[winner] = min(found[winner], n)
            running_max, new_n, misses = n, n - 1, 0
            if s.skip:  # the walk down ends on failures in a row only, not at an earlier failure's length
                running_min = 0
            if new_n >= 1 and new_n > running_min:
                warm = _deletions(obj, prompt, len(seeds))
                starts = {seed: warm[j % len(warm)].clone() for j, seed in enumerate(seeds)}
        elif found and misses < s.skip and n > 1:  # a failure below a success: on to one token shorter
            misses, new_n = misses + 1, n - 1
            starts = _skip_starts(obj, bests)
        elif found:  # the walk down's last failure: done
            break
        else:
            running_min, new_n = n, n + s.grow
            steps = int(steps * s.step_growth)
            starts = {seed: torch.cat([_random_prompt(new_n - n, vocab, gens[seed], obj.device), bests[seed]])
                      for seed in seeds}
        if new_n >= running_max or new_n <= running_min or new_n > s.max_length:
            break
        n = new_n
    lengths = [f"{m}{'+' if ok else '-'}" for m, ok in tried]
    return [{"seed": seed, "prompt_tokens": found.get(seed), "lengths_tried": lengths,
             "longest_tried": max(m for m, _ in tried)} for seed in seeds]
