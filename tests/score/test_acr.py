"""empriv.score.acr: GCG prompt minimisation on a tiny model that memorised a string, and on one that did not."""

from __future__ import annotations

import pytest
import torch

from empriv.score.acr import ACRSearchParams, PassCount, adversarial_compression_ratio, acr_of_secrets, settings_from_params
from tiny_models import tiny_gpt2, train_to_memorise

SECRET = "Rita Mcconnell\nEB 5781\n713-345-6593"
SHORT = "Forwarded by Stacy"  # 15 tokens of the test BPE
# A small budget keeps the tests fast; the schedule and the stopping rules are the real ones.
QUICK = dict(top_k=64, candidates=64, steps=40, max_length=12, seeds=[0, 1])


@pytest.fixture(scope="module")
def tok(corpus):
    from empriv.models.tokenizer import train_bpe

    return train_bpe([e.text for e in corpus.public[:300]], 300)


def _fresh(tok, seed=0):
    return tiny_gpt2(vocab_size=tok.vocab_size, n_embd=32, n_head=2, n_layer=1, n_positions=64, seed=seed)


@pytest.fixture(scope="module")
def memorised(tok):
    """Memorised wherever it starts (0–8 random tokens before it in training), as a secret inside e-mails is."""
    model = _fresh(tok)
    train_to_memorise(model, tok, SECRET, steps=200, max_offset=8)
    ids = [tok.eos_id, *tok.encode(SECRET)]
    assert _greedy_reproduces(model, ids[:2], ids[2:])  # greedy decoding from its first token gives the rest
    return model


def _greedy_reproduces(model, prompt_ids, target_ids) -> bool:
    from empriv.models.lm import sample_continuations

    return sample_continuations(model, prompt_ids, 1, len(target_ids), top_k=1)[0] == list(target_ids)


def test_memorised_string_compresses(memorised, tok):
    target = tok.encode(SECRET)
    assert len(target) > 8
    res = adversarial_compression_ratio(memorised, target, ACRSearchParams(**QUICK), key="secret-00")
    assert res.success
    assert res.prompt_tokens < len(target)
    assert res.acr == pytest.approx(len(target) / res.prompt_tokens)
    assert res.acr > 1.0
    # ACR is the max over seeds of |s| / |p*_seed|
    found = [r["prompt_tokens"] for r in res.per_seed if r["prompt_tokens"] is not None]
    assert min(found) == res.prompt_tokens
    assert res.counts.forward_calls > 0 and res.counts.backward_calls > 0
    assert res.counts.passes == res.counts.forward_calls + res.counts.backward_calls


def test_untrained_model_does_not_compress(tok):
    model = _fresh(tok, seed=1)
    target = tok.encode(SHORT)
    assert len(target) <= 20
    assert len(target) >= 12  # long enough that a 5-token prompt would compress it
    s = ACRSearchParams(**{**QUICK, "max_length": 16, "steps": 30})
    res = adversarial_compression_ratio(model, target, s, key="secret-01")
    # a failed search measured nothing: no ACR value, only a bound
    assert not res.success and res.prompt_tokens is None and res.acr is None
    # the published schedule: 5 fails → 10 fails → 15 fails → 20 reaches the max_length bound: stop
    assert [r["lengths_tried"] for r in res.per_seed] == [["5-", "10-", "15-"]] * 2
    # every length < max_length = 16 is ruled out (15 was the last one tried): ACR ≤ |s| / 16 = |s| / max_length
    assert res.longest_tried == 15
    assert res.upper_bound == pytest.approx(len(target) / 16)
    rec = res.record()
    assert rec["acr"] is None and rec["acr_success"] is False
    assert rec["acr_upper_bound"] == pytest.approx(len(target) / 16) and rec["acr_longest_tried"] == 15


def test_failed_search_bound_follows_the_lengths_tried(tok):
    """The bound is |s| / (longest length tried + 1), which is |s| / max_length only when the schedule reaches
    max_length − 1: with start 5, grow 5 and max_length 20, lengths 16–19 are never tried, so ACR ≤ |s| / 16."""
    model = _fresh(tok, seed=1)
    target = tok.encode(SHORT)
    res = adversarial_compression_ratio(model, target, ACRSearchParams(**{**QUICK, "max_length": 20, "steps": 30}), key="secret-01")
    assert not res.success and res.acr is None
    assert res.per_seed[0]["lengths_tried"] == ["5-", "10-", "15-"]
    assert res.upper_bound == pytest.approx(len(target) / 16)
    assert res.upper_bound > len(target) / 20  # the published |s| / max_length would claim more than was searched
    # a secret longer than every length tried: the bound is above 1 (not capped) — the search cannot rule out compression
    secret = tok.encode(SECRET)
    short = adversarial_compression_ratio(model, secret, ACRSearchParams(**{**QUICK, "steps": 10}), key="s")
    assert not short.success and short.acr is None
    assert short.per_seed[0]["lengths_tried"] == ["5-", "10-"] and short.longest_tried == 10  # max_length 12
    assert short.upper_bound == pytest.approx(len(secret) / 11) and short.upper_bound > 1.0


def test_a_success_has_no_bound(memorised, tok):
    res = adversarial_compression_ratio(memorised, tok.encode(SECRET), ACRSearchParams(**QUICK), key="secret-00")
    rec = res.record()
    assert rec["acr_success"] is True and rec["acr"] == pytest.approx(len(tok.encode(SECRET)) / res.prompt_tokens)
    assert rec["acr_upper_bound"] is None and rec["acr_longest_tried"] is None


def test_same_seed_same_result(memorised, tok):
    target = tok.encode(SECRET)
    a = adversarial_compression_ratio(memorised, target, ACRSearchParams(**QUICK), key="secret-00").record()
    b = adversarial_compression_ratio(memorised, target, ACRSearchParams(**QUICK), key="secret-00").record()
    a.pop("acr_wall_time_s"), b.pop("acr_wall_time_s")
    assert a == b


def test_a_found_prompt_really_reproduces_the_secret(memorised, tok):
    """Check the success criterion independently: greedy generation from a prompt the search accepts."""
    from empriv.score import acr as acr_mod

    target = tok.encode(SECRET)
    counts = PassCount()
    obj = acr_mod._Objective(memorised, target, counts)
    gen = torch.Generator().manual_seed(0)
    ok, prompt, loss = acr_mod._LengthSearch(obj, ACRSearchParams(**QUICK)).run(
        acr_mod._random_prompt(6, tok.vocab_size, gen, obj.device), 60, gen)
    assert ok
    assert _greedy_reproduces(memorised, prompt.tolist(), target)
    # and a random prompt of the same length does not
    assert not _greedy_reproduces(memorised, acr_mod._random_prompt(6, tok.vocab_size, torch.Generator().manual_seed(5),
                                                                   obj.device).tolist(), target)


def test_published_and_fast_strategies_agree_on_a_memorised_string(memorised, tok):
    target = tok.encode(SECRET)
    fast = adversarial_compression_ratio(memorised, target, ACRSearchParams(**QUICK), key="k")
    published = adversarial_compression_ratio(memorised, target, ACRSearchParams(**{**QUICK, "strategy": "published"}), key="k")
    assert fast.success and published.success
    assert fast.acr >= published.acr * 0.75  # same order; the benchmark measures equality on real runs
    assert fast.counts.passes < published.counts.passes


def test_settings_validation_and_params():
    with pytest.raises(ValueError, match="max_length"):
        ACRSearchParams(start_length=10, max_length=5)
    with pytest.raises(ValueError, match="strategy"):
        ACRSearchParams(strategy="slow")
    from empriv.config import ScoreParams

    s = settings_from_params(ScoreParams().acr)
    assert (s.top_k, s.candidates, s.steps, s.start_length, s.grow, s.seeds) == (250, 100, 200, 5, 5, [0, 1, 2])


def test_target_too_long_for_the_window(tok):
    model = tiny_gpt2(vocab_size=tok.vocab_size, n_positions=16)
    with pytest.raises(ValueError, match="no ACR search fits"):
        adversarial_compression_ratio(model, list(range(11)), ACRSearchParams(**QUICK))
    # a shorter target searches below window − |s| and says so
    res = adversarial_compression_ratio(model, list(range(8)), ACRSearchParams(**{**QUICK, "steps": 3}))
    assert res.max_length == 8 and res.record()["acr_max_length"] == 8
    with pytest.raises(ValueError, match="non-empty"):
        adversarial_compression_ratio(model, [], ACRSearchParams(**QUICK))
    skipped = acr_of_secrets(model, tok, [{"id": "long", "text": SECRET}], ACRSearchParams(**QUICK), progress=False)
    assert skipped == {"long": {"acr": None, "acr_skipped": "too long for the model's window"}}


def test_acr_of_secrets_records_numbers_only(memorised, tok):
    secrets = [{"id": "secret-00", "text": SECRET}]
    out = acr_of_secrets(memorised, tok, secrets, ACRSearchParams(**QUICK), progress=False)
    rec = out["secret-00"]
    assert rec["acr"] > 1.0 and rec["acr_success"] is True
    flat = repr(rec)
    assert "Mcconnell" not in flat and "5781" not in flat


def test_acr_on_a_lora_fine_tune(memorised, tok, tmp_path):
    """A LoRA run is scored like a full one: wrapped by peft (unmerged) or loaded from its saved adapter (merged)."""
    import copy

    from empriv.config import TrainParams
    from empriv.models.adapters import load_finetuned, prepare_for_finetuning, save_finetuned
    from empriv.models.registry import load_model

    base_dir, run_dir = tmp_path / "base", tmp_path / "run"
    copy.deepcopy(memorised).save_pretrained(str(base_dir))
    lora = prepare_for_finetuning(load_model(base_dir), "lora", TrainParams().lora)
    assert type(lora).__name__.startswith("Peft")
    target = tok.encode(SECRET)
    direct = adversarial_compression_ratio(memorised, target, ACRSearchParams(**QUICK), key="secret-00")
    # LoRA's B matrices start at zero: the adapter computes the memorising base model's function
    wrapped = adversarial_compression_ratio(lora, target, ACRSearchParams(**QUICK), key="secret-00")
    assert wrapped.success and wrapped.acr > 1.0
    assert wrapped.acr == pytest.approx(direct.acr, rel=0.35)
    save_finetuned(lora, "lora", run_dir)
    assert (run_dir / "adapter_config.json").exists()
    merged = load_finetuned(run_dir, base_dir)
    loaded = adversarial_compression_ratio(merged, target, ACRSearchParams(**QUICK), key="secret-00")
    assert loaded.success and loaded.acr > 1.0


def test_patience_tolerance_cuts_unreachable_lengths_short(tok):
    """On a model that cannot be prompted into the secret, GCG's loss keeps creeping down by tiny amounts: with a
    relative tolerance the patience fires and the search spends far fewer passes on the same (failed) answer."""
    model = _fresh(tok, seed=1)
    target = tok.encode(SHORT)
    base = {**QUICK, "max_length": 20, "steps": 80, "patience": 8}
    plain = adversarial_compression_ratio(model, target, ACRSearchParams(**base, patience_tolerance=0.0), key="k")
    tolerant = adversarial_compression_ratio(model, target, ACRSearchParams(**base, patience_tolerance=0.05), key="k")
    assert not plain.success and not tolerant.success and tolerant.acr is None and plain.acr is None
    assert tolerant.upper_bound == plain.upper_bound == pytest.approx(len(target) / 16)  # both tried 5, 10, 15
    assert tolerant.counts.passes < plain.counts.passes
    # the published strategy has no patience: the tolerance changes nothing there
    pub = [adversarial_compression_ratio(model, target, ACRSearchParams(**{**base, "strategy": "published", "steps": 10},
                                                                    patience_tolerance=t), key="k").counts.passes
           for t in (0.0, 0.5)]
    assert pub[0] == pub[1]
    with pytest.raises(ValueError, match="patience_tolerance"):
        ACRSearchParams(patience_tolerance=1.5)


def test_fast_seeds_share_model_calls(tok):
    """Fast: seeds searching the same length share each GCG step's gradient and candidate calls; every seed still
    runs the whole schedule from the start length (as published), and ACR is the best over seeds."""
    model = _fresh(tok, seed=1)
    target = tok.encode(SHORT)
    s = {**QUICK, "max_length": 20, "steps": 12, "patience": None, "seeds": [0, 1], "race_steps": None, "give_up": []}
    both = adversarial_compression_ratio(model, target, ACRSearchParams(**s), key="k")
    alone = [adversarial_compression_ratio(model, target, ACRSearchParams(**{**s, "seeds": [seed]}), key="k") for seed in (0, 1)]
    assert [r["lengths_tried"] for r in both.per_seed] == [["5-", "10-", "15-"]] * 2
    # the same steps for both seeds (no patience, all fail): one call per step serves both
    assert both.counts.backward_calls == alone[0].counts.backward_calls == alone[1].counts.backward_calls
    assert both.counts.sequences == sum(r.counts.sequences for r in alone)
    assert both.counts.passes < sum(r.counts.passes for r in alone)
    published = adversarial_compression_ratio(model, target, ACRSearchParams(**{**s, "strategy": "published"}), key="k")
    assert published.counts.backward_calls == 2 * both.counts.backward_calls  # published: every seed on its own


def test_fast_top_k_narrows_the_swaps_and_the_published_strategy_ignores_it(tok):
    """fast_top_k (fast only) is the number of tokens per position a swap draws from: with 1, a step has at most one
    candidate per prompt position; with null the fast strategy draws from top_k, as the published one always does."""
    model = _fresh(tok, seed=1)
    target = tok.encode(SHORT)
    s = {**QUICK, "max_length": 6, "steps": 6, "patience": None, "seeds": [0], "race_steps": None, "give_up": []}

    def record(**knobs):
        r = adversarial_compression_ratio(model, target, ACRSearchParams(**{**s, **knobs}), key="k").record()
        r.pop("acr_wall_time_s")
        return r

    narrow = record(fast_top_k=1)
    assert narrow["acr_per_seed"][0]["lengths_tried"] == ["5-"]
    # each step: one gradient row and at most one swap per position of the 5-token prompt (duplicates scored once)
    assert narrow["acr_backward_calls"] == 6 and narrow["acr_sequences"] <= 6 * (1 + 5)
    wide = record(fast_top_k=None)  # top_k 64: the 64 swaps of a step are mostly distinct
    assert wide["acr_sequences"] > 6 * (1 + 40)
    assert record(fast_top_k=64, top_k=1) == wide  # fast_top_k replaces top_k in the fast strategy
    pub = [record(strategy="published", steps=3, fast_top_k=k) for k in (1, None)]
    assert pub[0] == pub[1] and pub[0]["acr_sequences"] == 3 * (1 + 64 + 1)  # gradient, candidates 64, the kept check
    with pytest.raises(ValueError, match="fast_top_k"):
        ACRSearchParams(fast_top_k=0)


def test_acr_of_secrets_records_a_failure_as_censored(tok):
    model = _fresh(tok, seed=1)
    out = acr_of_secrets(model, tok, [{"id": "s", "text": SHORT}], ACRSearchParams(**{**QUICK, "max_length": 16, "steps": 5}),
                         progress=False)
    rec = out["s"]
    assert rec["acr_success"] is False and rec["acr"] is None and rec["acr_prompt_tokens"] is None
    assert rec["acr_longest_tried"] == 15 and rec["acr_upper_bound"] == pytest.approx(len(tok.encode(SHORT)) / 16)


def test_the_target_loss_is_each_rows_mean_cross_entropy():
    """The objective's per-row loss against a literal loop of log-softmax picks (float64), for prompts of two
    lengths (the logits of the target positions only, asked of transformers by position, against a full forward
    pass); and the greedy-match flag against the argmax by hand; the gradient call gives the same losses."""
    import torch.nn.functional as F

    from empriv.score.acr import _Objective

    model = tiny_gpt2().eval()
    target = [5, 17, 42, 7]
    objective = _Objective(model, target, PassCount())
    for length in (1, 6):
        prompts = torch.randint(0, 299, (5, length), generator=torch.Generator().manual_seed(length))
        loss, match = objective.evaluate(prompts)
        with torch.no_grad():
            logits = model(torch.cat([prompts, torch.tensor(target).expand(5, -1)], 1)).logits.double()
        rows = logits[:, length - 1 : length - 1 + len(target)]
        expected = torch.stack([-sum(F.log_softmax(rows[b, j], -1)[t] for j, t in enumerate(target)) / len(target)
                                for b in range(5)])
        assert torch.allclose(loss.double(), expected, atol=1e-5, rtol=0)
        assert torch.equal(match, (rows.argmax(-1) == torch.tensor(target)).all(1))
        _, grad_loss, grad_match = objective.gradients(prompts)  # the gradient call reads the same positions
        assert torch.allclose(grad_loss.double(), expected, atol=1e-5, rtol=0)
        assert torch.equal(grad_match, match)


@pytest.mark.parametrize("strategy", ["fast", "published"])
def test_the_counts_are_every_model_call_and_every_sequence_it_scored(memorised, tok, strategy):
    """benchmarks/acr.py's cost measures, checked against the model itself: a hook sees every forward call the
    search makes; a call on embeddings is a gradient call (one forward + one backward); ``sequences`` is the sum of
    the batch sizes of every call, candidate batches and gradient batches alike."""
    calls: list[tuple[int, bool]] = []

    def seen(module, args, kwargs):
        ids, embeds = kwargs.get("input_ids"), kwargs.get("inputs_embeds")
        calls.append(((ids if ids is not None else embeds).shape[0], embeds is not None))

    handle = memorised.register_forward_pre_hook(seen, with_kwargs=True)
    try:
        res = adversarial_compression_ratio(memorised, tok.encode(SECRET), ACRSearchParams(**QUICK, strategy=strategy),
                                            key="secret-00")
    finally:
        handle.remove()
    assert len(calls) > 2 and any(g for _, g in calls) and any(b > 1 for b, g in calls if not g)
    assert res.counts.forward_calls == len(calls)
    assert res.counts.backward_calls == sum(1 for _, g in calls if g)
    assert res.counts.sequences == sum(b for b, _ in calls)
    assert res.counts.passes == res.counts.forward_calls + res.counts.backward_calls
    record = res.record()
    assert (record["acr_forward_calls"], record["acr_backward_calls"], record["acr_sequences"]) == \
        (res.counts.forward_calls, res.counts.backward_calls, res.counts.sequences)


def test_fast_length_one_is_searched_exhaustively_and_exactly(memorised, tok):
    """Fast, length 1: every token of the vocabulary is scored once (when that is within the length's GCG budget),
    so the outcome is exact — checked against a brute-force teacher-forced pass of our own."""
    target = tok.encode(SECRET)
    s = ACRSearchParams(**{**QUICK, "start_length": 1, "max_length": 3, "seeds": [0]})
    res = adversarial_compression_ratio(memorised, target, s, key="secret-00")
    with torch.no_grad():
        ids = torch.cat([torch.arange(tok.vocab_size).unsqueeze(1), torch.tensor(target).expand(tok.vocab_size, -1)], 1)
        works = (memorised(ids).logits[:, : len(target)].argmax(-1) == torch.tensor(target)).all(1)
    assert res.per_seed[0]["lengths_tried"][0] == ("1+" if bool(works.any()) else "1-")
    if bool(works.any()):
        assert res.prompt_tokens == 1 and res.acr == len(target)
        assert _greedy_reproduces(memorised, [int(works.nonzero()[0])], target)


def test_fast_seeds_search_one_schedule_as_a_population(memorised, tok):
    """Fast: one length schedule for all seeds; a length is won by one seed (the others stop there), so every seed
    shows the same lengths, ACR comes from the shortest length any seed won, and the prompt found is verified."""
    target = tok.encode(SECRET)
    res = adversarial_compression_ratio(memorised, target, ACRSearchParams(**{**QUICK, "seeds": [0, 1, 2]}), key="secret-00")
    assert res.success
    assert len({tuple(r["lengths_tried"]) for r in res.per_seed}) == 1
    won = [int(x[:-1]) for x in res.per_seed[0]["lengths_tried"] if x.endswith("+")]
    assert res.prompt_tokens == min(won) == min(r["prompt_tokens"] for r in res.per_seed if r["prompt_tokens"])
    assert res.acr == pytest.approx(len(target) / min(won))
    # the schedule stops once the length one below the shortest success has failed (or the success is at length 1)
    assert min(won) == 1 or f"{min(won) - 1}-" in res.per_seed[0]["lengths_tried"]


def _gradient_rows(model):
    """A hook that records the batch size of every gradient call (a call on embeddings) the search makes."""
    rows: list[int] = []

    def seen(module, args, kwargs):
        if kwargs.get("inputs_embeds") is not None:
            rows.append(kwargs["inputs_embeds"].shape[0])

    return rows, model.register_forward_pre_hook(seen, with_kwargs=True)


def test_fast_race_halves_the_seeds_at_a_length_every_race_steps(tok):
    """Fast, several seeds: every ``race_steps`` steps at a length, only the better half (rounded up) of the seeds
    still searching it go on; the others score nothing more there. With three seeds, 12 steps and race_steps 4, no
    patience and lengths that all fail: 3 seeds search steps 1–4, 2 seeds steps 5–8, 1 seed steps 9–12."""
    model = _fresh(tok, seed=1)
    target = tok.encode(SHORT)
    s = {**QUICK, "max_length": 20, "steps": 12, "step_growth": 1.0, "patience": None, "give_up": [],
         "seeds": [0, 1, 2]}
    rows, handle = _gradient_rows(model)
    try:
        raced = adversarial_compression_ratio(model, target, ACRSearchParams(**s, race_steps=4), key="k")
    finally:
        handle.remove()
    plain = adversarial_compression_ratio(model, target, ACRSearchParams(**s, race_steps=None), key="k")
    lengths = raced.per_seed[0]["lengths_tried"]
    assert lengths == plain.per_seed[0]["lengths_tried"] == ["5-", "10-", "15-"]
    assert not raced.success and raced.upper_bound == plain.upper_bound  # a failure stays a censored bound
    assert rows == [3] * 4 + [2] * 4 + [1] * 4 + [3] * 4 + [2] * 4 + [1] * 4 + [3] * 4 + [2] * 4 + [1] * 4
    assert raced.counts.backward_calls == plain.counts.backward_calls  # one gradient call a step either way
    # a seed out of the race scores no candidates: ~(3 + 2 + 1) / (3 · 3) of the sequences
    assert raced.counts.sequences < 0.75 * plain.counts.sequences


def test_the_race_keeps_the_seeds_with_the_lowest_loss():
    """The half of the members with the lowest best loss so far (rounded up; ties by member order) go on; the others
    end there unsuccessful, with their best prompt."""
    from empriv.score.gcg import _LengthSearch, _Member

    def member(loss):
        m = _Member(torch.tensor([1, 2]), 10, torch.Generator())
        m.best_prompt, m.best_loss = torch.tensor([int(loss * 10), 0]), loss
        return m

    three = [member(x) for x in (0.5, 0.2, 0.9)]
    kept = _LengthSearch._race(three)
    assert kept == [three[0], three[1]]  # 2 of 3 (order kept)
    assert three[2].result[0] is False and torch.equal(three[2].result[1], three[2].best_prompt)
    assert three[2].result[2] == 0.9 and three[0].result is None and three[1].result is None
    assert _LengthSearch._race(kept) == [three[1]]
    tied = [member(0.3), member(0.3)]
    assert _LengthSearch._race(tied) == [tied[0]]


def test_the_race_changes_no_one_seed_search_and_the_published_strategy_ignores_the_fast_knobs(memorised, tok):
    """One search seed (params.yaml's default budget): race_steps changes nothing — the same lengths, prompts and
    counts; the published strategy ignores race_steps, give_up, keep and wrong_weight."""
    target = tok.encode(SECRET)
    one = {**QUICK, "seeds": [0], "give_up": []}
    a = adversarial_compression_ratio(memorised, target, ACRSearchParams(**one, race_steps=None), key="secret-00").record()
    b = adversarial_compression_ratio(memorised, target, ACRSearchParams(**one, race_steps=1), key="secret-00").record()
    a.pop("acr_wall_time_s"), b.pop("acr_wall_time_s")
    assert a == b
    pub = [adversarial_compression_ratio(memorised, target, ACRSearchParams(**{**QUICK, "strategy": "published",
                                                                               "steps": 10}, **knobs), key="k").record()
           for knobs in ({"race_steps": None, "give_up": [], "keep": "loss", "wrong_weight": 0},
                         {"race_steps": 1, "give_up": [[1, 30]], "keep": "fewest_wrong", "wrong_weight": 50})]
    for r in pub:
        r.pop("acr_wall_time_s")
    assert pub[0] == pub[1]


def test_fast_gives_up_a_length_no_candidate_came_near(tok):
    """``give_up`` [[k, w]]: a length ends after k steps when no candidate scored at it got fewer than w target tokens
    wrong (w = 1: nothing reproduced the target, so every failing length stops at k); a w above the target's length
    never fires (the search is the one without the rule); several rungs apply in turn."""
    model = _fresh(tok, seed=1)
    target = tok.encode(SHORT)
    s = {**QUICK, "max_length": 20, "steps": 12, "step_growth": 1.0, "patience": None, "race_steps": None}
    rows, handle = _gradient_rows(model)
    try:
        quick = adversarial_compression_ratio(model, target, ACRSearchParams(**s, give_up=[[3, 1]]), key="k")
    finally:
        handle.remove()
    assert quick.per_seed[0]["lengths_tried"] == ["5-", "10-", "15-"] and not quick.success
    assert rows == [2] * 9 and quick.counts.backward_calls == 9  # 3 steps at each of 3 lengths
    never = adversarial_compression_ratio(model, target, ACRSearchParams(**s, give_up=[[3, len(target) + 1]]), key="k").record()
    without = adversarial_compression_ratio(model, target, ACRSearchParams(**s, give_up=[]), key="k").record()
    never.pop("acr_wall_time_s"), without.pop("acr_wall_time_s")
    assert never == without and never["acr_backward_calls"] == 36
    two = adversarial_compression_ratio(model, target, ACRSearchParams(**s, give_up=[[2, len(target) + 1], [5, 1]]), key="k")
    assert two.counts.backward_calls == 15  # the first rung never fires, the second stops each length at 5 steps
    for bad in ([[3]], [[0, 2]], [[5, 2], [3, 1]]):
        with pytest.raises(ValueError, match="give_up"):
            ACRSearchParams(give_up=bad)


def test_wrong_counts_the_target_tokens_greedy_decoding_misses():
    """``evaluate_wrong``: per row, the target tokens whose arg-max under teacher forcing is not the target token (by
    hand from a full forward pass); ``evaluate``'s exact match is a count of 0; both count the same calls."""
    from empriv.score.gcg import _Objective

    model = tiny_gpt2().eval()
    target = [5, 17, 42, 7]
    counts = PassCount()
    objective = _Objective(model, target, counts)
    prompts = torch.randint(0, 299, (6, 3), generator=torch.Generator().manual_seed(3))
    loss, wrong = objective.evaluate_wrong(prompts)
    with torch.no_grad():
        logits = model(torch.cat([prompts, torch.tensor(target).expand(6, -1)], 1)).logits[:, 2 : 2 + len(target)]
    assert torch.equal(wrong, (logits.argmax(-1) != torch.tensor(target)).sum(1))
    loss2, match = objective.evaluate(prompts)
    assert torch.equal(match, wrong == 0) and torch.equal(loss, loss2)
    assert counts.sequences == 12 and counts.forward_calls == 2


def test_a_fast_step_keeps_the_candidate_with_the_fewest_wrong_tokens():
    """``keep: fewest_wrong`` (fast): the step keeps the candidate with the fewest wrong target tokens, ties by loss,
    even when another has a lower loss; ``keep: loss`` and the published strategy keep the lowest loss."""
    from empriv.score.gcg import _LengthSearch, _Member, _Objective

    objective = _Objective(tiny_gpt2().eval(), [5, 17, 42, 7, 11, 13, 2, 9], PassCount())  # the published check runs
    cands = torch.tensor([[1, 1], [2, 2], [3, 3], [4, 4]])
    losses = torch.tensor([0.2, 0.9, 0.5, 0.4])
    wrong = torch.tensor([3, 1, 1, 2])
    matches = wrong == 0

    def kept(strategy, keep):
        search = _LengthSearch(objective, ACRSearchParams(strategy=strategy, keep=keep, patience=None))
        m = _Member(torch.tensor([0, 0]), 10, torch.Generator())
        assert search._step(m, cands, losses, matches, strategy == "fast", wrong)  # no success: the search goes on
        return m.prompt.tolist(), m.best_loss

    assert kept("fast", "fewest_wrong") == ([3, 3], pytest.approx(0.5))  # 1 wrong twice: the lower loss of the two
    assert kept("fast", "loss") == ([1, 1], pytest.approx(0.2))
    assert kept("published", "fewest_wrong")[0] == [1, 1]


def test_the_gradient_weighs_the_wrong_target_tokens():
    """``gradients(prompts, w)``: the gradient of the mean of the target tokens' cross-entropies where each token the
    prompt gets wrong (greedy, teacher forcing) weighs 1 + w, by hand from the model's logits; the loss it returns is
    the plain mean, and w = 0 is the plain mean's gradient."""
    import torch.nn.functional as F

    from empriv.score.gcg import _Objective

    model = tiny_gpt2(seed=4).eval()
    prompts = torch.randint(0, 299, (3, 4), generator=torch.Generator().manual_seed(5))
    target = []
    with torch.no_grad():  # row 0's greedy continuation for 3 tokens (right there), then tokens it gets wrong
        for _ in range(3):
            target.append(int(model(torch.cat([prompts[0], torch.tensor(target, dtype=torch.long)])[None]).logits[0, -1].argmax()))
    target += [(target[-1] + 7) % 300, (target[-1] + 11) % 300]
    objective = _Objective(model, target, PassCount())
    w = 20.0

    def by_hand(weight):
        one_hot = F.one_hot(prompts, 300).float().requires_grad_(True)
        embed = model.get_input_embeddings().weight
        x = torch.cat([one_hot @ embed, embed[torch.tensor(target)].expand(3, -1, -1)], 1)
        logits = model(inputs_embeds=x).logits[:, 3 : 3 + len(target)]
        ce = F.cross_entropy(logits.reshape(-1, 300), torch.tensor(target).repeat(3), reduction="none").view(3, -1)
        wrong = (logits.argmax(-1) != torch.tensor(target)).float()
        weights = 1.0 + weight * wrong
        (grad,) = torch.autograd.grad(((ce * weights).sum(1) / weights.sum(1)).sum(), one_hot)
        return grad, ce.mean(1).detach(), wrong

    grad, loss, match = objective.gradients(prompts, w)
    hand, hand_loss, wrong = by_hand(w)
    assert 0 < wrong.sum() < wrong.numel()  # some tokens right, some wrong: the weights matter
    assert torch.allclose(grad, hand, atol=1e-6) and torch.allclose(loss, hand_loss, atol=1e-6)
    plain, plain_loss, _ = objective.gradients(prompts)
    assert torch.allclose(plain, by_hand(0.0)[0], atol=1e-6) and torch.equal(plain_loss, loss)
    assert not torch.allclose(plain, grad, atol=1e-4)
    assert torch.equal(match, wrong.sum(1) == 0)
    with pytest.raises(ValueError, match="wrong_weight"):
        ACRSearchParams(wrong_weight=-1)


@pytest.fixture(scope="module")
def two_offsets(tok):
    """A model that saw the secret only after 5 or 7 random tokens (behind the begin-of-text token): a prompt of 6
    or 8 tokens puts the secret where it was learnt, 7 does not — success is not monotone in the prompt length."""
    from tiny_models import train_on_sequences

    model = _fresh(tok)
    target = tok.encode(SECRET)
    g = torch.Generator().manual_seed(0)
    train_on_sequences(model, [torch.randint(0, tok.vocab_size, ((5, 7)[i % 2],), generator=g).tolist() + target
                               for i in range(16)], tok.eos_id, 200)
    return model


def test_skip_walks_down_past_a_failed_length(two_offsets, tok):
    """``skip`` k: after the first success the walk down to shorter prompts ends at its (k + 1)-th failure in a row.
    On a model whose prompts work at 6 and 8 tokens but not at 7, the MiniPrompt rule (k = 0, and the published
    strategy, which ignores k) stops at 8; k = 1 goes on past 7 and finds 6, a prompt that reproduces the secret."""
    target = tok.encode(SECRET)
    s = {**QUICK, "start_length": 8}
    runs = {k: adversarial_compression_ratio(two_offsets, target, ACRSearchParams(**s, skip=k), key="secret-00")
            for k in (0, 1, 2)}
    assert runs[0].prompt_tokens == 8 and runs[0].per_seed[0]["lengths_tried"] == ["8+", "7-"]
    assert runs[1].prompt_tokens == 6 and runs[1].acr == pytest.approx(len(target) / 6)
    lengths = runs[1].per_seed[0]["lengths_tried"]
    assert lengths[:3] == ["8+", "7-", "6+"] and lengths[-2:] == ["5-", "4-"]  # two failures in a row end it
    assert runs[2].per_seed[0]["lengths_tried"][-3:] == ["5-", "4-", "3-"]
    assert runs[0].counts.sequences < runs[1].counts.sequences < runs[2].counts.sequences
    published = [adversarial_compression_ratio(two_offsets, target, ACRSearchParams(**{**s, "steps": 10},
                                                                                   strategy="published", skip=k), key="k").record()
                 for k in (0, 2)]
    for r in published:
        r.pop("acr_wall_time_s")
    assert published[0] == published[1]
    with pytest.raises(ValueError, match="skip"):
        ACRSearchParams(skip=-1)


def test_greedy_tokens_is_argmax_with_its_tie_and_nan_rules():
    """``greedy_tokens`` (the search's arg-max through ``max``) returns argmax's index: the first maximum of a tie,
    a NaN as the maximum, in float32 and bfloat16, on search-shaped logits."""
    from empriv.score.gcg import greedy_tokens

    g = torch.Generator().manual_seed(0)
    cases = [torch.randn(16, 6, 2048, generator=g),
             torch.randint(0, 3, (64, 5, 40), generator=g).float(),  # many ties, first max must win
             torch.randint(0, 3, (8, 4, 300), generator=g).to(torch.bfloat16)]
    nan = torch.randn(8, 3, 50, generator=g)
    nan[::2, :, 7] = float("nan")
    nan[1::4, :, 2] = float("inf")
    for x in cases + [nan]:
        assert torch.equal(greedy_tokens(x), x.argmax(-1))
    assert greedy_tokens(torch.tensor([[1.0, 3.0, 3.0, 0.0]])).tolist() == [1]
