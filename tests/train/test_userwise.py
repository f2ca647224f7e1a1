"""empriv.train.userwise: User-wise DP-SGD's per-unit gradient against a naive per-unit loop, its one-vector-per-unit
bound, unit Poisson sampling, the T-step loop and its input errors."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tiny_models import tiny_gpt2

from empriv.models.adapters import conv1d_to_linear
from empriv.models.lm import encode_fixed, per_sample_mean_nll
from empriv.train.sampling import poisson_unit_batches
from empriv.train.userwise import (
    UserwiseAggregator,
    fixed_records_per_unit,
    userwise_dp_sgd,
    userwise_noised_gradient,
)

EOS = 299


def make_records(unit_sizes: dict[int, int], seed: int = 0, shuffle: bool = True):
    """Random token records, ``unit_sizes[u]`` of them for unit u, in shuffled order: (ids, mask, unit_ids)."""
    g = torch.Generator().manual_seed(seed)
    units = [u for u, k in unit_sizes.items() for _ in range(k)]
    lists = [torch.randint(0, EOS, (int(torch.randint(2, 15, (1,), generator=g)),), generator=g).tolist() for _ in units]
    ids, mask = encode_fixed(lists, EOS, 16)
    unit_ids = torch.tensor(units)
    if shuffle:
        perm = torch.randperm(len(units), generator=g)
        ids, mask, unit_ids = ids[perm], mask[perm], unit_ids[perm]
    return ids, mask, unit_ids


def full_model(convert: bool = True):
    model = tiny_gpt2()
    if convert:
        conv1d_to_linear(model)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def lora_model(convert: bool = True):
    from peft import LoraConfig, get_peft_model

    model = tiny_gpt2()
    if convert:
        conv1d_to_linear(model)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["c_attn"], fan_in_fan_out=not convert,
                        bias="none", task_type="CAUSAL_LM")
    torch.manual_seed(1)
    model = get_peft_model(model, config)
    with torch.no_grad():  # LoRA's B starts at zero (so A's gradient would be 0): make both matter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    return model


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def naive_unit_gradients(model, ids, mask, unit_ids):
    """Each unit separately: plain autograd of the mean loss over its records. {unit: [grad per param]}."""
    params = trainable(model)
    out = {}
    for u in sorted(set(unit_ids.tolist())):
        rows = (unit_ids == u).nonzero().flatten()
        loss = per_sample_mean_nll(model, ids[rows], mask[rows]).mean()
        out[u] = [g.detach().clone() for g in torch.autograd.grad(loss, params)]
    return out


def norm(tensors) -> float:
    return math.sqrt(sum(float((t.double() ** 2).sum()) for t in tensors))


def naive_userwise_gradient(model, ids, mask, unit_ids, *, clip, sigma, expected, noise_seed):
    """The reference: clip each unit's gradient to C, sum, add N(0, σ²C²) drawn param by param, divide by q·N."""
    grads = naive_unit_gradients(model, ids, mask, unit_ids)
    total = [torch.zeros_like(p) for p in trainable(model)]
    for g in grads.values():
        n = norm(g)
        factor = 1.0 if n <= clip else clip / n
        for t, x in zip(total, g):
            t += factor * x
    gen = torch.Generator().manual_seed(noise_seed)
    if sigma > 0:
        for t in total:
            t += torch.normal(0.0, sigma * clip, size=t.shape, generator=gen)
    return [t / expected for t in total], {u: norm(g) for u, g in grads.items()}


SIZES = {7: 1, 42: 3, 3: 2, 11: 4, 5: 1}  # k' differs per unit; ids arbitrary and records shuffled


@pytest.mark.parametrize("strategy", ["per_unit", "per_record"])
@pytest.mark.parametrize("micro", [None, 3])
@pytest.mark.parametrize("make", [full_model, lora_model, lambda: full_model(convert=False), lambda: lora_model(convert=False)],
                         ids=["full", "lora", "full-conv1d", "lora-conv1d"])
def test_aggregated_noised_gradient_equals_naive_loop(make, micro, strategy):
    ids, mask, unit_ids = make_records(SIZES)
    model = make()
    reference = copy.deepcopy(model)
    sigma, expected = 0.7, 4.5
    _, norms = naive_userwise_gradient(reference, ids, mask, unit_ids, clip=1.0, sigma=0.0, expected=1.0, noise_seed=0)
    clip = sorted(norms.values())[len(norms) // 2]  # the median unit: some units clipped, some not
    assert sum(n > clip * 1.001 for n in norms.values()) >= 2 and sum(n < clip * 0.999 for n in norms.values()) >= 2
    want, _ = naive_userwise_gradient(reference, ids, mask, unit_ids, clip=clip, sigma=sigma, expected=expected, noise_seed=123)

    stats = userwise_noised_gradient(model, ids, mask, unit_ids, clip_norm=clip, noise_multiplier=sigma,
                                     expected_units=expected, noise_generator=torch.Generator().manual_seed(123),
                                     micro_batch_records=micro, strategy=strategy)
    got = [p.grad for p in trainable(model)]
    assert len(got) == len(want) and all(g is not None for g in got)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    assert stats.units == 5 and stats.records == 11
    assert stats.unit_order == (3, 5, 7, 11, 42)
    for u, n in zip(stats.unit_order, stats.unit_grad_norms):
        assert n == pytest.approx(norms[u], rel=1e-4)
    # the hooks are gone: a plain backward leaves no per-sample gradients
    per_sample_mean_nll(model, ids[:2], mask[:2]).sum().backward()
    assert all(getattr(p, "grad_sample", None) is None for p in trainable(model))


@pytest.mark.parametrize("strategy", ["per_unit", "per_record"])
def test_micro_batching_splits_units_but_not_their_clipping(strategy):
    """A 9-record unit spread over three micro-batches of 4 is still clipped once, as a whole."""
    ids, mask, unit_ids = make_records({0: 9, 1: 2, 2: 1}, seed=3)
    model = full_model()
    reference = copy.deepcopy(model)
    want, norms = naive_userwise_gradient(reference, ids, mask, unit_ids, clip=0.05, sigma=0.0, expected=2.0, noise_seed=0)
    assert min(norms.values()) > 0.05  # every unit clipped: summing partial gradients first matters
    for micro in (1, 4, 100):
        m = copy.deepcopy(model)
        userwise_noised_gradient(m, ids, mask, unit_ids, clip_norm=0.05, noise_multiplier=0.0, expected_units=2.0,
                                 noise_generator=None, micro_batch_records=micro, strategy=strategy)
        for g, w in zip([p.grad for p in trainable(m)], want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("strategy", ["per_unit", "per_record"])
def test_a_unit_contributes_one_clipped_vector_whatever_its_records(strategy):
    """Adding a unit of 12 high-loss records moves the noiseless sum by exactly C (record-level clipping would allow 12·C)."""
    base_ids, base_mask, base_units = make_records({0: 2, 1: 3}, seed=4)
    big_ids, big_mask, _ = make_records({9: 12}, seed=5)
    big_ids[:, 1:] = (big_ids[:, 1:] * 7 + 13) % EOS  # a different token process: large loss and gradient
    clip = 0.01
    model = full_model()

    def summed(ids, mask, units):
        m = copy.deepcopy(model)
        userwise_noised_gradient(m, ids, mask, units, clip_norm=clip, noise_multiplier=0.0, expected_units=1.0,
                                 noise_generator=None, strategy=strategy)
        return [p.grad.clone() for p in trainable(m)], m

    without, _ = summed(base_ids, base_mask, base_units)
    with_big, m = summed(torch.cat([base_ids, big_ids]), torch.cat([base_mask, big_mask]),
                         torch.cat([base_units, torch.full((12,), 9)]))
    per_record = naive_unit_gradients(m, big_ids, big_mask, torch.arange(12))
    assert min(norm(g) for g in per_record.values()) > 10 * clip  # each record alone would be clipped to C
    moved = norm([a - b for a, b in zip(with_big, without)])
    assert moved == pytest.approx(clip, rel=1e-4)
    assert norm(with_big) <= 3 * clip * (1 + 1e-5)  # three units, each at most C


@pytest.mark.parametrize("strategy", ["per_unit", "per_record"])
def test_sigma0_huge_clip_is_the_sum_of_unit_mean_gradients_over_expected_units(strategy):
    ids, mask, unit_ids = make_records(SIZES, seed=6)
    model = full_model()
    reference = copy.deepcopy(model)
    expected = 2.5
    losses = per_sample_mean_nll(reference, ids, mask)
    total = sum(losses[unit_ids == u].mean() for u in SIZES)
    (total / expected).backward()
    userwise_noised_gradient(model, ids, mask, unit_ids, clip_norm=1e9, noise_multiplier=0.0, expected_units=expected,
                             noise_generator=None, micro_batch_records=4, strategy=strategy)
    for g, p in zip([p.grad for p in trainable(model)], trainable(reference)):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)
    assert norm([p.grad for p in trainable(reference)]) > 0.1  # a real gradient


def test_empty_step_is_pure_noise_over_expected_units():
    model = full_model()
    ids, mask = torch.zeros((0, 16), dtype=torch.long), torch.zeros((0, 16))
    stats = userwise_noised_gradient(model, ids, mask, torch.zeros(0, dtype=torch.long), clip_norm=0.5,
                                     noise_multiplier=2.0, expected_units=4.0, noise_generator=torch.Generator().manual_seed(9))
    assert stats.units == 0 and stats.records == 0 and math.isnan(stats.mean_unit_loss)
    gen = torch.Generator().manual_seed(9)
    for p in trainable(model):
        torch.testing.assert_close(p.grad, torch.normal(0.0, 1.0, size=p.shape, generator=gen) / 4.0)
    z = torch.cat([p.grad.flatten() for p in trainable(model)]) * 4.0 / (2.0 * 0.5)
    assert z.numel() > 5000 and abs(float(z.mean())) < 0.05 and float(z.std()) == pytest.approx(1.0, abs=0.05)


def test_poisson_unit_sampling_rate_and_reproducibility():
    n, q, steps = 200, 0.1, 300
    batches = list(poisson_unit_batches(n, q, steps, torch.Generator().manual_seed(0)))
    sizes = torch.tensor([b.numel() for b in batches], dtype=torch.float64)
    rate = float(sizes.sum()) / (n * steps)
    assert rate == pytest.approx(q, abs=4 * math.sqrt(q * (1 - q) / (n * steps)))
    assert float(sizes.std()) == pytest.approx(math.sqrt(n * q * (1 - q)), rel=0.15)  # binomial batch sizes
    per_unit = torch.zeros(n)
    for b in batches:
        per_unit[b] += 1
    assert float(per_unit.max()) / steps < 0.25 and float(per_unit.min()) / steps > 0.01  # no unit favoured
    again = list(poisson_unit_batches(n, q, steps, torch.Generator().manual_seed(0)))
    other = list(poisson_unit_batches(n, q, steps, torch.Generator().manual_seed(1)))
    assert all(torch.equal(a, b) for a, b in zip(batches, again))
    assert sum(not torch.equal(a, b) for a, b in zip(batches, other)) > 250


def unit_corpus(n_units=12, seed=7):
    g = torch.Generator().manual_seed(seed)
    sizes = {u: int(torch.randint(1, 4, (1,), generator=g)) for u in range(n_units)}
    return make_records(sizes, seed=seed)


def test_run_records_units_and_records_per_step_and_steps_every_time():
    ids, mask, unit_of_record = unit_corpus()
    select = fixed_records_per_unit(ids, mask, unit_of_record)
    n_units, q, steps = 12, 0.1, 12  # P(empty step) = 0.9^12 ≈ 0.28
    model = full_model()
    before = [p.detach().clone() for p in trainable(model)]
    seen = []
    opt = torch.optim.SGD(trainable(model), lr=0.1)
    res = userwise_dp_sgd(model, opt, select, n_units=n_units, unit_sample_rate=q, steps=steps, clip_norm=0.5,
                          noise_multiplier=1.0, sampler_generator=torch.Generator().manual_seed(2),
                          noise_generator=torch.Generator().manual_seed(3), micro_batch_records=3, strategy="per_record",
                          on_step=lambda s, st: seen.append((s, st.units, st.records)))
    want = list(poisson_unit_batches(n_units, q, steps, torch.Generator().manual_seed(2)))
    assert res.unit_batches == [b.tolist() for b in want]
    assert res.units_per_step == [b.numel() for b in want]
    counts = torch.bincount(unit_of_record, minlength=n_units)
    assert res.records_per_step == [int(counts[b].sum()) for b in want]
    assert res.empty_steps == sum(b.numel() == 0 for b in want) >= 1  # this seed has empty steps
    assert seen == [(s, u, r) for s, (u, r) in enumerate(zip(res.units_per_step, res.records_per_step))]
    assert res.expected_units == pytest.approx(1.2)
    assert all(math.isnan(x) == (u == 0) for x, u in zip(res.losses, res.units_per_step))
    assert all(getattr(p, "grad_sample", None) is None and p.grad is None for p in trainable(model))
    assert not model.training
    assert all(bool((p != b).any()) for p, b in zip(trainable(model), before))  # noise moved every parameter

    model2 = full_model()
    res2 = userwise_dp_sgd(model2, torch.optim.SGD(trainable(model2), lr=0.1), select, n_units=n_units,
                           unit_sample_rate=q, steps=steps, clip_norm=0.5, noise_multiplier=1.0,
                           sampler_generator=torch.Generator().manual_seed(2), noise_generator=torch.Generator().manual_seed(3))
    assert res2.unit_batches == res.unit_batches
    for a, b in zip(trainable(model), trainable(model2)):  # strategy and micro-batching (3 vs all) change nothing
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_one_run_step_is_sgd_on_the_aggregated_gradient():
    ids, mask, unit_of_record = unit_corpus(seed=8)
    select = fixed_records_per_unit(ids, mask, unit_of_record)
    model = full_model()
    reference = copy.deepcopy(model)
    userwise_dp_sgd(model, torch.optim.SGD(trainable(model), lr=0.5), select, n_units=12, unit_sample_rate=0.5, steps=1,
                    clip_norm=0.2, noise_multiplier=0.8, sampler_generator=torch.Generator().manual_seed(4),
                    noise_generator=torch.Generator().manual_seed(5))
    units = next(poisson_unit_batches(12, 0.5, 1, torch.Generator().manual_seed(4)))
    r_ids, r_mask, r_units = select(0, units)
    assert units.numel() >= 3
    want, _ = naive_userwise_gradient(reference, r_ids, r_mask, r_units, clip=0.2, sigma=0.8, expected=6.0, noise_seed=5)
    with torch.no_grad():
        for p, g in zip(trainable(reference), want):
            p.sub_(0.5 * g)
    for a, b in zip(trainable(model), trainable(reference)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_nonprivate_reference_is_the_mean_of_unit_gradients_and_skips_empty_steps():
    ids, mask, unit_of_record = unit_corpus(seed=9)
    select = fixed_records_per_unit(ids, mask, unit_of_record)
    model = full_model()
    reference = copy.deepcopy(model)
    res = userwise_dp_sgd(model, torch.optim.SGD(trainable(model), lr=0.3), select, n_units=12, unit_sample_rate=0.4,
                          steps=1, clip_norm=None, noise_multiplier=None, sampler_generator=torch.Generator().manual_seed(6))
    units = next(poisson_unit_batches(12, 0.4, 1, torch.Generator().manual_seed(6)))
    assert res.units_per_step == [units.numel()] and units.numel() >= 2
    r_ids, r_mask, r_units = select(0, units)
    grads = naive_unit_gradients(reference, r_ids, r_mask, r_units)
    with torch.no_grad():
        for i, p in enumerate(trainable(reference)):
            p.sub_(0.3 * sum(g[i] for g in grads.values()) / len(grads))
    for a, b in zip(trainable(model), trainable(reference)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)

    empty_model = full_model()
    before = [p.detach().clone() for p in trainable(empty_model)]
    res = userwise_dp_sgd(empty_model, torch.optim.SGD(trainable(empty_model), lr=0.3), select, n_units=12,
                          unit_sample_rate=1e-9, steps=2, clip_norm=None, noise_multiplier=None,
                          sampler_generator=torch.Generator().manual_seed(0))
    assert res.empty_steps == 2 and res.units_per_step == [0, 0]
    assert all(torch.equal(p, b) for p, b in zip(trainable(empty_model), before))


def test_selector_returning_an_unsampled_unit_is_refused():
    ids, mask, unit_of_record = unit_corpus(seed=10)

    def leaky(step, units):
        return ids[:2], mask[:2], torch.tensor([999, 999])

    model = full_model()
    with pytest.raises(ValueError, match=r"not sampled at step 0: \[999\]"):
        userwise_dp_sgd(model, torch.optim.SGD(trainable(model), lr=0.1), leaky, n_units=12, unit_sample_rate=1.0,
                        steps=1, clip_norm=1.0, noise_multiplier=1.0, sampler_generator=torch.Generator().manual_seed(0),
                        noise_generator=torch.Generator().manual_seed(0))
    assert all(getattr(p, "grad_sample", None) is None for p in trainable(model))  # hooks removed on error


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"clip_norm": 0.0}, r"^clip_norm \(C\): out of range \(got 0\.0; allowed: a finite number > 0\)$"),
        ({"clip_norm": -1}, r"^clip_norm \(C\): out of range \(got -1; allowed: a finite number > 0\)$"),
        ({"clip_norm": float("nan")},
         r"^clip_norm \(C\): not a finite number \(got nan; allowed: a finite number > 0\)$"),
        ({"noise_multiplier": -0.5},
         r"^noise_multiplier \(σ\): out of range \(got -0\.5; allowed: a finite number >= 0\)$"),
        ({"expected_units": 0}, r"^expected_units \(q·N\): out of range \(got 0; allowed: a finite number > 0\)$"),
        ({"unit_ids": torch.tensor([0, 1])}, r"^unit_ids must have one entry per record \(3\), got shape \(2,\)$"),
        ({"unit_ids": torch.tensor([0.0, 1.0, 1.0])}, r"^unit_ids must be integers, got dtype torch\.float32$"),
        ({"mask": torch.ones(3, 5)}, r"^mask shape \(3, 5\) must equal ids shape \(3, 16\)$"),
        ({"micro_batch_records": 0}, r"^micro_batch_records: out of range \(got 0; allowed: an integer >= 1\)$"),
        ({"noise_generator": None}, r"^noise_generator must be a torch\.Generator when noise_multiplier > 0, got NoneType$"),
        ({"strategy": "vmap"}, r"^strategy must be one of per_unit, per_record, got 'vmap'$"),
    ],
)
def test_bad_step_input_is_one_line_value_error(kwargs, message):
    ids, mask, unit_ids = make_records({0: 2, 1: 1}, shuffle=False)
    call = {"ids": ids, "mask": mask, "unit_ids": unit_ids, "clip_norm": 1.0, "noise_multiplier": 1.0,
            "expected_units": 2.0, "noise_generator": torch.Generator().manual_seed(0), **kwargs}
    model = full_model()
    with pytest.raises(ValueError, match=message) as err:
        userwise_noised_gradient(model, call.pop("ids"), call.pop("mask"), call.pop("unit_ids"), **call)
    assert "\n" not in str(err.value)
    assert all(getattr(p, "grad_sample", None) is None for p in trainable(model))


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5, float("nan")])
def test_bad_unit_sample_rate(q):
    with pytest.raises(ValueError, match=r"^unit_sample_rate \(q\): (out of range|not a finite number) \(got "):
        next(poisson_unit_batches(10, q, 1, torch.Generator()))
    model = full_model()
    with pytest.raises(ValueError, match=r"^unit_sample_rate \(q\): (out of range|not a finite number) \(got "):
        userwise_dp_sgd(model, torch.optim.SGD(trainable(model), lr=0.1), lambda s, u: None, n_units=10,
                        unit_sample_rate=q, steps=1, clip_norm=1.0, noise_multiplier=1.0,
                        sampler_generator=torch.Generator(), noise_generator=torch.Generator())


def test_bad_sampler_arguments():
    with pytest.raises(ValueError, match=r"^n_units: out of range \(got 0; allowed: an integer >= 1\)$"):
        next(poisson_unit_batches(0, 0.5, 1, torch.Generator()))
    with pytest.raises(ValueError, match=r"^steps: out of range \(got 0; allowed: an integer >= 1\)$"):
        next(poisson_unit_batches(5, 0.5, 0, torch.Generator()))
    with pytest.raises(ValueError, match=r"^generator must be a torch\.Generator \(a seeded stream\), got int$"):
        next(poisson_unit_batches(5, 0.5, 1, 42))


def test_aggregator_usable_across_steps_and_refuses_after_close():
    ids, mask, unit_ids = make_records({0: 2, 1: 2}, seed=11)
    model = full_model()
    with UserwiseAggregator(model, clip_norm=0.1, noise_multiplier=0.0, expected_units=2.0, strategy="per_record") as agg:
        agg(ids, mask, unit_ids, noise_generator=None)
        first = [p.grad.clone() for p in trainable(model)]
        agg(ids, mask, unit_ids, noise_generator=None)  # no accumulation from the previous call
        for a, p in zip(first, trainable(model)):
            torch.testing.assert_close(p.grad, a)
    with pytest.raises(ValueError, match="closed"):
        agg(ids, mask, unit_ids, noise_generator=None)
