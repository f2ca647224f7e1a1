"""empriv.audit.user_level: canary units (membership per unit), their training records, per-unit aggregation,
the user-level one-run bound, and real User-wise DP-SGD on a tiny GPT-2: a calibrated ε = 2 gives ε̂ ≤ 2, no noise
(non-private, or clipped with σ = 0) gives a clearly positive ε̂."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import tiny_gpt2

from empriv.audit.epsilon import one_run_epsilon_lower_bound, top_r_audit
from empriv.audit.user_level import (
    UserCanaries,
    add_member_canary_units,
    aggregate_unit_scores,
    audit_user_canaries,
    generate_user_canaries,
    user_level_audit,
)
from empriv.models.adapters import prepare_for_finetuning
from empriv.models.lm import encode_fixed
from empriv.privacy.user_level import calibrate_user_wise
from empriv.secrets.canaries import encode_canaries, extend_vocabulary, generate_canaries
from empriv.train.userwise import fixed_records_per_unit, userwise_dp_sgd

V, EOS, SEQ = 300, 299, 16
DELTA = 1e-5


def canaries(design="random", m=400, k=3, seed=0, **kw) -> UserCanaries:
    return generate_user_canaries(design=design, n_units=m, records_per_unit=k, vocab_size=V, eos_id=EOS, seed=seed,
                                  prefix_length=4, seq_len=SEQ, **kw)


# ----------------------------------------------------------------------------- canary units
def test_membership_is_per_unit_deterministic_and_about_half():
    uc = canaries(m=400, k=3, seed=0)
    assert uc.n_units == 400 and len(uc.records) == 1200
    for i in range(uc.n_units):
        recs = uc.unit_records(i)
        assert [c.id for c in recs] == [f"u{i:05d}-r{j}" for j in range(3)]
        assert len({c.member for c in recs}) == 1  # all or none of a unit's records are members
        assert recs[0].member == bool(uc.unit_labels[i])
        assert len({c.secret for c in recs}) == 1  # one secret per unit, after k different prefixes
    assert len({c.prefix for c in uc.records}) == 1200  # every record has its own prefix
    frac = uc.unit_labels.mean()
    assert 0.42 < frac < 0.58  # Bernoulli(1/2) over 400 units: sd 0.025
    # the unit coins are generate_canaries' coins for the same seed (one per unit, not per record)
    plain = generate_canaries(design="random", n_canaries=400, vocab_size=V, eos_id=EOS, seed=0, prefix_length=4)
    assert uc.unit_labels.tolist() == [c.member for c in plain.canaries]
    assert [uc.unit_records(i)[0].prefix for i in range(400)] == [c.prefix for c in plain.canaries]
    # deterministic for a seed, different for another
    again = canaries(m=400, k=3, seed=0)
    assert again.records == uc.records
    other = canaries(m=400, k=3, seed=1)
    assert other.unit_labels.tolist() != uc.unit_labels.tolist()
    s = uc.public_summary()
    assert s["n_units"] == 400 and s["n_member_units"] == int(uc.unit_labels.sum()) and s["records_per_unit"] == 3
    assert "prefix" not in s and "secret" not in s


def test_new_token_units_share_their_own_fresh_tokens(tmp_path):
    uc = canaries(design="new_token", m=50, k=4, seed=3, secret_length=2)
    assert uc.canary_set.n_new_tokens == 100  # one secret per unit, not per record
    for i in range(50):
        assert {c.secret for c in uc.unit_records(i)} == {(V + 2 * i, V + 2 * i + 1)}
    uc.save(tmp_path)
    back = UserCanaries.load(tmp_path)
    assert back.records_per_unit == 4 and back.records == uc.records
    assert back.unit_labels.tolist() == uc.unit_labels.tolist()
    record_level = generate_canaries(design="random", n_canaries=4, vocab_size=V, eos_id=EOS, seed=0, prefix_length=4)
    record_level.save(tmp_path / "plain")
    with pytest.raises(ValueError, match="records_per_unit"):
        UserCanaries.load(tmp_path / "plain")


def test_training_records_put_each_member_unit_in_its_own_unit_after_the_corpus():
    uc = canaries(m=20, k=3, seed=2)
    lists = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]]
    ids, mask = encode_fixed(lists, EOS, SEQ)
    corpus_units = torch.tensor([0, 5, 5, 7])  # ids need not be contiguous: canaries start after the largest
    rec = add_member_canary_units(ids, mask, corpus_units, uc, eos_id=EOS, seq_len=SEQ)
    members = uc.member_units
    assert 0 < len(members) < 20
    assert rec.ids.shape == (4 + 3 * len(members), SEQ)
    assert rec.n_corpus_units == 3 and rec.n_units == 8 + len(members)
    assert rec.unit_ids[:4].tolist() == [0, 5, 5, 7]
    assert rec.unit_ids[4:].tolist() == [u for u in range(8, 8 + len(members)) for _ in range(3)]
    assert rec.canary_units == {f"u{i:05d}": 8 + j for j, i in enumerate(members)}
    want_ids, want_mask = encode_canaries([c for i in members for c in uc.unit_records(i)], EOS, SEQ, "sft")
    assert torch.equal(rec.ids[4:], want_ids) and torch.equal(rec.mask[4:], want_mask)
    assert torch.equal(rec.ids[:4], ids) and torch.equal(rec.mask[:4], mask)
    # User-wise DP-SGD's selector hands a sampled canary unit all k of its records, and nothing else
    sel = fixed_records_per_unit(rec.ids, rec.mask, rec.unit_ids)
    u = rec.canary_units[f"u{members[0]:05d}"]
    got_ids, _, got_units = sel(0, torch.tensor([u]))
    assert got_units.tolist() == [u] * 3 and torch.equal(got_ids, want_ids[:3])
    # Group Privacy: the run's k bounds a canary unit's records
    add_member_canary_units(ids, mask, corpus_units, uc, eos_id=EOS, seq_len=SEQ, max_records_per_unit=3)
    with pytest.raises(ValueError, match="records_per_unit = 3 exceeds max_records_per_unit = 2"):
        add_member_canary_units(ids, mask, corpus_units, uc, eos_id=EOS, seq_len=SEQ, max_records_per_unit=2)
    with pytest.raises(ValueError, match="unit_ids must be >= 0, got -1"):
        add_member_canary_units(ids, mask, torch.tensor([0, -1, 1, 2]), uc, eos_id=EOS, seq_len=SEQ)


# ----------------------------------------------------------------------------- aggregation and the bound
def test_aggregate_unit_scores_known_answers():
    scores = [1.0, 3.0, 10.0, 20.0, -5.0, -7.0, 0.0, 9.0, 0.0]
    units = ["a", "a", "b", "b", "c", "c", "d", "d", "d"]
    want = {
        "mean": [2.0, 15.0, -6.0, 3.0],
        "median": [2.0, 15.0, -6.0, 0.0],
        "min": [1.0, 10.0, -7.0, 0.0],
        "max": [3.0, 20.0, -5.0, 9.0],
    }
    for agg, expected in want.items():
        out = aggregate_unit_scores(scores, units, agg)
        assert out.units == ("a", "b", "c", "d") and out.aggregate == agg
        np.testing.assert_allclose(out.scores, expected)
        assert out.counts.tolist() == [2, 2, 2, 3]
    # records of a unit need not be adjacent; order of units = first appearance
    out = aggregate_unit_scores([4.0, 1.0, 6.0, 3.0], np.array([7, 2, 7, 2]))
    assert out.units == (7, 2) and out.scores.tolist() == [5.0, 2.0]


def known_units(m=100, k=2):
    """Units i = 0..m−1, members the even ones. The 20 highest unit means: 17 members (i = 0, 2, …, 32) and 3
    non-members (i = 1, 3, 5); the others sit below. Records of unit i: mean ± 1."""
    members = [i % 2 == 0 for i in range(m)]
    top = set(range(0, 34, 2)) | {1, 3, 5}
    means = [100.0 + i if i in top else i / 1000 for i in range(m)]
    scores, units, labels = [], [], []
    for i in range(m):
        for j in range(k):
            scores.append(means[i] + (1.0 if j % 2 == 0 else -1.0) * (1 if k > 1 else 0))
            units.append(f"u{i}")
            labels.append(members[i])
    return scores, units, labels


def test_user_level_audit_counts_units_with_known_answer():
    scores, units, labels = known_units(m=100, k=2)
    a = user_level_audit(scores, units, labels, guesses=20, delta=DELTA)
    assert (a.m, a.r, a.v, a.records_per_unit, a.n_members, a.aggregate) == (100, 20, 17, 2, 50, "mean")
    assert a.eps_lb_95 == pytest.approx(one_run_epsilon_lower_bound(100, 20, 17, DELTA, 0.95))
    assert a.eps_lb_99 == pytest.approx(one_run_epsilon_lower_bound(100, 20, 17, DELTA, 0.99))
    assert a.eps_lb_95 > a.eps_lb_99 > 0
    m = a.metrics()
    assert m["user_audit_n_units"] == 100 and m["user_audit_n_correct"] == 17 and m["user_audit_eps_lb_95"] == a.eps_lb_95
    # guessing on both ends: 10 best as members (all even), 10 lowest as non-members (units 91..99 odd + …)
    both = user_level_audit(scores, units, labels, guesses=20, delta=DELTA, side="both")
    assert both.r == 20 and both.v == top_r_audit([np.mean(scores[2 * i:2 * i + 2]) for i in range(100)],
                                                 labels[::2], 20, DELTA, "both").v


def test_aggregate_changes_the_guesses():
    # member unit A: one very convincing record; non-member B: three fairly convincing ones
    scores = [0.0, 0.0, 9.0, 4.0, 4.0, 4.0, 1.0, 1.0, 1.0, -3.0, -3.0, -3.0]
    units = ["A"] * 3 + ["B"] * 3 + ["C"] * 3 + ["D"] * 3
    labels = [True] * 3 + [False] * 3 + [True] * 3 + [False] * 3
    assert user_level_audit(scores, units, labels, guesses=1, delta=DELTA, aggregate="mean").v == 0  # B (4) > A (3)
    assert user_level_audit(scores, units, labels, guesses=1, delta=DELTA, aggregate="max").v == 1  # A (9)


def test_one_record_per_unit_is_the_record_level_audit():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=300)
    labels = (rng.random(300) < 0.5).tolist()
    scores = scores + 1.5 * np.array(labels)
    a = user_level_audit(scores, list(range(300)), labels, guesses=50, delta=DELTA)
    b = top_r_audit(scores, labels, 50, DELTA)
    assert (a.m, a.r, a.v, a.records_per_unit) == (b.m, b.r, b.v, 1)
    assert (a.eps_lb_95, a.eps_lb_99) == (b.epsilon_lb[0.95], b.epsilon_lb[0.99])
    # k records per unit: m is the number of units, not records
    k3 = user_level_audit(np.repeat(scores, 3), np.repeat(np.arange(300), 3), np.repeat(labels, 3).tolist(),
                          guesses=50, delta=DELTA, records_per_unit=3)
    assert (k3.m, k3.v, k3.records_per_unit, k3.eps_lb_95) == (300, b.v, 3, b.epsilon_lb[0.95])


@pytest.mark.parametrize("call, message", [
    (lambda: canaries(k=0), r"records_per_unit: out of range \(got 0; allowed: an integer >= 1\)"),
    (lambda: canaries(m=1), r"n_units \(m, canary units\): out of range \(got 1; allowed: an integer >= 2\)"),
    (lambda: user_level_audit([1.0, 2.0], ["a", "a"], [True, True], guesses=1, delta=DELTA),
     r"record_units must name >= 2 canary units \(m\), got 1"),
    (lambda: user_level_audit([1.0, 2.0, 3.0, 4.0], "aabb", [1, 1, 0, 0], guesses=3, delta=DELTA),
     r"guesses \(r, at most m canary units\): out of range \(got 3; allowed: an integer in \[1, 2\]\)"),
    (lambda: user_level_audit([1.0, 2.0, 3.0, 4.0], "aabb", [1, 1, 0, 0], guesses=0, delta=DELTA),
     r"guesses \(r, at most m canary units\): out of range \(got 0; allowed: an integer in \[1, 2\]\)"),
    (lambda: user_level_audit([1.0, 2.0, 3.0], "aabb", [1, 1, 0], guesses=1, delta=DELTA),
     "record_units has 4 entries but record_scores has 3"),
    (lambda: user_level_audit([1.0, 2.0, 3.0, 4.0], "aabb", [1, 1, 0], guesses=1, delta=DELTA),
     "record_members has 3 entries but record_scores has 4"),
    (lambda: user_level_audit([1.0, 2.0, 3.0, 4.0, 5.0], "aabbb", [1, 1, 0, 0, 0], guesses=1, delta=DELTA),
     r"units have 2..3 records \(unit 'b' has 3\); the design requires the same records_per_unit"),
    (lambda: user_level_audit([1.0, 2.0, 3.0, 4.0], "aabb", [1, 0, 0, 0], guesses=1, delta=DELTA),
     "unit 'a' has member and non-member records; membership must be per unit"),
    (lambda: user_level_audit([1.0, 2.0, 3.0, 4.0], "aabb", [1, 1, 0, 0], guesses=1, delta=DELTA, records_per_unit=3),
     "every unit has 2 records, but records_per_unit = 3"),
    (lambda: user_level_audit([1.0, 2.0, 3.0, 4.0], "aabb", [1, 1, 0, 0], guesses=1, delta=DELTA, records_per_unit=0),
     r"records_per_unit: out of range \(got 0; allowed: an integer >= 1\)"),
    (lambda: user_level_audit([1.0, 2.0, 3.0, 4.0], "aabb", [1, 1, 0, 0], guesses=1, delta=DELTA, aggregate="sum"),
     "aggregate must be one of mean, median, min, max, got 'sum'"),
    (lambda: user_level_audit([1.0, float("nan"), 3.0, 4.0], "aabb", [1, 1, 0, 0], guesses=1, delta=DELTA),
     "score of record 1 is NaN"),
])
def test_bad_input_is_one_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ----------------------------------------------------------------------------- real User-wise DP-SGD
M, K, R = 300, 3, 60  # canary units, records per canary unit, guesses
N_CORPUS, B, STEPS, LR, CLIP = 200, 64, 40, 0.05, 1.0


def train_user_level(noise: str, epsilon: float | None = None, seed: int = 0):
    """Tiny GPT-2, full fine-tuning with User-wise DP-SGD on 200 corpus units (1–3 random-token records each) plus
    the member canary units (new-token secrets, k = 3 records each); Adam, expected B = 64 units per step, T = 40.

    ``noise``: "calibrated" (σ from calibrate_user_wise for (ε, δ) at q = B / units), "zero" (clipping, σ = 0)
    or "none" (the non-private reference: no clipping, no noise)."""
    g = torch.Generator().manual_seed(100 + seed)
    lists, units = [], []
    for u in range(N_CORPUS):
        for _ in range(1 + u % 3):
            lists.append(torch.randint(0, EOS, (10,), generator=g).tolist())
            units.append(u)
    ids, mask = encode_fixed(lists, EOS, SEQ)
    uc = canaries(design="new_token", m=M, k=K, seed=seed)
    rec = add_member_canary_units(ids, mask, torch.tensor(units), uc, eos_id=EOS, seq_len=SEQ)
    model = tiny_gpt2(vocab_size=V, n_positions=SEQ, seed=seed)
    extend_vocabulary(model, uc.canary_set.n_new_tokens)
    model = prepare_for_finetuning(model, "full")
    sigma = {"none": None, "zero": 0.0}.get(noise)
    if noise == "calibrated":
        sigma = calibrate_user_wise(epsilon, DELTA, B, rec.n_units, STEPS).noise_multiplier
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=LR)
    userwise_dp_sgd(model, opt, fixed_records_per_unit(rec.ids, rec.mask, rec.unit_ids), n_units=rec.n_units,
                    unit_sample_rate=B / rec.n_units, steps=STEPS, clip_norm=CLIP, noise_multiplier=sigma,
                    sampler_generator=torch.Generator().manual_seed(1000 + seed),
                    noise_generator=torch.Generator().manual_seed(2000 + seed), strategy="per_record")
    audit, rows = audit_user_canaries(model, uc, eos_id=EOS, seq_len=SEQ, delta=DELTA, guesses=R)
    return audit, rows, uc, sigma


def member_gap(rows) -> float:
    """Mean loss of non-member units minus that of member units (nats)."""
    return (np.mean([r["loss_mean"] for r in rows if not r["member"]])
            - np.mean([r["loss_mean"] for r in rows if r["member"]]))


@pytest.mark.parametrize("seed", [0, 1])
def test_calibrated_user_wise_run_stays_below_its_epsilon(seed):
    eps = 2.0
    # the test can fail: r = v = 60 of m = 300 would give ε̂ ≈ 2.96 > 2
    assert one_run_epsilon_lower_bound(M, R, R, DELTA, 0.95) > eps
    audit, rows, uc, sigma = train_user_level("calibrated", eps, seed)
    assert sigma > 1.0
    assert (audit.m, audit.r, audit.records_per_unit, audit.n_members) == (M, R, K, int(uc.unit_labels.sum()))
    assert audit.eps_lb_95 <= eps
    assert audit.eps_lb_99 <= audit.eps_lb_95
    assert len(rows) == M and set(rows[0]) == {"id", "member", "score", "loss_mean"}


@pytest.mark.parametrize("noise", ["none", "zero"])
def test_without_noise_the_user_level_audit_detects_the_leak(noise):
    audit, rows, _, sigma = train_user_level(noise)
    assert sigma == {"none": None, "zero": 0.0}[noise]
    assert audit.v >= 55 and audit.r == R
    assert audit.eps_lb_95 > 2.0 and audit.eps_lb_99 > 1.5
    assert member_gap(rows) > 1.0  # member units' secrets were learnt
