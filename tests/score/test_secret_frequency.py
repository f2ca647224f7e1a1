"""empriv.score.secret_frequency: a secret's frequency in the training split and the rare/frequent split of ACR."""

from __future__ import annotations

import math

import pytest

from empriv.config import ACRParams
from empriv.score.secret_frequency import (
    DEFAULT_RARE_FREQUENCY,
    check_rare_frequency,
    is_rare_secret,
    secret_frequency,
)


def test_frequency_is_the_records_else_occurrences_over_n_train():
    assert secret_frequency({"frequency": 0.04, "occurrences": 7}, n_train=100) == 0.04  # the record's own wins
    assert secret_frequency({"occurrences": 30}, n_train=3000) == pytest.approx(0.01)
    assert secret_frequency({"occurrences": 30}) is None  # no n_train: unknown
    assert secret_frequency({"occurrences": None, "frequency": None}, n_train=3000) is None
    assert secret_frequency({}) is None


def test_rare_is_at_most_the_split_and_unknown_is_frequent():
    assert DEFAULT_RARE_FREQUENCY == ACRParams().rare_frequency == 0.01
    assert is_rare_secret({"frequency": 0.01}, 0.01) and is_rare_secret({"frequency": 0.001}, 0.01)
    assert not is_rare_secret({"frequency": 0.0101}, 0.01) and not is_rare_secret({"frequency": 0.04}, 0.01)
    assert is_rare_secret({"occurrences": 30}, 0.01, n_train=3000) and not is_rare_secret({"occurrences": 31}, 0.01, n_train=3000)
    assert not is_rare_secret({}, 0.5) and not is_rare_secret({"occurrences": 1}, 0.5)  # unknown frequency
    assert not is_rare_secret({"frequency": 0.001}, 0.0) and is_rare_secret({"frequency": 0.0}, 0.0)


@pytest.mark.parametrize("bad", [1.0, -0.01, 1.5, math.nan, "0.01", True, None])
def test_the_split_must_be_in_zero_one(bad):
    with pytest.raises(ValueError, match=r"^rare_frequency must be a number in \[0, 1\), got "):
        check_rare_frequency(bad)
    assert check_rare_frequency(0) == 0.0 and check_rare_frequency(0.999) == 0.999
