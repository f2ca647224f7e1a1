"""empriv.analysis.heuristics: the three pairwise rules, ties count as wrong, the random baseline."""

from __future__ import annotations

import math

import polars as pl
import pytest

from empriv.analysis.heuristics import heuristic_accuracy, heuristic_pairs, heuristic_summary, predicts_better


def table(points):
    return pl.DataFrame([{"batch_size": b, "steps": t, "learning_rate": e, "y": y} for b, t, e, y in points])


def p(b, t, e):
    return {"batch_size": b, "steps": t, "learning_rate": e}


def test_rules():
    assert predicts_better("individual", p(64, 16, 0.01), p(64, 32, 0.01))
    assert predicts_better("individual", p(64, 16, 0.005), p(128, 32, 0.01))
    assert not predicts_better("individual", p(64, 16, 0.01), p(64, 16, 0.01))  # nothing strict
    assert not predicts_better("individual", p(64, 32, 0.01), p(128, 16, 0.01))  # incomparable
    assert predicts_better("compute", p(128, 16, 0.01), p(64, 32, 0.01))
    assert not predicts_better("compute", p(64, 32, 0.01), p(128, 16, 0.01))
    assert not predicts_better("compute", p(128, 16, 0.01), p(64, 32, 0.005))  # different η
    # U = 64·32·0.005 = 10.24 = 64·16·0.01 (float products: equal within 1e-9)
    assert predicts_better("updates", p(64, 32, 0.005), p(64, 16, 0.01))
    assert predicts_better("updates", p(0.1 * 10, 3, 0.1), p(1, 1, 0.3))  # 0.30000000000000004 vs 0.3
    assert not predicts_better("updates", p(64, 16, 0.01), p(64, 32, 0.005))
    with pytest.raises(ValueError, match="unknown heuristic rule 'size'"):
        predicts_better("size", p(1, 1, 1), p(2, 2, 2))


# a 2×2×2 cube: y = log2 b + 2 log2 T + 3 log2(η/0.005) + 0 except where noted
CUBE = [
    (64, 16, 0.005, 1.0), (128, 16, 0.005, 2.0), (64, 32, 0.005, 3.0), (128, 32, 0.005, 4.0),
    (64, 16, 0.01, 4.0), (128, 16, 0.01, 5.0), (64, 32, 0.01, 6.0), (128, 32, 0.01, 6.0),
]


def test_individual_accuracy_by_hand():
    # comparable ordered pairs in a 2×2×2 cube: 19; wrong: (64,32,.01)=6 vs (128,32,.01)=6 tied
    s = heuristic_summary(table(CUBE), "y", "individual")
    assert s["n_pairs"] == 19
    assert s["n_ties"] == 1
    assert s["n_correct"] == 18
    assert s["accuracy"] == pytest.approx(18 / 19)
    assert s["random_baseline"] == pytest.approx(0.5 * 18 / 19)


def test_compute_accuracy_by_hand():
    # C = 2048 pairs: (128,16,η) better than (64,32,η) for η = 0.005 (2 < 3 ✓) and 0.01 (5 < 6 ✓)
    assert heuristic_accuracy(table(CUBE), "y", "compute") == (1.0, 2)


def test_updates_accuracy_by_hand():
    # U = 10.24: (64,32,.005)=3 vs (64,16,.01)=4 ✓; (128,16,.005)=2 vs (64,16,.01)=4 ✓
    # U = 20.48: (128,32,.005)=4 vs (128,16,.01)=5 ✓, vs (64,32,.01)=6 ✓  → 4 / 4
    pairs = heuristic_pairs(table(CUBE), "y", "updates")
    assert len(pairs) == 4
    assert heuristic_accuracy(table(CUBE), "y", "updates") == (1.0, 4)
    flipped = table([(b, t, e, -y) for b, t, e, y in CUBE])
    assert heuristic_accuracy(flipped, "y", "updates") == (0.0, 4)


def test_all_zero_scores_give_zero_accuracy():
    zeros = table([(b, t, e, 0.0) for b, t, e, _ in CUBE])
    for rule in ("individual", "compute", "updates"):
        s = heuristic_summary(zeros, "y", rule)
        assert s["accuracy"] == 0.0 and s["n_ties"] == s["n_pairs"] > 0
        assert s["random_baseline"] == 0.0


def test_no_pairs_and_null_scores():
    acc, n = heuristic_accuracy(table([(64, 16, 0.01, 1.0)]), "y", "individual")
    assert math.isnan(acc) and n == 0
    assert heuristic_summary(table([(64, 16, 0.01, 1.0)]), "y", "compute")["random_baseline"] is None
    t = table(CUBE).with_columns(pl.when(pl.col("batch_size") == 128).then(None).otherwise(pl.col("y")).alias("y"))
    assert heuristic_accuracy(t, "y", "compute")[1] == 0  # every compute pair involves a b = 128 row


def test_null_scores_are_left_out_of_every_pair():
    """A configuration without a value (ACR over successes where no search succeeded) is in no pair: it is neither
    a 0 that every other configuration 'beats' nor a tie."""
    full = table(CUBE)
    holes = table([(b, t, e, None if (b, t, e) in ((64, 16, 0.005), (128, 32, 0.01)) else y) for b, t, e, y in CUBE])
    kept = table([c for c in CUBE if (c[0], c[1], c[2]) not in ((64, 16, 0.005), (128, 32, 0.01))])
    for rule in ("individual", "compute", "updates"):
        s = heuristic_summary(holes, "y", rule)
        ref = heuristic_summary(kept, "y", rule)
        assert {k: v for k, v in s.items() if k != "n_configs_without_value"} == \
            {k: v for k, v in ref.items() if k != "n_configs_without_value"}
        assert s["n_configs_without_value"] == 2 and ref["n_configs_without_value"] == 0
    # individual pairs by hand: of the 19 dominance pairs of the cube, those touching the two removed points go
    # (7 pairs have (64,16,.005) as the better one, 7 have (128,32,.01) as the worse, 1 pair has both): 19 − 13 = 6
    assert heuristic_summary(full, "y", "individual")["n_pairs"] == 19
    assert heuristic_summary(holes, "y", "individual")["n_pairs"] == 6
    assert heuristic_summary(table([(64, 16, 0.005, None), (128, 16, 0.005, None)]), "y", "individual")["accuracy"] is None
