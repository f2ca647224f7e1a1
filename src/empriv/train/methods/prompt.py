"""``prompt``: P trainable soft-prompt embeddings before every sequence (``train.prompt.n_virtual``; they take learned
positions of the base), the base frozen, standard DP-SGD loop; saved as an empriv virtual-token adapter."""

from __future__ import annotations

from empriv.train.methods.base import TrainingMethod, adapt, register


@register("prompt")
class PromptTuning(TrainingMethod):
    def prepare(self, params, base, *, init_seed: int):
        return adapt(params, base, "prompt", init_seed=init_seed, n_virtual=params.train.prompt.n_virtual)
