"""Training methods, one module each, registered by name behind one interface (:mod:`empriv.train.methods.base`):
``full``, ``lora``, ``prefix`` (DP-Flat is its mode), ``prompt``, ``head``, ``dpzero``.

    method = get_method(params.train.method)   # the registered TrainingMethod
    method.check(params, run); model = method.prepare(params, base, init_seed=…); method.train(job); method.facts(params)

Adding a shipped method: a new module here whose class is decorated ``@register("<name>")``, its traits one line in
:data:`empriv.config.methods.BUILTIN` (config must know them without importing training code), and its module in
the import below. A method defined outside the package (a test, a plugin) passes its traits to ``register`` and
needs nothing else.
"""

from __future__ import annotations

from empriv.train.methods import dpzero, full, head, lora, prefix, prompt  # noqa: F401 (the shipped methods register)
from empriv.train.methods.base import (Trained, TrainingJob, TrainingMethod, UnknownMethodError, get_method,
                                       register, registered_names, unregister)

__all__ = ["Trained", "TrainingJob", "TrainingMethod", "UnknownMethodError", "get_method", "register",
           "registered_names", "unregister"]
