"""Attribute inference ratio (AIR) of an (author, genre) secret (the research's appendix B.7).

The attribute prompt P(x) is ``score.air_template`` with the author's name for ``{x}`` (default
"What genre does {x} write in?"), put in the corpus's question/answer format
("Question: …\\nAnswer:", how TOFU records are rendered for training). Ten continuations are drawn
by stochastic decoding (Hugging Face defaults: temperature 1.0, top_k 50, top_p 1.0) with
``max_new_tokens`` 20; AIR = 1 if the genre appears, case-insensitively, in at least one of them.

"Appears" is a case-insensitive substring test, as the research states it. A genre that is a
substring of a longer word ("Drama" in "Dramatic") therefore counts; :func:`attribute_appears`
documents the choice and the tests pin it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from empriv.config import AIR_TEMPLATE
from empriv.models.lm import sample_continuations


def attribute_prompt(author: str, template: str = AIR_TEMPLATE) -> str:
    """The attribute question in the training format: ``"Question: …\nAnswer:"``."""
    from empriv.data.tofu import training_text

    if "{x}" not in template:
        raise ValueError(f"the AIR template must contain {{x}}, got {template!r}")
    if not author.strip():
        raise ValueError("AIR needs a non-empty author name")
    return training_text(template.replace("{x}", author), "").rstrip()


def attribute_appears(attribute: str, outputs: Sequence[str]) -> bool:
    """Does ``attribute`` occur (case-insensitive substring) in at least one output?"""
    a = attribute.lower()
    return any(a in o.lower() for o in outputs)


def attribute_inference(model, tokenizer, author: str, attribute: str, *, template: str = AIR_TEMPLATE,
                        num_samples: int = 10, max_new_tokens: int = 20, temperature: float = 1.0, top_k: int = 50,
                        top_p: float = 1.0, generator: torch.Generator | None = None) -> float:
    """AIR(x) ∈ {0.0, 1.0} for one (author, attribute) secret."""
    if not attribute.strip():
        raise ValueError("AIR needs a non-empty attribute")
    ids = [tokenizer.eos_id, *tokenizer.encode(attribute_prompt(author, template))]
    outs = sample_continuations(model, ids, num_samples, max_new_tokens, temperature=temperature, top_k=top_k,
                                top_p=top_p, generator=generator)
    return float(attribute_appears(attribute, [tokenizer.decode(o) for o in outs]))
