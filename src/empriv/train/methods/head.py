"""``head``: only the output layer trains (``train.head.target``: the untied LM head, or the last block and final
norm; :mod:`empriv.models.adaptations`), standard DP-SGD loop; saved as a whole model."""

from __future__ import annotations

from empriv.train.methods.base import TrainingMethod, adapt, register


@register("head")
class HeadTuning(TrainingMethod):
    def prepare(self, params, base, *, init_seed: int):
        return adapt(params, base, "head", init_seed=init_seed, head_target=params.train.head.target)
