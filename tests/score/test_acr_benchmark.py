"""benchmarks/acr.py's judgment of the ACR over replicate draws (``--replicates``): each strategy's median draw per
(model, secret), a failed draw below every success, an incomplete secret counted against the fast strategy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_acr", ROOT / "benchmarks" / "acr.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _draws(pub: list, fast: list, size: int = 22, bound: float = 22 / 30) -> list[dict]:
    """Rows of one (model, secret), one per draw: the shortest prompt each strategy found (None: nothing)."""
    rows = []
    for i, (p, f) in enumerate(zip(pub, fast)):
        row = {"model": "m", "secret": "s", "key_suffix": f"#{i}" if i else ""}
        for label, length in (("published", p), ("fast", f)):
            row.update({f"success_{label}": length is not None, f"acr_{label}": None if length is None else size / length,
                        f"bound_{label}": bound, f"prompt_{label}": [length]})
        rows.append(row)
    return rows


def test_the_median_draw_decides(bench):
    # the pair the single draw lost (published 7, fast 12) is a fast win when its other draws reach 7 more often
    assert bench._compare_medians(_draws([7, 9, 12], [12, 7, 7])) == 1
    assert bench._compare_medians(_draws([7, 7, 9], [12, 12, 7])) == -1
    assert bench._compare_medians(_draws([7, 9, 7], [7, 12, 7])) == 0
    # a failure ranks below every success: two failures of three make the median a failure
    assert bench._compare_medians(_draws([None, None, 30], [None, 29, 29])) == 1
    assert bench._compare_medians(_draws([None, None, 30], [None, None, 2])) == 0


def test_the_verdicts_and_an_incomplete_secret(bench, capsys):
    rows = _draws([7, 9, 12], [12, 7, 7]) + [{**r, "secret": "t"} for r in _draws([5, 5, 5], [5, 6, 6])]
    rows += [{**r, "secret": "u"} for r in _draws([3, 3], [3, 3])]  # only 2 of the 3 draws
    data = {}
    assert bench._judge_medians(rows, 3, data) == 2
    assert [r["verdict"] for r in data["median_draw"]] == [1, -1, -1]
    assert (data["median_acr_equal"], data["median_acr_fast_higher"], data["median_acr_fast_lower"]) == (0, 1, 2)
    assert "only 2 of 3 draws" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [(["--replicates", "2"], "odd number"),
                                           (["--replicates", "3", "--key-suffix", "#4"], "give one")])
def test_replicates_are_checked_before_anything_runs(bench, argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--synthetic", *argv])
    assert message in capsys.readouterr().err
