"""RDP accountant: Rényi DP of the subsampled Gaussian (opacus' analysis, Mironov et al. 2019),
converted to (ε, δ) with the bound of Balle et al. 2020 over an extended grid of orders. Cheap for
every σ (a series per order, no grid), hence no memory guard; non-finite results are errors."""

from __future__ import annotations

import math

from empriv.privacy.accountants.base import Accountant, AccountingError

_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [
    64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024]


class RDPAccountant(Accountant):
    """Rényi DP (opacus' RDP analysis), Balle et al. 2020 conversion."""

    name = "rdp"
    description = "Renyi DP (opacus RDP analysis, orders 1.1..1024, Balle et al. 2020 conversion)"
    fallback = None
    libraries = ("opacus", "numpy", "scipy")

    @staticmethod
    def _orders():
        return list(_ORDERS)

    def _rdp(self, sigma, q, steps):
        from opacus.accountants.analysis import rdp as _rdp

        orders = self._orders()
        return orders, _rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)

    def epsilon_dp_sgd(self, sigma, q, steps, delta):
        import numpy as np

        orders, rdp = self._rdp(sigma, q, steps)
        a = np.asarray(orders, dtype=float)
        with np.errstate(all="ignore"):
            eps = rdp - (math.log(delta) + np.log(a)) / (a - 1) + np.log((a - 1) / a)
        if np.isnan(eps).all():
            raise AccountingError("rdp accountant returned NaN for all orders")
        value = float(max(0.0, np.nanmin(eps)))
        if not math.isfinite(value):
            raise AccountingError(
                f"rdp accountant: epsilon is infinite at every order for noise_multiplier={sigma:.4g}, "
                f"sample_rate={q:.4g}, steps={steps}"
            )
        return value

    def delta_dp_sgd(self, sigma, q, steps, epsilon):
        import numpy as np

        orders, rdp = self._rdp(sigma, q, steps)
        a = np.asarray(orders, dtype=float)
        # δ = exp((α-1)(rdp-ε)) / α * (1-1/α)^(α-1)   (Balle et al. 2020, Prop. 12 / Canonne et al.)
        with np.errstate(all="ignore"):
            logd = (a - 1) * (rdp - epsilon) - np.log(a) + (a - 1) * np.log1p(-1 / a)
        return float(min(1.0, math.exp(min(0.0, float(np.nanmin(logd))))))
