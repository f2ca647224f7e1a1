"""empriv.data.selection (record selection for user-level DP) and the synthetic privacy units of empriv.data.units."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest
import torch

from empriv.data.selection import (
    STRATEGIES,
    align_scores,
    perplexity,
    random_chunk,
    random_window,
    read_record_scores,
    record_mean_nll,
    scores_by_id,
    select_k,
    unit_stream,
    write_record_scores,
)
from empriv.data.units import records_by_unit, synthetic_unit_ids, unit_id_statistics
from empriv.models.lm import encode_fixed
from tiny_models import tiny_gpt2

# A hand-built corpus of 7 records in 3 units (record index: tokens, score).
#   unit a: 0 (5 tok, 1.0)  1 (9 tok, 0.5)  2 (2 tok, 3.0)  3 (9 tok, 2.0)
#   unit b: 4 (7 tok, 4.0)
#   unit c: 5 (3 tok, 1.5)  6 (3 tok, 1.5)
UNITS = {"a": [0, 1, 2, 3], "b": [4], "c": [5, 6]}
N_TOKENS = [5, 9, 2, 9, 7, 3, 3]
SCORES = [1.0, 0.5, 3.0, 2.0, 4.0, 1.5, 1.5]


def pick(strategy, k=2, seed=0, **kw):
    kw.setdefault("n_tokens", N_TOKENS)
    kw.setdefault("scores", SCORES)
    return select_k(UNITS, k, strategy, np.random.default_rng(seed), **kw)


# ----------------------------------------------------------------------------- deterministic strategies
@pytest.mark.parametrize("strategy, expected_a", [
    ("longest", [1, 3]),               # 9 and 9 tokens: tie broken by the lower index
    ("shortest", [2, 0]),              # 2 then 5 tokens
    ("highest_perplexity", [2, 3]),    # scores 3.0, 2.0
    ("lowest_perplexity", [1, 0]),     # scores 0.5, 1.0
])
def test_deterministic_strategies_pick_known_records(strategy, expected_a):
    sel = pick(strategy)
    by = sel.by_unit()
    assert by["a"] == expected_a
    assert by["c"] == [5, 6]           # tied on length and score: index order
    assert by["b"] == [4, 4]           # one record, k = 2: resampled
    assert sel.resampled_units == ("b",)
    assert list(sel.units) == ["a", "a", "b", "b", "c", "c"]
    assert len(sel) == 6 and sel.k == 2 and sel.strategy == strategy


def test_deterministic_strategies_ignore_the_generator_and_unit_order():
    shuffled = {"a": [3, 2, 0, 1], "b": [4], "c": [6, 5]}
    for strategy in ("longest", "shortest", "highest_perplexity", "lowest_perplexity"):
        results = {tuple(select_k(u, 2, strategy, np.random.default_rng(s), n_tokens=N_TOKENS,
                                  scores=SCORES).by_unit()["a"]) for s in range(5) for u in (UNITS, shuffled)}
        assert len(results) == 1, strategy


def test_k3_longest_and_perplexity_as_exp_of_nll_rank_alike():
    assert pick("longest", k=3).by_unit()["a"] == [1, 3, 0]
    assert pick("shortest", k=4).by_unit()["a"] == [2, 0, 1, 3]
    nll = np.array(SCORES)
    assert pick("highest_perplexity", k=3, scores=perplexity(nll)).by_unit() == \
        pick("highest_perplexity", k=3, scores=nll).by_unit()
    assert perplexity([0.0, np.log(7.0)]) == pytest.approx([1.0, 7.0])


# ----------------------------------------------------------------------------- random and resampling
def test_random_draws_distinct_records_of_the_unit_uniformly():
    hits = Counter()
    for seed in range(2000):
        sel = pick("random", seed=seed)
        by = sel.by_unit()
        assert len(set(by["a"])) == 2 and set(by["a"]) <= {0, 1, 2, 3}
        assert sorted(by["c"]) == [5, 6]  # k = unit size: the whole unit
        hits.update(by["a"])
    # each of unit a's 4 records is in a 2-of-4 draw with probability 1/2: 1000 of 2000 expected
    # (binomial sd ≈ 22; the band is ±5 sd)
    assert all(890 <= hits[i] <= 1110 for i in range(4)), hits


def test_random_is_deterministic_per_seed_for_every_generator_kind():
    units = {f"u{i}": list(range(10 * i, 10 * i + 10)) for i in range(20)}
    for make in (np.random.default_rng, random.Random, lambda s: torch.Generator().manual_seed(s)):
        a = select_k(units, 3, "random", make(7))
        b = select_k(units, 3, "random", make(7))
        c = select_k(units, 3, "random", make(8))
        assert a == b
        assert a.records != c.records


def test_resampling_with_replacement_gives_exactly_k_from_the_unit_only():
    units = {"big": list(range(0, 8)), "two": [8, 9], "one": [10]}
    seen_two = Counter()
    for seed in range(400):
        sel = select_k(units, 5, "random", np.random.default_rng(seed))
        assert Counter(sel.units) == {"big": 5, "two": 5, "one": 5}  # never more than k
        by = sel.by_unit()
        assert len(set(by["big"])) == 5                                # enough records: no repeat
        assert set(by["two"]) == {8, 9}                                 # every record used, only its own
        assert by["one"] == [10] * 5
        seen_two.update(by["two"][2:])                                  # the 3 resampled slots
        assert sel.resampled_units == ("two", "one")
    # the resampled slots draw 8 and 9 with equal probability: 600 each expected (sd ≈ 17)
    assert abs(seen_two[8] - 600) < 90 and seen_two[8] + seen_two[9] == 1200
    # a deterministic strategy keeps its order first, then resamples
    sel = select_k(units, 4, "longest", np.random.default_rng(0), n_tokens=[1] * 8 + [3, 5, 2])
    assert sel.by_unit()["two"][:2] == [9, 8] and set(sel.by_unit()["two"][2:]) <= {8, 9}


def test_records_by_unit_feeds_select_k():
    column = ["x", "y", "x", "z", "y", "x"]
    units = records_by_unit(column)
    assert units == {"x": [0, 2, 5], "y": [1, 4], "z": [3]}
    sel = select_k(units, 2, "shortest", np.random.default_rng(0), n_tokens=[4, 1, 2, 9, 1, 3])
    assert sel.by_unit() == {"x": [2, 5], "y": [1, 4], "z": [3, 3]}
    assert all(column[r] == u for r, u in zip(sel.records, sel.units))


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, message", [
    (dict(k=0), "k: out of range (got 0; allowed: an integer >= 1)"),
    (dict(k=1.5), "k: not an integer (got 1.5; allowed: an integer >= 1)"),
    (dict(strategy="longst"), "did you mean 'longest'"),
    (dict(strategy="highest_ppl"), "strategy must be one of random, longest, shortest, highest_perplexity, lowest_perplexity"),
    (dict(strategy="highest_perplexity", scores=None), "needs scores"),
    (dict(strategy="lowest_perplexity", scores=SCORES[:-1]), "scores must have one value per record (7), got shape (6,)"),
    (dict(strategy="longest", n_tokens=None), "needs n_tokens"),
    (dict(strategy="shortest", n_tokens=[5, 9, 2, 9, 7, 3, -1]), "n_tokens[6] must be a non-negative integer"),
    (dict(strategy="lowest_perplexity", scores=[1, 2, 3, float("nan"), 5, 6, 7]), "scores[3] must be finite"),
    (dict(resample=False), "unit 'b' has 1 record(s), fewer than k=2"),
    (dict(units={"a": [0, 1], "b": [1, 2]}), "record 1 is in more than one place"),
    (dict(units={"a": [0, 1], "b": [3]}), "indices must be 0..2"),
    (dict(units={"a": []}), "units['a'] has no records"),
    (dict(rng=3), "rng must be a numpy.random.Generator, random.Random or torch.Generator, got int"),
])
def test_bad_input_is_one_line_error_before_any_draw(kwargs, message):
    rng = random.Random(1)
    state = rng.getstate()
    args = dict(units=UNITS, k=2, strategy="random", rng=rng, n_tokens=N_TOKENS, scores=SCORES, resample=True)
    args.update(kwargs)
    with pytest.raises(ValueError) as err:
        select_k(args.pop("units"), args.pop("k"), args.pop("strategy"), args.pop("rng"), **args)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert rng.getstate() == state  # nothing was drawn


def test_strategy_list_and_suggestion():
    assert STRATEGIES == ("random", "longest", "shortest", "highest_perplexity", "lowest_perplexity")
    with pytest.raises(ValueError, match="did you mean 'lowest_perplexity'"):
        pick("lowest_perplexty")
    with pytest.raises(ValueError) as err:
        pick("zzz")
    assert "did you mean" not in str(err.value)


# ----------------------------------------------------------------------------- random chunk
RECORDS = [list(range(0, 10)), list(range(10, 25)), list(range(25, 30))]  # stream = 0..29


def test_random_chunk_is_a_window_of_the_concatenated_records():
    rng = np.random.default_rng(0)
    starts = Counter()
    for _ in range(2300):
        chunk = random_chunk(RECORDS, 8, rng)
        s = chunk[0]
        assert chunk == list(range(s, s + 8)) and 0 <= s <= 22  # a contiguous window inside the stream
        starts[s] += 1
    # 23 possible offsets, 100 draws each expected (sd ≈ 10); each fresh call draws anew
    assert set(starts) == set(range(23))
    assert min(starts.values()) >= 60 and max(starts.values()) <= 140
    assert random_chunk(RECORDS, 30, rng) == list(range(30))


def test_random_chunk_crosses_record_boundaries_and_separator():
    assert unit_stream([[1, 2], [3], [4, 5]], separator=99) == [1, 2, 99, 3, 99, 4, 5]
    assert unit_stream([[1, 2], [3]]) == [1, 2, 3]
    rng = random.Random(3)
    chunks = {tuple(random_chunk([[1, 2], [3], [4, 5]], 3, rng, separator=99)) for _ in range(200)}
    assert chunks == {(1, 2, 99), (2, 99, 3), (99, 3, 99), (3, 99, 4), (99, 4, 5)}


def test_random_chunk_of_a_short_unit_is_padded_and_masked_by_encode_fixed():
    g = torch.Generator().manual_seed(0)
    chunk = random_chunk([[7, 8], [9]], 10, g)
    assert chunk == [7, 8, 9]  # whole stream: shorter than the window
    ids, mask = encode_fixed([chunk, random_window(list(range(100, 130)), 10, g)], eos_id=0, seq_len=11)
    assert ids[0].tolist() == [0, 7, 8, 9] + [0] * 7
    assert mask[0].tolist() == [0, 1, 1, 1] + [0] * 7  # padding carries no loss
    assert mask[1].sum() == 10


@pytest.mark.parametrize("call, message", [
    (lambda: random_chunk(RECORDS, 0, random.Random(0)), "window: out of range (got 0; allowed: an integer >= 1"),
    (lambda: random_chunk([[], []], 4, random.Random(0)), "token stream is empty"),
    (lambda: random_chunk([], 4, random.Random(0)), "record_tokens must be a non-empty sequence"),
    (lambda: random_chunk(RECORDS, 4, 0), "rng must be"),
])
def test_random_chunk_bad_input(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        call()


# ----------------------------------------------------------------------------- perplexity scores
def test_record_mean_nll_matches_a_hand_computation():
    model = tiny_gpt2(vocab_size=300, n_positions=16)
    model.train()
    records = [[5, 6, 7], [8, 9, 10, 11, 12], list(range(20, 40))]
    eos = 299
    got = record_mean_nll(model, records, eos_id=eos, seq_len=16, batch_size=2)
    assert model.training  # mode restored
    with torch.no_grad():
        for rec, value in zip(records, got):
            ids = torch.tensor([[eos, *rec][:16]])
            logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
            nll = [-float(logp[t, ids[0, t + 1]]) for t in range(ids.shape[1] - 1)]
            assert value == pytest.approx(sum(nll) / len(nll), abs=1e-5)
    # batching/padding does not change a record's score; the long record counts its first 15 tokens
    one_by_one = record_mean_nll(model, records, eos_id=eos, seq_len=16, batch_size=1)
    assert np.allclose(got, one_by_one, atol=1e-6)
    assert got[2] == pytest.approx(record_mean_nll(model, [records[2][:15]], eos_id=eos, seq_len=16)[0], abs=1e-6)
    assert 0.5 * np.log(300) < got.mean() < 2 * np.log(300)  # an untrained model: near uniform
    with pytest.raises(ValueError, match="record 1 has no tokens"):
        record_mean_nll(model, [[1], []], eos_id=eos, seq_len=16)


def test_record_scores_cache_round_trip(tmp_path):
    ids = ["e3", "e1", "e2"]
    scores = np.array([2.718281828459045, 0.1 + 0.2, 5.0])
    path = tmp_path / "scores" / "ppl.json"
    write_record_scores(path, ids, scores, meta={"base": "tiny-gpt2", "seq_len": 64})
    data = json.loads(path.read_text())
    assert data["kind"] == "record_mean_nll" and data["meta"] == {"base": "tiny-gpt2", "seq_len": 64}
    assert read_record_scores(path) == {"e3": scores[0], "e1": scores[1], "e2": scores[2]}  # exact floats
    assert read_record_scores(path, ["e2", "e3"]).tolist() == [5.0, 2.718281828459045]
    assert list(tmp_path.joinpath("scores").iterdir()) == [path]  # no temp file left behind
    with pytest.raises(ValueError, match=r"scores lack 1 of the 2 records \(first: 'e9'\)"):
        read_record_scores(path, ["e1", "e9"])
    with pytest.raises(ValueError, match="record_ids must be unique, got 'e1'"):
        scores_by_id(["e1", "e1"], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"scores must have one value per record \(2\)"):
        scores_by_id(["e1", "e2"], [1.0])
    assert align_scores({"a": 1.0, "b": 2.0}, ["b", "a", "b"]).tolist() == [2.0, 1.0, 2.0]
    (tmp_path / "other.json").write_text('{"x": 1}')
    with pytest.raises(ValueError, match="not a record-scores file"):
        read_record_scores(tmp_path / "other.json")


# ----------------------------------------------------------------------------- synthetic privacy units
def test_synthetic_units_are_heavy_tailed_like_enron():
    ids = synthetic_unit_ids(500_000, seed=0)
    stats = unit_id_statistics(ids)
    assert stats["n_records"] == 500_000
    assert stats["records_per_unit_median"] == 2.0
    assert stats["records_per_unit_min"] == 1
    # target mean 13; over ~38,000 units the realised mean's sd is ~3 %: tolerance ±15 % (about 5 sd)
    assert 11.0 <= stats["records_per_unit_mean"] <= 15.0, stats
    assert 1000 <= stats["records_per_unit_max"] <= 5000
    assert 0.38 <= Counter(Counter(ids).values())[1] / stats["n_units"] <= 0.50  # ~44 % single-record units


def test_synthetic_units_deterministic_and_complete():
    a = synthetic_unit_ids(5000, seed=3)
    assert a == synthetic_unit_ids(5000, seed=3)
    assert a != synthetic_unit_ids(5000, seed=4)
    assert len(a) == 5000
    units = records_by_unit(a)
    assert sorted(i for idx in units.values() for i in idx) == list(range(5000))
    tiny = synthetic_unit_ids(3, seed=0, prefix="user")
    assert len(tiny) == 3 and all(u.startswith("user") for u in tiny)
    capped = unit_id_statistics(synthetic_unit_ids(20_000, seed=0, max_records_per_unit=50))
    assert capped["records_per_unit_max"] <= 50
    with pytest.raises(ValueError, match=r"n_records: out of range \(got 0; allowed: an integer >= 1\)"):
        synthetic_unit_ids(0, seed=0)
    with pytest.raises(ValueError, match=r"max_records_per_unit: out of range \(got 0; allowed: an integer >= 1\)"):
        synthetic_unit_ids(10, seed=0, max_records_per_unit=0)
