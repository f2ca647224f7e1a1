"""empriv.analysis.precision: every metric's uncertainty, and the digits it is written to (the module name
test_precision is tests/train/'s, for the training precision)."""

from __future__ import annotations

import math

import pytest

from empriv.analysis.precision import round_metrics, round_value, uncertainty


def test_the_uncertainty_of_each_kind_of_metric():
    score = {"mean": 4.98977, "std": 1.7782, "worst": 7.5365, "n": 8, "se": 0.6287, "se_seed": 0.31, "n_runs": 16}
    assert uncertainty(score, "mean") == 0.31  # the seed noise first: the same configurations run again
    assert uncertainty({**score, "se_seed": None}, "mean") == 0.6287  # one seed: over configurations
    assert uncertainty(score, "worst") == pytest.approx(0.31 * math.sqrt(8))
    assert uncertainty({**score, "se_seed": None}, "worst") == 1.7782
    assert uncertainty(score, "std") == pytest.approx(1.7782 / math.sqrt(14))
    assert uncertainty(score, "se_seed") == pytest.approx(0.31 / math.sqrt(16))  # 16 runs − 8 configurations
    assert uncertainty({**score, "n": 1, "n_runs": 2}, "se_seed") == pytest.approx(0.31 / math.sqrt(2))
    assert uncertainty(score, "n") is None and uncertainty(score, "n_runs") is None
    assert uncertainty({"coef_log_b": 5.7, "coef_log_b_se": 2.1}, "coef_log_b") == 2.1
    assert uncertainty({"rho_score": 0.5, "n": 8}, "rho_score") == pytest.approx(0.75 * math.sqrt(1.06 / 5))
    assert uncertainty({"rho_score": 0.5, "n": 3}, "rho_score") is None
    assert uncertainty({"std_configs": 2.0, "n_configs": 3}, "std_configs") == pytest.approx(1.0)
    assert uncertainty({"config_seed_ratio": 2.0, "n_configs": 5}, "config_seed_ratio") == pytest.approx(1.0)
    assert uncertainty({"r2": 0.5}, "r2") is None and uncertainty({"mean": None, "se": 1}, "mean") is None


def test_values_are_rounded_to_two_significant_digits_of_their_uncertainty_else_four_significant_digits():
    assert round_value(4.989765048027039, 0.31) == 4.99
    assert round_value(4.989765048027039, 0.031) == 4.990
    assert round_value(123.456, 12.0) == 123.0
    assert round_value(1234.56, 120.0) == 1230.0
    assert round_value(5.978135706049376, None) == 5.978 and round_value(0.0901467, 0.0) == 0.09015
    assert round_value(0.0, 0.1) == 0.0 and str(round_value(-0.0001, 1.0)) == "0.0"


def test_round_metrics_hides_float_drift_below_the_written_digits():
    exact = {"eps2": {"epsilon": 2.0000001, "n_configs": 8,
                      "gap": {"mean": 4.989765048027039, "std": 1.778161164019415, "worst": 7.536495929294161,
                              "n": 8, "se": 0.6286737, "se_seed": 0.3121, "n_runs": 16}}}
    drifted = {"eps2": {"epsilon": 2.0000001, "n_configs": 8,
                        "gap": {"mean": 4.989760, "std": 1.7781616893903025, "worst": 7.536490588717991,
                                "n": 8, "se": 0.6286739, "se_seed": 0.31210001, "n_runs": 16}}}
    a, b = round_metrics(exact), round_metrics(drifted)
    assert a == b
    assert a["eps2"]["gap"] == {"mean": 4.99, "std": 1.78, "worst": 7.54, "n": 8, "se": 0.63, "se_seed": 0.312,
                                "n_runs": 16}
    assert a["eps2"]["epsilon"] == 2.0000001 and a["eps2"]["n_configs"] == 8  # ε and counts exact


def test_a_count_of_successes_has_a_binomial_standard_error():
    from empriv.analysis.precision import binomial_standard_error

    assert binomial_standard_error(35, 40) == pytest.approx(math.sqrt(40 * 0.875 * 0.125))  # 2.092
    assert binomial_standard_error(35, 40) == pytest.approx(2.0917, abs=1e-4)
    # at 0 or n, p = (k + ½)/(n + 1): a count that could still move
    assert binomial_standard_error(0, 10) == pytest.approx(math.sqrt(10 * (0.5 / 11) * (10.5 / 11)))
    assert binomial_standard_error(10, 10) == pytest.approx(binomial_standard_error(0, 10))
    assert binomial_standard_error(0, 10) == pytest.approx(0.6587, abs=1e-4)
    assert binomial_standard_error(3, 0) is None and binomial_standard_error(5, 4) is None
    group = {"acr_searched": 40, "acr_success": 35, "acr_rare_searched": 10, "acr_rare_success": 0, "n_configs": 8,
             "n_configs_kept": 6}
    assert uncertainty(group, "acr_success") == pytest.approx(2.0917, abs=1e-4)
    assert uncertainty(group, "acr_rare_success") == pytest.approx(0.6587, abs=1e-4)
    assert uncertainty(group, "n_configs_kept") == pytest.approx(math.sqrt(8 * 0.75 * 0.25))
    assert uncertainty(group, "acr_searched") is None and uncertainty(group, "n_configs") is None  # the design
    # a score's n (configurations with a value) of its ε group's n_configs: only with the enclosing group given
    score = {"mean": 3.0, "n": 2, "n_runs": 3}
    assert uncertainty(score, "n") is None
    assert uncertainty(score, "n", parent={"n_configs": 8, "n_runs": 16}) == pytest.approx(math.sqrt(8 * 0.25 * 0.75))
    assert uncertainty(score, "n_runs", parent={"n_configs": 8, "n_runs": 16}) == pytest.approx(
        math.sqrt(16 * (3 / 16) * (13 / 16)))


def test_an_own_standard_error_wins_over_the_rules():
    assert uncertainty({"std_seeds": 2.0, "n_configs": 3, "std_seeds_se": 0.3}, "std_seeds") == 0.3
    assert uncertainty({"acr_success": 3, "acr_searched": 4, "acr_success_se": 0.1}, "acr_success") == 0.1


def test_a_standard_error_without_a_count_moves_as_one_from_two_seeds():
    """configs.json's `<score>_se` has no count beside it: seed noise moves it as a std of two seeds would
    (measured: re-seeding a small cube moved test_nll_se 0.0297 → 0.0027, called changed before this rule)."""
    assert uncertainty({"test_nll": 5.1, "test_nll_se": 0.0297}, "test_nll_se") == pytest.approx(0.0297 / math.sqrt(2))
    assert uncertainty({"std_seeds_se": 0.4, "n_configs": 1}, "std_seeds_se") == pytest.approx(0.4 / math.sqrt(2))
    assert uncertainty({"std_seeds_se": 0.4, "n_configs": 5}, "std_seeds_se") == pytest.approx(0.4 / math.sqrt(8))
    assert uncertainty({"std": 0.4, "n": 1}, "std") is None  # a std of one value is null anyway
