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
