"""base: the base model → models/base/ (fp32 safetensors + tokenizer), records/base.json (size, held-out test NLL).
tiny-gpt2 is pre-trained on the public split; a pre-trained base is written as it is (no pre-training)."""

from __future__ import annotations

import logging
import time

from empriv import paths
from empriv.config import Params
from empriv.pipeline.common import load_texts, load_tokenizer

log = logging.getLogger("empriv.base")


def main(params: Params, out_dir=paths.BASE_DIR, metrics_path=paths.BASE_METRICS) -> dict:
    import torch

    from empriv.io import write_json
    from empriv.pipeline.staged_outputs import StagedOutputs
    from empriv.models.base import pretrain_tiny_base, write_pretrained_base
    from empriv.models.lm import encode_fixed, mean_token_nll
    from empriv.models.registry import is_pretrained, resolve_device
    from empriv.models.tokenizer import copy_hf_tokenizer
    from empriv.io import ensure_writable

    ensure_writable(out_dir, metrics_path)  # before pre-training
    b = params.base
    torch.set_num_threads(b.threads or params.runtime.threads)  # it runs alone: base.threads may take every core
    tok = load_tokenizer()
    device = resolve_device(params.runtime.device)
    t0 = time.time()
    test_ids, test_mask = encode_fixed(tok.encode_batch(load_texts("test")), tok.eos_id, b.seq_len)
    losses: list[float] = []
    facts: dict = {}
    with StagedOutputs() as out:  # the model and its record replaced together (no partial outputs)
        tmp = out.directory(out_dir)
        if is_pretrained(b.name):
            model, facts = write_pretrained_base(params, tmp, tok)
        else:
            model, losses = pretrain_tiny_base(params, tok, load_texts("public"), device)
            model.save_pretrained(tmp, safe_serialization=True)
        copy_hf_tokenizer(paths.TOKENIZER_DIR, tmp)
        test_nll = mean_token_nll(model.to(device), test_ids, test_mask, params.score.eval_batch_size)
        model.to("cpu")
        metrics = {
            "name": b.name,
            "pretrained": is_pretrained(b.name),
            "parameters": sum(p.numel() for p in model.parameters()),
            "pretrain_steps": 0 if is_pretrained(b.name) else b.pretrain_steps,
            "pretrain_final_loss": losses[-1] if losses else None,
            "test_nll": test_nll,
            "test_perplexity": float(torch.exp(torch.tensor(test_nll))),
            "threads": torch.get_num_threads(),
            "wall_time_s": time.time() - t0,
            **{k: v for k, v in facts.items() if isinstance(v, (int, float, str, bool)) or v is None},
        }
        write_json(out.file(metrics_path), metrics)
    log.info("base %s: %d parameters, test perplexity %.2f", b.name, metrics["parameters"], metrics["test_perplexity"])
    return metrics


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/base.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
