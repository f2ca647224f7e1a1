"""User-level units through train_model (empriv.train.user_level): Group Privacy and User-wise DP-SGD on a tiny
GPT-2 — the bounded contribution of a unit, σ from the user-level accounting, the recorded facts, and the errors."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

from empriv.config import ConfigError, RunConfig, parse_params
from empriv.models.lm import encode_fixed
from empriv.train.finetune import TrainingRecords, TrainRequest, train_model
from empriv.train.user_level import SelectionStats, make_unit_data, userwise_selector

N_UNITS = 40
EOS = 299


def _params(**privacy):
    return parse_params({
        "runtime": {"device": "cpu", "threads": 1, "wandb_mode": "disabled"},
        "data": {"n_train": 200},
        "privacy": {"delta": 1e-5, **privacy},
        "train": {"micro_batch_size": 32, "log_every": 1},
        "cube": {"epsilon": [8, "inf"], "batch_size": [8, 16], "steps": [4], "learning_rate": [0.01], "seed": [0],
                 "unit": ["record", "group-k3-random", "group-k3-longest", "group-k2-highppl", "userwise-k3-random",
                          "userwise-k2-chunk", "userwise-k3-lowppl", "userwise-k3-shortest"]},
    })


def _corpus():
    """200 records of 3..14 tokens; unit u owns 1..9 records (units 0..39, sizes cycling)."""
    g = torch.Generator().manual_seed(0)
    sizes = [1 + (u % 9) for u in range(N_UNITS)]
    units = [f"user{u:02d}" for u, s in enumerate(sizes) for _ in range(s)]
    units = (units * 2)[:200]
    tokens = [torch.randint(0, EOS, (3 + i % 12,), generator=g).tolist() for i in range(200)]
    ids, mask = encode_fixed(tokens, EOS, 16)
    scores = np.linspace(1.0, 5.0, 200)[::-1].copy()
    return ids, mask, units, tokens, scores


class _Tok:
    eos_id = EOS


@functools.cache
def _tight_group_calibration(epsilon, delta, k, q, steps):
    """:func:`empriv.privacy.user_level.calibrate_group_privacy` (pure, ~13 s here), computed once per set of
    arguments for the module: two tests compare their runs with the same tight calibration."""
    from empriv.privacy.user_level import calibrate_group_privacy

    return calibrate_group_privacy(epsilon, delta, k, q, steps)


def _train(params, unit, epsilon=8, batch_size=8):
    from tiny_models import tiny_gpt2

    ids, mask, units, tokens, scores = _corpus()
    run = RunConfig(epsilon, batch_size, 4, 0.01, 0, unit)
    return train_model(TrainRequest(params, run, tiny_gpt2(), TrainingRecords(ids, mask, units, tokens, scores),
                                    tokenizer=_Tok()))


def test_group_privacy_bounds_each_unit_to_k_and_takes_sigma_from_the_tight_accounting(monkeypatch):
    from empriv.privacy.user_level import group_privacy_epsilon

    monkeypatch.setenv("WANDB_MODE", "disabled")
    params = _params()
    _, m = _train(params, "group-k3-random")
    n_units = len(set(_corpus()[2]))
    assert m["n_units"] == n_units and m["n_bounded_records"] == 3 * n_units
    assert m["unit"] == "group-k3-random" and m["unit_level"] == "user" and m["unit_method"] == "group"
    assert m["sample_rate"] == pytest.approx(8 / (3 * n_units)) and m["delta"] == 1e-5
    cal = _tight_group_calibration(8, 1e-5, 3, 8 / (3 * n_units), 4)
    assert m["accountant"] == "pld-mog" and m["noise_multiplier"] == pytest.approx(cal.noise_multiplier, rel=1e-9)
    assert m["epsilon_user_level"] == pytest.approx(cal.epsilon) and m["epsilon_user_level"] <= 8.0 + 1e-3
    # the same σ, q, T are a much smaller ε per record: the user level is what costs
    assert m["epsilon_record_level_prv"] < m["epsilon_user_level"]
    assert group_privacy_epsilon(m["noise_multiplier"], 3, m["sample_rate"], 4, 1e-5) == pytest.approx(
        m["epsilon_user_level"], rel=1e-6)
    from collections import Counter

    assert m["resampled_units"] == sum(1 for c in Counter(_corpus()[2]).values() if c < 3) == 9
    assert len(m["loss_curve"]) == 4


def test_group_selection_fixed_strategies_pick_known_records():
    from empriv.train.user_level import fixed_selection

    ids, mask, units, tokens, scores = _corpus()
    data = make_unit_data(ids, mask, units, record_tokens=tokens, scores=scores)
    rng = np.random.default_rng(0)
    longest = fixed_selection(RunConfig(8, 8, 4, 0.01, 0, "group-k3-longest"), data, rng, resample=True).by_unit()
    high = fixed_selection(RunConfig(8, 8, 4, 0.01, 0, "group-k2-highppl"), data, rng, resample=True).by_unit()
    by_unit = data.by_unit()
    for u, rows in by_unit.items():
        assert len(longest[u]) == 3 and len(high[u]) == 2  # exactly k slots per unit, never more
        if len(rows) >= 3:
            want = sorted(rows, key=lambda i: (-len(tokens[i]), i))[:3]
            assert longest[u] == want
        if len(rows) >= 2:  # scores fall with the index: the highest perplexity is the unit's first records
            assert high[u] == sorted(rows)[:2]
        else:
            assert high[u] == rows * 2  # resampled with replacement


def test_naive_group_accounting_is_selectable_and_recorded(monkeypatch):
    from empriv.privacy.user_level import calibrate_group_privacy_naive

    monkeypatch.setenv("WANDB_MODE", "disabled")
    _, m = _train(_params(group_accounting="naive"), "group-k3-random")
    n = m["n_bounded_records"]
    naive = calibrate_group_privacy_naive(8, 1e-5, 3, 8 / n, 4)
    assert m["noise_multiplier"] == pytest.approx(naive.noise_multiplier, rel=1e-9)
    assert m["user_accounting"].startswith("group-naive") and m["record_level_epsilon"] == pytest.approx(8 / 3)
    assert m["epsilon_user_level"] <= 8.0 + 1e-3
    # the naive conversion pays more noise than the tight accounting for the same guarantee
    assert naive.noise_multiplier > _tight_group_calibration(8, 1e-5, 3, 8 / n, 4).noise_multiplier


def test_userwise_units_are_sampled_at_b_over_n_and_each_gives_at_most_k_records(monkeypatch):
    from empriv.privacy.accounting import calibrate_noise_multiplier

    monkeypatch.setenv("WANDB_MODE", "disabled")
    _, m = _train(_params(), "userwise-k3-random", batch_size=16)
    n_units = m["n_units"]
    assert m["sample_rate"] == pytest.approx(16 / n_units) and m["expected_units_per_step"] == pytest.approx(16)
    assert m["noise_multiplier"] == pytest.approx(calibrate_noise_multiplier(8, 1e-5, 16 / n_units, 4).noise_multiplier,
                                                  rel=1e-6)
    assert m["epsilon_user_level"] == pytest.approx(8, abs=0.05) and m["unit_method"] == "userwise"
    assert m["mean_records_per_step"] == pytest.approx(3 * m["mean_units_per_step"])  # k records per sampled unit
    assert m["max_records_per_unit_per_step"] == 3 and len(m["loss_curve"]) == 4


def test_userwise_selectors_give_k_records_or_chunks_per_sampled_unit():
    ids, mask, units, tokens, scores = _corpus()
    data = make_unit_data(ids, mask, units, record_tokens=tokens, scores=scores)
    sampled = torch.tensor([0, 5, 8])
    for unit, k in (("userwise-k3-random", 3), ("userwise-k2-chunk", 2), ("userwise-k3-lowppl", 3)):
        stats = SelectionStats()
        select = userwise_selector(RunConfig(8, 8, 4, 0.01, 0, unit), data, np.random.default_rng(1), eos_id=EOS,
                                   seq_len=16, resample=True, stats=stats)
        a_ids, a_mask, owners = select(0, sampled)
        assert owners.tolist() == [0] * k + [5] * k + [8] * k and a_ids.shape == (3 * k, 16)
        if unit.endswith("random") or unit.endswith("lowppl"):  # records of the unit itself
            for row, owner in zip(a_ids, owners.tolist()):
                assert any(torch.equal(row, ids[i]) for i in data.by_unit()[owner])
        b_ids, _, _ = select(1, sampled)
        if unit.endswith("lowppl"):
            assert torch.equal(a_ids, b_ids)  # a fixed top-k
        assert stats.records_per_step == [3 * k, 3 * k]
    # a chunk is a window of the unit's concatenated records (after the EOS that starts every row)
    stats = SelectionStats()
    select = userwise_selector(RunConfig(8, 8, 4, 0.01, 0, "userwise-k1-chunk"), data, np.random.default_rng(2),
                               eos_id=EOS, seq_len=6, resample=True, stats=stats)
    c_ids, c_mask, _ = select(0, torch.tensor([8]))  # unit 8 has 9 records
    stream = [t for i in data.by_unit()[8] for t in tokens[i]]
    window = c_ids[0, 1:].tolist()
    assert c_ids[0, 0] == EOS and any(stream[j:j + 5] == window for j in range(len(stream) - 4))


@pytest.mark.parametrize("unit", ["group-k2-highppl", "userwise-k2-chunk", "userwise-k3-shortest"])
def test_non_private_user_level_runs_train_without_noise(monkeypatch, unit):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    _, m = _train(_params(), unit, epsilon=math.inf)
    assert m["noise_multiplier"] == 0.0 and m["accountant"] is None and m["unit"] == unit
    assert all(math.isfinite(x) for x in m["loss_curve"]) and len(m["loss_curve"]) == 4


def test_user_level_errors_are_one_line_and_come_before_training(monkeypatch):
    from tiny_models import tiny_gpt2

    monkeypatch.setenv("WANDB_MODE", "disabled")
    ids, mask, units, tokens, scores = _corpus()
    params = _params()
    run = RunConfig(8, 16, 4, 0.01, 0, "userwise-k3-random")
    with pytest.raises(ConfigError, match="needs the privacy unit of every training record"):
        train_model(TrainRequest(params, run, tiny_gpt2(), TrainingRecords(ids, mask)))
    big = RunConfig(8, 16, 4, 0.01, 0, "userwise-k3-random")
    few_units = ["a", "b"] * 100
    with pytest.raises(ConfigError, match=r"cube.batch_size 16 must be <= the number of units \(2\)"):
        train_model(TrainRequest(params, big, tiny_gpt2(), TrainingRecords(ids, mask, few_units, tokens)))
    with pytest.raises(ConfigError, match="a perplexity strategy needs each record's perplexity"):
        train_model(TrainRequest(params, RunConfig(8, 8, 4, 0.01, 0, "group-k2-highppl"), tiny_gpt2(),
                                 TrainingRecords(ids, mask, units, tokens)))
    with pytest.raises(ConfigError, match=r"unit\(s\) have fewer than k=3 records .*privacy.user_resample is false"):
        train_model(TrainRequest(_params(user_resample=False), RunConfig(8, 8, 4, 0.01, 0, "group-k3-random"),
                                 tiny_gpt2(), TrainingRecords(ids, mask, units, tokens)))
    with pytest.raises(ValueError, match="200 unit ids|unit ids for 200"):
        train_model(TrainRequest(params, run, tiny_gpt2(), TrainingRecords(ids, mask, units[:10])))


def test_unit_specs_parse_and_bad_ones_are_one_line_errors():
    from empriv.privacy_unit import parse_unit

    u = parse_unit("userwise-k10-chunk")
    assert (u.method, u.k, u.strategy, u.selection_strategy, u.redrawn_each_step) == ("userwise", 10, "chunk",
                                                                                       "random_chunk", True)
    assert parse_unit("record").suffix == "" and parse_unit("group-k5-longest").suffix == "-group-k5-longest"
    for bad, msg in (("group-k0-random", r"k must be an integer in \[1, 10000\]"),
                     ("group-k5-chunk", "unknown selection strategy 'chunk' for group"),
                     ("userwise-k5-median", "unknown selection strategy 'median'"),
                     ("person-k5-random", "unknown user-level method 'person'"),
                     ("user", "not a unit spec"), ("group-k05-random", "without leading zeros")):
        with pytest.raises(ValueError, match=msg):
            parse_unit(bad)
    with pytest.raises(ConfigError, match=r"cube.unit\[1\]: unknown selection strategy 'median'.*allowed: 'record'"):
        parse_params({"cube": {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0],
                               "unit": ["record", "group-k2-median"]}})
    run = RunConfig(8, 64, 16, 0.005, 1, "userwise-k10-chunk")
    assert run.name == "eps8-b64-T16-lr0.005-s1-userwise-k10-chunk-full"
    assert run.group == "eps8-b64-T16-lr0.005-userwise-k10-chunk-full"
    assert run.file_stem == "userwise-k10-chunk/full/eps8-b64-T16-lr0.005-s1"
    assert RunConfig(8, 64, 16, 0.005, 1).name == "eps8-b64-T16-lr0.005-s1-full"  # record-level: no unit suffix


def test_group_calibration_cache_hits_are_reaccounted_and_bad_ones_replaced(tmp_path, caplog):
    import json

    from empriv.privacy.cache import CalibrationCache
    from empriv.train.user_level import cached_group_calibration

    cache = CalibrationCache(tmp_path)
    first = cached_group_calibration(4, 1e-5, 2, 0.05, 3, cache)
    (entry,) = list(tmp_path.glob("*.json"))
    again = cached_group_calibration(4, 1e-5, 2, 0.05, 3, cache)
    assert again == first and first.accountant == "pld-mog" and first.epsilon <= 4
    data = json.loads(entry.read_text())
    data["calibration"]["noise_multiplier"] *= 0.8  # tampered: too little noise for ε = 4
    entry.write_text(json.dumps(data))
    fixed = cached_group_calibration(4, 1e-5, 2, 0.05, 3, cache)
    assert fixed.noise_multiplier == pytest.approx(first.noise_multiplier, rel=1e-6)
    assert "recomputing" in caplog.text


@pytest.mark.parametrize("unit", ["userwise-k3-chunk", "group-k3-lowppl"])
def test_a_user_level_audit_adds_member_canary_units_as_units_of_their_own(monkeypatch, unit):
    """train_model with canary units (UserCanaries): the member units' k records join as units of their own, so
    the unit count, the sampling rate (q over units or over k-bounded records) and σ's accounting include them;
    a canary set with another k than the run's is refused."""
    from empriv.audit.user_level import generate_user_canaries
    from empriv.train.user_level import append_canary_units

    monkeypatch.setenv("WANDB_MODE", "disabled")
    params = _params()
    canaries = generate_user_canaries(design="random", n_units=10, records_per_unit=3, vocab_size=EOS + 1,
                                      eos_id=EOS, seed=1, prefix_length=4)
    members = len(canaries.member_units)
    assert 0 < members < 10
    ids, mask, units, tokens, scores = _corpus()
    n_units = len(set(units))
    run = RunConfig(8, 8, 4, 0.01, 0, unit)
    model, m = train_model(TrainRequest(params, run, _tiny_gpt2(), TrainingRecords(ids, mask, units, tokens, scores),
                                        tokenizer=_Tok(), canaries=canaries, job_type="audit"))
    assert m["n_units"] == n_units + members and m["n_canary_units_included"] == members
    assert m["n_canaries_included"] == 3 * members and m["canary_records_per_unit"] == 3 and m["n_data"] == 200
    slots = 3 * (n_units + members) if unit.startswith("group") else n_units + members
    assert m["sample_rate"] == pytest.approx(8 / slots) and m["epsilon_user_level"] <= 8 + 1e-2
    # the canary records: k per member unit, under their own unit names, all kept by every strategy
    a_ids, _, a_units, a_tokens, a_scores = append_canary_units(ids, mask, units, tokens, scores, canaries,
                                                                eos_id=EOS, seq_len=16)
    assert a_ids.shape[0] == 200 + 3 * members and a_units[200:203] == [f"canary-u{canaries.member_units[0]:05d}"] * 3
    assert list(a_tokens[200]) == list(canaries.unit_records(canaries.member_units[0])[0].tokens)
    assert len(a_scores) == 200 + 3 * members
    with pytest.raises(ConfigError, match="have 3 records each, the run's k is 2"):
        train_model(TrainRequest(params, RunConfig(8, 8, 4, 0.01, 0, "group-k2-random"), _tiny_gpt2(),
                                 TrainingRecords(ids, mask, units, tokens, scores), tokenizer=_Tok(),
                                 canaries=canaries))


def _tiny_gpt2():
    from tiny_models import tiny_gpt2

    return tiny_gpt2()
