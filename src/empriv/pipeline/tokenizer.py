"""tokenizer: the public split → models/tokenizer/ (a BPE trained on public text, GPT-2's BPE, or the
pre-trained base's own tokenizer)."""

from __future__ import annotations

import logging

from empriv import paths
from empriv.config import Params
from empriv.pipeline.common import load_texts

log = logging.getLogger("empriv.base")


def main(params: Params, out_dir=paths.TOKENIZER_DIR) -> dict:
    from empriv.io import atomic_dir
    from empriv.models.base import tokenizer_for
    from empriv.models.registry import is_pretrained

    tok = tokenizer_for(params, None if is_pretrained(params.base.name) else load_texts("public"))
    with atomic_dir(out_dir) as tmp:
        tok.save(tmp)
    log.info("tokenizer %s with %d tokens", tok.kind, tok.vocab_size)
    return {"kind": tok.kind, "vocab_size": tok.vocab_size}


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/tokenizer.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
