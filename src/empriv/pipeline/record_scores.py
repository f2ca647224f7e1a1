"""record_scores: each training record's mean NLL under the initial base model → data/record_scores.json.

Computed once for the user-level perplexity strategies (``highppl``/``lowppl`` of cube.unit; perplexity = exp of
the mean NLL), keyed by record id. Numbers only, a stage output like the prepared data (never logged or tracked).
"""

from __future__ import annotations

import logging
import time

from empriv import paths
from empriv.config import Params

log = logging.getLogger("empriv.train")


def main(params: Params, out_path=paths.RECORD_SCORES) -> dict:
    from empriv.data.selection import record_mean_nll, write_record_scores
    from empriv.io import ensure_writable, read_jsonl
    from empriv.models.registry import resolve_device
    from empriv.pipeline.common import load_base, load_tokenizer
    from empriv.stage import set_threads

    ensure_writable(out_path)  # before the base model scores every training record
    set_threads(params)
    t0 = time.time()
    rows = read_jsonl(paths.split_path("train"))
    tok = load_tokenizer()
    tokens = tok.encode_batch([r["text"] for r in rows])
    device = resolve_device(params.runtime.device)
    model = load_base().to(device)
    nll = record_mean_nll(model, tokens, eos_id=tok.eos_id, seq_len=params.base.seq_len,
                          batch_size=params.score.eval_batch_size, show_progress=True)
    meta = {"model": "initial base (models/base)", "base": params.base.name, "seq_len": params.base.seq_len,
            "n_records": len(rows)}
    write_record_scores(out_path, [r["id"] for r in rows], nll, meta=meta)
    log.info("record scores: mean NLL of %d training records under the base in %.1f s (median %.3f nats)",
             len(rows), time.time() - t0, float(sorted(nll)[len(nll) // 2]))
    return meta


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/record_scores.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
