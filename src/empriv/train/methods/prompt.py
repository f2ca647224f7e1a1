"""``prompt``: P trainable soft-prompt embeddings before every sequence (``train.prompt.n_virtual``; they take learned
positions of the base), the base frozen, standard DP-SGD loop; saved as an empriv virtual-token adapter."""

from __future__ import annotations

from empriv.train.methods.base import TrainingMethod, adaptation_error, register


@register("prompt")
class PromptTuning(TrainingMethod):
    def prepare(self, params, base, *, init_seed: int):
        from empriv.models.adaptations import prepare_adaptation

        try:
            return prepare_adaptation(base, "prompt", init_seed=init_seed, n_virtual=params.train.prompt.n_virtual)
        except ValueError as err:
            raise adaptation_error(params, base, err) from None
