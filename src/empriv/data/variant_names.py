"""The names of the TOFU variants (``data.variant``), importable without the data package's code.

:mod:`empriv.config` validates ``data.variant`` against this tuple; :mod:`empriv.data.variants` builds them.
This module imports nothing, so the config layer stays below every library package.
"""

VARIANTS = ("tofu-1", "tofu-2", "tofu-4", "tofu-1:7", "tofu-2:6", "tofu-3:5", "tofu-2*")
