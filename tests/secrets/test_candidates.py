"""empriv.secrets.candidates: degenerate-secret rejection and the model-based filters (appendix B.6)."""

from __future__ import annotations

import pytest

from empriv.secrets.candidates import MIN_SECRET_LETTERS, degenerate_reason, filter_candidates


def test_degenerate_secrets_are_recognised_by_reason():
    assert MIN_SECRET_LETTERS == 8
    assert degenerate_reason(" \n\t \n") == "whitespace_only"
    assert degenerate_reason("\n\n-----------------------------") == "punctuation_run"
    assert degenerate_reason(".\n*************************** x") == "punctuation_run"  # 1 letter in 29 visible
    assert degenerate_reason("= = = = EB = = =") == "punctuation_run"  # 2 letters of 9 visible: under a quarter
    assert degenerate_reason("10:12 AM PM") == "few_letters"  # 4 letters
    assert degenerate_reason("Kay Ng/HR") == "few_letters"  # 7 letters: one short
    assert degenerate_reason("Kay Mann/Corp/Enron") is None
    assert degenerate_reason("Forwarded by Kay Mann -----", " -----") == "continuation_without_letters"
    assert degenerate_reason("Forwarded by Kay Mann -----", " Mann -----") is None


class C:
    def __init__(self, name, ft, base, acr_ft=2.0, acr_base=0.0):
        self.name, self.ft, self.base, self.acr_ft, self.acr_base = name, ft, base, acr_ft, acr_base


CANDIDATES = [
    C("keep", True, False),
    C("not-memorised", False, False),
    C("base-knows", True, True),
    C("low-acr", True, False, acr_ft=1.49),
    C("edge-acr", True, False, acr_ft=1.5, acr_base=0.5),
    C("base-compresses", True, False, acr_base=0.51),
]


def test_filter_candidates_verbatim_only():
    kept, record = filter_candidates(CANDIDATES, lambda c: c.ft, lambda c: c.base)
    assert [c.name for c in kept] == ["keep", "low-acr", "edge-acr", "base-compresses"]
    assert record["n_in"] == 6 and record["n_out"] == 4
    assert [(f["name"], f["ran"], f["removed"]) for f in record["filters"]] == [
        ("finetuned_verbatim", True, 1),
        ("finetuned_acr", False, 0),
        ("base_verbatim", True, 1),
        ("base_acr", False, 0),
    ]


def test_filter_candidates_with_acr():
    kept, record = filter_candidates(
        CANDIDATES, lambda c: c.ft, lambda c: c.base, acr_finetuned=lambda c: c.acr_ft, acr_base=lambda c: c.acr_base
    )
    assert [c.name for c in kept] == ["keep", "edge-acr"]
    assert [(f["name"], f["ran"], f["removed"]) for f in record["filters"]] == [
        ("finetuned_verbatim", True, 1),
        ("finetuned_acr", True, 1),
        ("base_verbatim", True, 1),
        ("base_acr", True, 1),
    ]
    assert record["filters"][1]["threshold"] == 1.5 and record["filters"][3]["threshold"] == 0.5
    kept, record = filter_candidates(CANDIDATES, lambda c: c.ft, lambda c: c.base, acr_base=lambda c: c.acr_base, thresholds=(1.5, 0.6))
    assert [c.name for c in kept] == ["keep", "low-acr", "edge-acr", "base-compresses"]
    assert [f["ran"] for f in record["filters"]] == [True, False, True, True]


def test_filter_candidates_validates():
    with pytest.raises(ValueError, match="thresholds must be two finite numbers"):
        filter_candidates([], lambda c: True, lambda c: False, thresholds=(1.5,))
    with pytest.raises(ValueError, match="reproduces_verbatim_base must be callable"):
        filter_candidates([], lambda c: True, None)
