"""``full``: every weight of the base trains (GPT-2's Conv1D layers become ``nn.Linear`` first), standard DP-SGD loop."""

from __future__ import annotations

from empriv.train.methods.base import TrainingMethod, register


@register("full")
class FullFineTuning(TrainingMethod):
    def prepare(self, params, base, *, init_seed: int):
        from empriv.models.adapters import prepare_for_finetuning

        return prepare_for_finetuning(base, "full", params.train.lora, init_seed=init_seed)
