"""``lora``: peft LoRA adapters on ``train.lora.target_modules`` (their init from the run's ``init`` stream); only they
train, with the standard DP-SGD loop. Settings: ``train.lora``; saved as a peft adapter."""

from __future__ import annotations

from empriv.train.methods.base import TrainingMethod, register


@register("lora")
class LoRA(TrainingMethod):
    def prepare(self, params, base, *, init_seed: int):
        from empriv.models.adapters import prepare_for_finetuning

        return prepare_for_finetuning(base, "lora", params.train.lora, init_seed=init_seed)
