"""empriv.checks: the shared argument checks and the one bad-input format."""

from __future__ import annotations

import math

import numpy as np
import pytest

from empriv.checks import bad_input, problem_text, require_int, require_real


def test_require_int_returns_the_integer():
    assert require_int("n", 3, 1) == 3 and require_int("n", 0, 0) == 0 and require_int("n", 5, 1, 5) == 5
    assert require_int("seed", -7) == -7  # no bound: any integer
    value = require_int("n", np.int64(5), 1)
    assert value == 5 and type(value) is int


@pytest.mark.parametrize("value, what", [(0, "out of range"), (-1, "out of range"), (2.0, "not an integer"),
                                         ("3", "not an integer"), (None, "not an integer"), (True, "not an integer"),
                                         (False, "not an integer"), (np.float64(4.0), "not an integer")])
def test_require_int_names_the_key_the_value_and_what_is_allowed(value, what):
    with pytest.raises(ValueError) as err:
        require_int("top_k", value, 1)
    assert str(err.value) == f"top_k: {what} (got {value!r}; allowed: an integer >= 1)"


def test_require_int_with_both_bounds_or_none():
    with pytest.raises(ValueError) as err:
        require_int("guesses", 3, 1, 2)
    assert str(err.value) == "guesses: out of range (got 3; allowed: an integer in [1, 2])"
    with pytest.raises(ValueError) as err:
        require_int("seed", "1")
    assert str(err.value) == "seed: not an integer (got '1'; allowed: an integer)"
    with pytest.raises(ValueError, match=r"allowed: an integer >= 1000000\)$"):  # never 1e+06
        require_int("n_users", 5, 1_000_000)


def test_require_int_says_what_the_number_means_when_asked():
    with pytest.raises(ValueError) as err:
        require_int("runtime.checkpoint_every", 0, 1, meaning="steps between checkpoints")
    assert str(err.value) == ("runtime.checkpoint_every (steps between checkpoints): out of range "
                              "(got 0; allowed: an integer >= 1)")


def test_require_real_returns_a_float_within_the_bounds():
    assert require_real("q", 1, gt=0, le=1) == 1.0 and type(require_real("q", np.float32(0.5), gt=0, le=1)) is float
    assert require_real("x", 0, ge=0) == 0.0 and require_real("x", -3.5) == -3.5


@pytest.mark.parametrize("value, what", [(0.0, "out of range"), (1.5, "out of range"), (-1, "out of range"),
                                         (math.nan, "not a finite number"), (math.inf, "not a finite number"),
                                         ("0.5", "not a number"), (None, "not a number"), (True, "not a number")])
def test_require_real_names_the_key_the_value_and_the_interval(value, what):
    with pytest.raises(ValueError) as err:
        require_real("sample_rate", value, gt=0, le=1)
    assert str(err.value) == f"sample_rate: {what} (got {value!r}; allowed: a finite number in (0, 1])"


@pytest.mark.parametrize("bounds, allowed", [({"gt": 0}, "a finite number > 0"), ({"ge": 0}, "a finite number >= 0"),
                                             ({"ge": 0, "lt": 1}, "a finite number in [0, 1)"),
                                             ({"gt": 0, "lt": 1}, "a finite number in (0, 1)")])
def test_require_real_words_each_kind_of_bound(bounds, allowed):
    with pytest.raises(ValueError) as err:
        require_real("x", -2, **bounds)
    assert str(err.value) == f"x: out of range (got -2; allowed: {allowed})"
    if "ge" in bounds:  # a closed end takes its bound, an open one does not
        assert require_real("x", 0, **bounds) == 0.0
    else:
        with pytest.raises(ValueError, match=r"^x: out of range \(got 0;"):
            require_real("x", 0, **bounds)


def test_one_format_for_the_library_and_the_config():
    from empriv.config import ParamError, parse_params

    assert str(bad_input("k", "too large", 9, "an integer in [1, 8]")) == ("k: too large (got 9; allowed: an integer "
                                                                        "in [1, 8])")
    assert ParamError("must be > 0", -1, "a finite number > 0").text() == problem_text("must be > 0", -1,
                                                                                       "a finite number > 0")
    assert problem_text("is required") == "is required" and problem_text("x", "y" * 300).endswith("y...)")
    with pytest.raises(ValueError) as err:  # a Field(ge=10) of the config reads as require_int does
        parse_params({"data": {"n_train": 0}})
    assert "data.n_train: out of range (got 0; allowed: an integer >= 10)" in str(err.value)


@pytest.mark.parametrize("check", [
    lambda v: __import__("empriv.privacy.user_level", fromlist=["x"]).naive_group_privacy(1.0, 1e-5, v),
    lambda v: __import__("empriv.train.loop", fromlist=["x"]).DPLoop(sampling=None, steps=v, curves=["loss"]),
    lambda v: __import__("empriv.data.units", fromlist=["x"]).synthetic_unit_ids(v, 0),
    lambda v: __import__("empriv.train.precision", fromlist=["x"]).auto_start(v),
    lambda v: __import__("empriv.train.sampling", fromlist=["x"]).micro_batches(None, v),
])
def test_the_modules_that_checked_by_hand_now_share_the_message_and_take_numpy_integers(check):
    """The checks that were written out in each module (k, steps, n_records, ...) go through require_int: one
    message shape, and a numpy integer (e.g. read from an array) is an integer."""
    with pytest.raises(ValueError, match=r": out of range \(got 0; allowed: an integer >= 1\)$"):
        check(0)
    try:
        check(np.int64(2))
    except AttributeError:  # micro_batches(None, …): past the check
        pass


def test_a_long_path_is_shown_whole_and_a_long_list_is_cut():
    from empriv.checks import problem_text

    path = "/tmp/" + "d" * 150 + "/corpus.jsonl"
    assert problem_text("not found", path) == f"not found (got {path!r})"
    long_list = list(range(100))
    text = problem_text("too many", long_list)
    assert text.startswith("too many (got [0, 1, 2,") and text.endswith("...)") and len(text) == len("too many (got )") + 80
    assert problem_text("too long", "x" * 300) == f"too long (got {('x' * 300)!r}"[:len("too long (got ") + 237] + "...)"
