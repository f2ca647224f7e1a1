"""empriv.checks: the shared argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from empriv.checks import require_int


def test_require_int_returns_the_integer():
    assert require_int("n", 3, 1) == 3 and require_int("n", 0, 0) == 0
    value = require_int("n", np.int64(5), 1)
    assert value == 5 and type(value) is int


@pytest.mark.parametrize("value", [0, -1, 2.0, "3", None, True, False, np.float64(4.0)])
def test_require_int_names_the_argument_the_value_and_the_minimum(value):
    with pytest.raises(ValueError) as err:
        require_int("top_k", value, 1)
    assert str(err.value) == f"top_k must be an integer >= 1, got {value!r}"


def test_require_int_says_what_the_number_means_when_asked():
    with pytest.raises(ValueError) as err:
        require_int("runtime.checkpoint_every", 0, 1, meaning="steps between checkpoints")
    assert str(err.value) == "runtime.checkpoint_every must be an integer >= 1 (steps between checkpoints), got 0"


@pytest.mark.parametrize("check", [
    lambda v: __import__("empriv.privacy.user_level", fromlist=["x"]).naive_group_privacy(1.0, 1e-5, v),
    lambda v: __import__("empriv.train.loop", fromlist=["x"]).DPLoop(sampling=None, steps=v, curves=["loss"]),
    lambda v: __import__("empriv.data.units", fromlist=["x"]).synthetic_unit_ids(v, 0),
])
def test_the_modules_that_checked_by_hand_now_share_the_message_and_take_numpy_integers(check):
    """The checks that were written out in each module (k, steps, n_records, ...) go through require_int: one
    message shape, and a numpy integer (e.g. read from an array) is an integer."""
    with pytest.raises(ValueError, match=r"must be an integer >= 1, got 0$"):
        check(0)
    check(np.int64(2))  # no error
