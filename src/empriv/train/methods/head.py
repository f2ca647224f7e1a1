"""``head``: only the output layer trains (``train.head.target``: the untied LM head, or the last block and final
norm; :mod:`empriv.models.adaptations`), standard DP-SGD loop; saved as a whole model."""

from __future__ import annotations

from empriv.train.methods.base import TrainingMethod, adaptation_error, register


@register("head")
class HeadTuning(TrainingMethod):
    def prepare(self, params, base, *, init_seed: int):
        from empriv.models.adaptations import prepare_adaptation

        try:
            return prepare_adaptation(base, "head", init_seed=init_seed, head_target=params.train.head.target)
        except ValueError as err:
            raise adaptation_error(params, base, err) from None
