"""Group Privacy σ (Algorithm 1's GROUPPRIVACCOUNTING) for one fixed case, checked against dp-accounting itself.

The case is the spec's verified toy (../shared/specs/user-level-dp-and-dp-flat.md, part C):
N = 2,000 users, n = 100 users per step, k = 2 records each, so M = kN and B = kn give
q = B/M = 0.05; T = 200 steps, δ = 1e-5, user-level ε = 3. The spec computed σ = 2.211 (tight
mixture of Gaussians) and 2.259 (naive group-privacy conversion) with dp-accounting 0.6.0.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from empriv.privacy import user_level as ul

EPS, DELTA, K, Q, STEPS = 3.0, 1e-5, 2, 0.05, 200
VDI = 5e-3


def dp_accounting_mog_epsilon(sigma: float) -> float:
    """User-level ε of T steps from dp-accounting's own MixtureOfGaussiansDpEvent (the paper's App. B.3 recipe)."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    sens = list(range(K + 1))
    probs = binom.pmf(np.arange(K + 1), K, Q).tolist()
    event = dp_event.SelfComposedDpEvent(
        dp_event.MixtureOfGaussiansDpEvent(sigma, [float(s) for s in sens], probs), STEPS)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    return float(acc.compose(event).get_epsilon(DELTA))


@pytest.fixture(scope="module")
def sigmas():
    tight = ul.calibrate_group_privacy(EPS, DELTA, K, Q, STEPS, tolerance=5e-3,
                                       value_discretization_interval=VDI)
    naive = ul.calibrate_group_privacy_naive(EPS, DELTA, K, Q, STEPS, cache=False)
    return tight, naive


def test_tight_group_sigma_matches_the_accounting(sigmas):
    tight, _ = sigmas
    assert tight.accountant == "pld-mog" and tight.sample_rate == Q and tight.steps == STEPS
    assert tight.noise_multiplier == pytest.approx(2.211, rel=0.01)
    # dp-accounting's MoG event, composed independently of empriv, agrees: the σ meets ε = 3 …
    eps_at_sigma = dp_accounting_mog_epsilon(tight.noise_multiplier)
    assert EPS - 0.05 <= eps_at_sigma <= EPS + 0.01
    assert eps_at_sigma == pytest.approx(ul.group_privacy_epsilon(tight.noise_multiplier, K, Q, STEPS, DELTA), abs=0.02)
    # … and is the smallest such σ: 2 % less noise overshoots ε
    assert dp_accounting_mog_epsilon(0.98 * tight.noise_multiplier) > EPS


def test_naive_conversion_is_more_conservative(sigmas):
    tight, naive = sigmas
    assert naive.noise_multiplier == pytest.approx(2.259, rel=0.01)
    # naive calibrates example level at (ε/k, δ(e^{ε/k}-1)/(e^ε-1))
    assert naive.epsilon <= EPS / K + 1e-9
    assert naive.noise_multiplier > tight.noise_multiplier
    # under the tight accounting the naive σ spends strictly less than the user-level budget
    assert dp_accounting_mog_epsilon(naive.noise_multiplier) < EPS - 0.05
