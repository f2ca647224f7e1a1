"""empriv.train.sampling: Poisson batches and micro-batches."""

from __future__ import annotations

import math

import pytest
import torch

from empriv.train.sampling import micro_batches, poisson_batches


def test_poisson_batch_sizes_have_mean_qn_and_binomial_variance():
    n, q, steps = 1000, 0.1, 2000
    sizes = torch.tensor([b.numel() for b in poisson_batches(n, q, steps, torch.Generator().manual_seed(0))], dtype=torch.float64)
    assert len(sizes) == steps
    # mean of 2000 Binomial(1000, 0.1): 100 with standard error sqrt(90/2000) ≈ 0.21; 6 SE tolerance
    se = math.sqrt(n * q * (1 - q) / steps)
    assert abs(float(sizes.mean()) - q * n) < 6 * se
    # variance n q (1 - q) = 90 (relative s.e. of a sample variance ≈ sqrt(2/steps) ≈ 3 %)
    assert float(sizes.var()) == pytest.approx(n * q * (1 - q), rel=0.2)
    assert float(sizes.std()) > 5  # sizes really vary: not a fixed batch


def test_each_example_joins_independently_with_rate_q():
    n, q, steps = 50, 0.2, 3000
    counts = torch.zeros(n)
    for b in poisson_batches(n, q, steps, torch.Generator().manual_seed(1)):
        assert b.dtype == torch.long
        assert torch.equal(b, torch.unique(b))  # sorted, no duplicates
        assert b.numel() == 0 or (0 <= int(b.min()) and int(b.max()) < n)
        counts[b] += 1
    rate = counts / steps
    se = math.sqrt(q * (1 - q) / steps)  # ≈ 0.0073
    assert float((rate - q).abs().max()) < 6 * se


def test_empty_batches_occur_for_tiny_q():
    sizes = [b.numel() for b in poisson_batches(100, 0.001, 200, torch.Generator().manual_seed(0))]
    empties = sum(s == 0 for s in sizes)
    # P(empty) = 0.999^100 ≈ 0.905: expect ≈ 181 of 200 (sd ≈ 4.2)
    assert 150 < empties < 200
    assert len(sizes) == 200


def test_same_seed_same_batches():
    a = [b.tolist() for b in poisson_batches(200, 0.05, 20, torch.Generator().manual_seed(7))]
    b = [b.tolist() for b in poisson_batches(200, 0.05, 20, torch.Generator().manual_seed(7))]
    c = [b.tolist() for b in poisson_batches(200, 0.05, 20, torch.Generator().manual_seed(8))]
    assert a == b and a != c


def test_rate_one_takes_everyone():
    for b in poisson_batches(17, 1.0, 3, torch.Generator().manual_seed(0)):
        assert b.tolist() == list(range(17))


@pytest.mark.parametrize("q, steps, match", [
    (0.0, 1, r"sample_rate: out of range \(got 0.0; allowed: a finite number in \(0, 1\]\)"),
    (1.5, 1, "got 1.5"), (0.1, 0, r"steps: out of range \(got 0; allowed: an integer >= 1\)")])
def test_poisson_errors(q, steps, match):
    with pytest.raises(ValueError, match=match):
        next(iter(poisson_batches(10, q, steps, torch.Generator())))


def test_micro_batches_split_and_preserve_indices():
    idx = torch.tensor([3, 8, 9, 15, 21, 22, 40])
    parts = micro_batches(idx, 3)
    assert [p.tolist() for p in parts] == [[3, 8, 9], [15, 21, 22], [40]]
    assert torch.equal(torch.cat(parts), idx)
    assert [p.tolist() for p in micro_batches(idx, 7)] == [idx.tolist()]
    assert [p.tolist() for p in micro_batches(idx, 100)] == [idx.tolist()]
    assert [p.tolist() for p in micro_batches(idx, 1)] == [[i] for i in idx.tolist()]


def test_micro_batches_of_empty_batch():
    parts = micro_batches(torch.tensor([], dtype=torch.long), 4)
    assert len(parts) == 1 and parts[0].numel() == 0


def test_micro_batches_bad_size():
    with pytest.raises(ValueError, match=r"micro batch size: out of range \(got 0; allowed: an integer >= 1\)"):
        micro_batches(torch.arange(3), 0)


# ----------------------------------------------------------------------------- the privacy unit as a strategy


def test_record_and_group_sampling_draw_the_poisson_batches_from_step_start():
    from empriv.train.sampling import GroupSampling, RecordSampling

    want = list(poisson_batches(24, 0.25, 5, torch.Generator().manual_seed(0)))
    got = list(RecordSampling(24, 0.25).batches(torch.Generator().manual_seed(0), start=0, steps=5))
    assert [b.tolist() for b in got] == [b.tolist() for b in want]
    # Group Privacy: the same draws over units × k slots, q = b / (N·K)
    group = GroupSampling.of(6, 4, 6)
    assert (group.n, group.sample_rate, group.unit) == (24, 0.25, "group")
    resumed = torch.Generator().manual_seed(0)
    list(poisson_batches(24, 0.25, 2, resumed))  # the sampler's position after 2 steps is its generator's state
    rest = list(group.batches(resumed, start=2, steps=5))
    assert [b.tolist() for b in rest] == [b.tolist() for b in want[2:]]
    assert list(group.batches(resumed, start=5, steps=5)) == []
    with pytest.raises(ValueError, match=r"n must be units × k = 6 × 4 = 24 slots, got 20"):
        GroupSampling(n=20, sample_rate=0.1, n_units=6, k=4)
