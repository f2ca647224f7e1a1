"""empriv.score.memorization: VMR, continuation NLL and exposure gap on a model that memorised a string."""

from __future__ import annotations

import random

import pytest
import torch

from empriv.score.memorization import (
    aggregate,
    continuation_nll,
    exposure_gap,
    make_controls,
    score_secrets,
    verbatim_memorization_ratio,
)
from empriv.score.perturb import perturb
from empriv.secrets.records import split_secret
from tiny_models import tiny_gpt2, train_to_memorise

SECRET = "Rita Mcconnell\nEB 5781\n713-345-6593"


@pytest.fixture(scope="module")
def small_bpe(corpus):
    from empriv.models.tokenizer import train_bpe

    return train_bpe([e.text for e in corpus.public[:300]], 300)


def _fresh(tok):
    return tiny_gpt2(vocab_size=tok.vocab_size, n_embd=32, n_head=2, n_layer=1, n_positions=64, seed=0)


@pytest.fixture(scope="module")
def memorised(small_bpe):
    """A tiny GPT-2 trained non-privately on SECRET repeated (150 Adam steps)."""
    tok = small_bpe
    model = _fresh(tok)
    assert train_to_memorise(model, tok, SECRET) < 0.05
    return model


def _Score():
    from empriv.config import ScoreParams

    return ScoreParams()


def test_memorised_string_scores(memorised, small_bpe):
    tok = small_bpe
    prompt, cont = split_secret(SECRET)
    assert cont == "-345-6593"
    vmr = verbatim_memorization_ratio(memorised, tok, prompt, cont, num_samples=10, generator=torch.Generator().manual_seed(0))
    assert vmr == 1.0
    total, n_tokens = continuation_nll(memorised, tok, prompt, cont)
    assert n_tokens == len(tok.encode(cont)) and n_tokens >= 2
    assert total < 0.5
    controls = perturb(SECRET, 20, random.Random(0))
    gap, secret_nll = exposure_gap(memorised, tok, SECRET, controls)
    assert secret_nll < 1.0
    assert gap > 10.0  # redrawn digits and swapped names cost many nats


def test_untrained_model_scores(small_bpe, memorised):
    tok = small_bpe
    model = _fresh(tok)
    prompt, cont = split_secret(SECRET)
    vmr = verbatim_memorization_ratio(model, tok, prompt, cont, num_samples=10, generator=torch.Generator().manual_seed(0))
    assert vmr == 0.0
    total, n_tokens = continuation_nll(model, tok, prompt, cont)
    assert total / n_tokens == pytest.approx(torch.log(torch.tensor(300.0)).item(), abs=0.5)  # ≈ uniform
    controls = perturb(SECRET, 20, random.Random(0))
    gap, secret_nll = exposure_gap(model, tok, SECRET, controls)
    assert secret_nll > 50.0  # ≈ log(300) per token: nothing is known about the string
    # (an untrained model's gap is not 0 — controls differ in token count — but training on the
    # string raises it by far more)
    mem_gap, _ = exposure_gap(memorised, tok, SECRET, controls)
    assert mem_gap - gap > 10.0


def test_exposure_gap_definition(memorised, small_bpe):
    from empriv.models.lm import conditional_nll

    tok = small_bpe
    controls = perturb(SECRET, 5, random.Random(1))
    nlls = conditional_nll(memorised, [[tok.eos_id]] * 6, [tok.encode(t) for t in [SECRET, *controls]])
    gap, secret_nll = exposure_gap(memorised, tok, SECRET, controls, batch_size=2)
    assert secret_nll == pytest.approx(nlls[0], rel=1e-5)
    assert gap == pytest.approx(sum(nlls[1:]) / 5 - nlls[0], rel=1e-5)


def test_score_secrets_rows_and_aggregate(memorised, small_bpe):
    tok = small_bpe
    other = "Forwarded by Stacy B Dasovich/CAL/Enron"
    secrets = []
    for i, text in enumerate([SECRET, other]):
        p, c = split_secret(text)
        secrets.append({"id": f"secret-{i:02d}", "kind": "phone_block", "text": text, "prompt": p, "continuation": c,
                        "occurrences": 3 * (i + 1), "frequency": 0.01 * (i + 1)})
    controls = make_controls(secrets, 10, seed=0)
    rows = score_secrets(memorised, tok, secrets, controls, _Score())
    assert [r["id"] for r in rows] == ["secret-00", "secret-01"]
    for r in rows:
        assert set(r) == {"id", "vmr", "vmr_greedy", "continuation_nll", "continuation_nll_total", "secret_nll",
                          "exposure_gap", "kind", "occurrences", "frequency"}
        assert not any(isinstance(v, str) and v not in (r["id"], "phone_block") for v in r.values())  # no text leaves
    assert [(r["occurrences"], r["frequency"]) for r in rows] == [(3, 0.01), (6, 0.02)]  # the secret's, copied
    assert rows[0]["vmr"] == 1.0 and rows[1]["vmr"] == 0.0
    assert rows[0]["vmr_greedy"] == 1.0 and rows[1]["vmr_greedy"] == 0.0
    assert rows[0]["exposure_gap"] > rows[1]["exposure_gap"]
    assert rows[0]["continuation_nll"] < rows[1]["continuation_nll"]
    agg = aggregate(rows)
    assert agg["vmr_mean"] == 0.5 and agg["vmr_worst"] == agg["vmr_max"] == 1.0
    assert agg["vmr_greedy_mean"] == 0.5 and agg["vmr_greedy_max"] == 1.0
    assert agg["exposure_gap_worst"] == rows[0]["exposure_gap"]
    assert agg["exposure_gap_mean"] == pytest.approx((rows[0]["exposure_gap"] + rows[1]["exposure_gap"]) / 2)
    assert agg["continuation_nll_worst"] == rows[0]["continuation_nll"]  # worst = lowest NLL
    # same seed, same scores
    assert score_secrets(memorised, tok, secrets, controls, _Score()) == rows


def test_aggregate_by_hand():
    rows = [
        {"vmr": 0.0, "exposure_gap": 1.0, "continuation_nll": 3.0, "acr": 0.5, "acr_success": True, "acr_upper_bound": None},
        {"vmr": 0.2, "exposure_gap": -1.0, "continuation_nll": 2.0, "acr": 2.5, "acr_success": True, "acr_upper_bound": None},
        {"vmr": 0.4, "exposure_gap": 3.0, "continuation_nll": 4.0, "acr": None},  # ACR not searched for this one
    ]
    assert aggregate(rows) == pytest.approx({
        "vmr_mean": 0.2, "vmr_worst": 0.4, "vmr_max": 0.4, "exposure_gap_mean": 1.0, "exposure_gap_worst": 3.0,
        "continuation_nll_mean": 3.0, "continuation_nll_worst": 2.0, "acr_mean": 1.5, "acr_max": 2.5,
        "acr_n_searched": 2, "acr_n_success": 2, "acr_success_rate": 1.0, "acr_bound_max": None,
    })
    assert aggregate([{"air": 1.0}, {"air": 0.0}, {"air": 0.0}, {"air": 0.0}]) == {"air_mean": 0.25, "air_max": 1.0}


def _acr(value=None, bound=None):
    return {"acr": value, "acr_success": value is not None, "acr_upper_bound": bound}


def test_aggregate_acr_over_successes_only():
    """Failures count in the success rate and nowhere else: their bounds never enter acr_mean / acr_max."""
    rows = [_acr(2.6), _acr(bound=25 / 11), _acr(1.3), _acr(bound=13 / 11), _acr(bound=10 / 11),
            {"acr": None, "acr_skipped": "too long for the model's window"}]  # not searched: not counted
    agg = aggregate(rows)
    assert agg["acr_n_searched"] == 5 and agg["acr_n_success"] == 2
    assert agg["acr_success_rate"] == pytest.approx(2 / 5)
    assert agg["acr_mean"] == pytest.approx((2.6 + 1.3) / 2)  # 1.95, not (2.6 + 1.3 + bounds) / 5
    assert agg["acr_max"] == pytest.approx(2.6)  # the 25/11 = 2.27 bound is not a measurement
    assert agg["acr_bound_max"] == pytest.approx(25 / 11)


def test_aggregate_acr_all_failures_has_no_value():
    agg = aggregate([_acr(bound=13 / 11), _acr(bound=10 / 11), _acr(bound=26 / 11)])
    assert agg["acr_mean"] is None and agg["acr_max"] is None
    assert agg["acr_success_rate"] == 0.0 and agg["acr_n_success"] == 0 and agg["acr_n_searched"] == 3
    assert agg["acr_bound_max"] == pytest.approx(26 / 11)
    # nothing searched (ACR off, or every secret too long): no ACR key at all
    assert not any(k.startswith("acr") for k in aggregate([{"vmr": 0.0, "acr": None, "acr_skipped": "too long"}]))
    with pytest.raises(ValueError, match="acr_success true has no acr value"):
        aggregate([{"acr": None, "acr_success": True}])


def _searched(freq=None, value=None, bound=None, occurrences=None):
    return {**_acr(value, bound), "frequency": freq, "occurrences": occurrences}


def test_aggregate_acr_reports_frequent_and_rare_secrets_apart():
    """Frequent secrets keep the acr_* keys, rare ones (frequency ≤ rare_frequency) get acr_rare_*; in each group a
    failure counts in the rate and never in the mean."""
    from empriv.score.memorization import aggregate_acr

    rows = [_searched(0.08, 3.0), _searched(0.06, bound=2.5), _searched(0.04, 1.0),  # frequent: 2/3, mean 2.0
            _searched(0.01, 1.4), _searched(0.005, bound=4.0), _searched(0.001, bound=1.1),  # rare: 1/3, mean 1.4
            _searched(0.002, bound=0.9), {"frequency": 0.001, "acr": None, "acr_skipped": "too long"}]  # not searched
    agg = aggregate_acr(rows, rare_frequency=0.01)
    assert agg == pytest.approx({
        "acr_n_searched": 3, "acr_n_success": 2, "acr_success_rate": 2 / 3, "acr_mean": 2.0, "acr_max": 3.0,
        "acr_bound_max": 2.5,  # the rare failures' bound 4.0 is not the frequent secrets'
        "acr_rare_n_searched": 4, "acr_rare_n_success": 1, "acr_rare_success_rate": 0.25,
        "acr_rare_mean": 1.4})  # not (1.4 + 4.0 + 1.1 + 0.9) / 4: the bounds are not measurements
    # 0.01 itself is rare (≤), and a lower split moves it to the frequent group
    low = aggregate_acr(rows, rare_frequency=0.005)
    assert (low["acr_n_searched"], low["acr_n_success"], low["acr_mean"]) == (4, 3, pytest.approx((3.0 + 1.0 + 1.4) / 3))
    assert (low["acr_rare_n_searched"], low["acr_rare_n_success"], low["acr_rare_mean"]) == (3, 0, None)
    assert low["acr_rare_success_rate"] == 0.0
    # through aggregate, with the library default split (score.acr.rare_frequency's default, 0.01)
    assert {k: v for k, v in aggregate(rows).items() if k.startswith("acr")} == agg


def test_aggregate_acr_without_rare_secrets_has_no_rare_keys_and_all_rare_no_frequent_keys():
    from empriv.score.memorization import aggregate_acr

    frequent = [_searched(0.08, 2.0), _searched(0.05, bound=1.5), _searched(None, 1.0)]  # unknown frequency: frequent
    agg = aggregate_acr(frequent, rare_frequency=0.01)
    assert not any(k.startswith("acr_rare") for k in agg)
    assert (agg["acr_n_searched"], agg["acr_n_success"], agg["acr_mean"]) == (3, 2, pytest.approx(1.5))
    # every searched secret rare: the frequent keys are absent (not a success rate 0 of 0 searches)
    rare = [_searched(0.001, bound=1.2), _searched(0.002, bound=0.8), _searched(occurrences=3, value=2.0)]
    agg = aggregate_acr(rare, rare_frequency=0.01, n_train=3000)  # 3 / 3000 = 0.001: rare
    assert agg == {"acr_rare_n_searched": 3, "acr_rare_n_success": 1, "acr_rare_success_rate": pytest.approx(1 / 3),
                   "acr_rare_mean": 2.0}
    # without n_train the occurrences-only secret has no frequency: it counts as frequent
    agg = aggregate_acr(rare, rare_frequency=0.01)
    assert (agg["acr_n_searched"], agg["acr_n_success"], agg["acr_mean"], agg["acr_bound_max"]) == (1, 1, 2.0, None)
    assert (agg["acr_rare_n_searched"], agg["acr_rare_n_success"], agg["acr_rare_mean"]) == (2, 0, None)
    with pytest.raises(ValueError, match=r"rare_frequency must be a number in \[0, 1\), got 1\.5"):
        aggregate_acr(rare, rare_frequency=1.5)


def test_exposure_gap_vs_base_subtracts_the_base_models_gap(memorised, small_bpe):
    tok = small_bpe
    p, c = split_secret(SECRET)
    secrets = [{"id": "secret-00", "text": SECRET, "prompt": p, "continuation": c}]
    controls = make_controls(secrets, 10, seed=0)
    rows = score_secrets(memorised, tok, secrets, controls, _Score(), base_model=memorised)
    # Against itself the base-relative gap is exactly 0, whatever the raw gap is.
    assert rows[0]["exposure_gap"] > 1.0
    assert rows[0]["exposure_gap_base"] == pytest.approx(rows[0]["exposure_gap"])
    assert rows[0]["exposure_gap_vs_base"] == pytest.approx(0.0, abs=1e-6)
    agg = aggregate(rows)
    assert agg["exposure_gap_vs_base_mean"] == pytest.approx(0.0, abs=1e-6)
