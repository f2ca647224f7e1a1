"""secrets: the secrets of the corpus → data/secrets.jsonl, data/heldout/{validation,test}.jsonl (the held-out
splits without any sample that contains a secret) and records/secrets.json (ids and counts, never text).

The leak check runs before anything is written: no secret may occur in the public split, nor in the
validation/test splits — for real Enron, whose held-out e-mails naturally repeat its signatures and
disclaimers, in the held-out splits as written (without the samples containing one); for every other
source in the prepared splits themselves. A leak stops the stage with one line naming ids, splits, counts.
"""

from __future__ import annotations

import logging
from pathlib import Path

from empriv import paths
from empriv.config import ConfigError, Params
from empriv.pipeline.common import load_texts, load_tokenizer

log = logging.getLogger("empriv.secrets")


def _read(path: Path) -> list[dict]:
    from empriv.io import read_jsonl

    if not path.exists():
        raise ConfigError(f"{path} does not exist: run the prepare stage first (dvc repro prepare)")
    return read_jsonl(path)


def build(params: Params, tokenizer, prepared_dir: Path = paths.PREPARED_DIR) -> tuple[list[dict], dict]:
    """(secret records, info) of ``data.source``."""
    from empriv.secrets import build as sb
    from empriv.secrets.records import load_overrides

    sp, seq_len, source = params.secrets, params.base.seq_len, params.data.source
    train_texts = load_texts("train", prepared_dir)
    overrides = load_overrides(sp.overrides)
    if source == "synthetic-enron":
        planted = _read(Path(prepared_dir) / paths.PLANTED_SECRETS.name)
        return sb.planted_secrets(planted, train_texts, tokenizer, seq_len, sp.split_rule, sp.min_continuation_chars,
                                  overrides), {}
    if source == "enron":
        return sb.mined_secrets(train_texts, load_texts("public", prepared_dir), tokenizer, seq_len, ngram=sp.ngram,
                                top_k=sp.top_k, min_count=sp.min_count, split_rule=sp.split_rule,
                                min_continuation_chars=sp.min_continuation_chars,
                                min_in_window_fraction=sp.min_in_window_fraction, overrides=overrides)
    if source == "text":
        records, info = text_secrets(params, tokenizer, Path(prepared_dir), train_texts, overrides)
        return records, {**info, "train_records_over_window": records_over_window(train_texts, tokenizer, seq_len)}
    from empriv.data.tofu import QARecord

    authors = [QARecord(r["question"], r["answer"]) for r in _read(Path(prepared_dir) / paths.TOFU_AUTHORS.name)]
    planted_path = Path(prepared_dir) / paths.PLANTED_SECRETS.name
    planted = _read(planted_path) if planted_path.exists() else None
    return sb.tofu_secrets(authors, planted, train_texts, tokenizer)


def text_secrets(params: Params, tokenizer, prepared_dir: Path, train_texts: list[str], overrides: dict):
    """The secrets of ``data.source: text`` by the choice prepare recorded (``data.secret_kind``)."""
    from empriv.io import read_json
    from empriv.pipeline.prepare import TEXT_MANIFEST
    from empriv.secrets import build as sb

    manifest = Path(prepared_dir) / TEXT_MANIFEST
    if not manifest.exists():
        raise ConfigError(f"{manifest} does not exist: run the prepare stage first (dvc repro prepare)")
    kind = read_json(manifest)["secret_kind"]
    sp, seq_len = params.secrets, params.base.seq_len
    if kind == "canaries":  # no string of the data is scored: the audit's canaries are the measurement
        if overrides:
            raise ConfigError("secrets.overrides: data.secret_kind canaries scores no secret (got "
                              f"{len(overrides)} override(s); allowed: secrets.overrides: null)")
        return [], {"secret_kind": "canaries"}
    if kind == "given":
        return sb.given_secrets(overrides, train_texts, tokenizer, seq_len)
    common = dict(top_k=sp.top_k, min_count=sp.min_count, split_rule=sp.split_rule,
                  min_continuation_chars=sp.min_continuation_chars, min_in_window_fraction=sp.min_in_window_fraction,
                  overrides=overrides)
    public = load_texts("public", prepared_dir)
    if kind == "patterns":
        return sb.pattern_secrets(train_texts, public, tokenizer, seq_len, **common)
    records, info = sb.mined_secrets(train_texts, public, tokenizer, seq_len, ngram=sp.ngram, id_prefix="text",
                                     **common)
    return records, {"secret_kind": "mined", **info}


def records_over_window(train_texts: list[str], tokenizer, seq_len: int) -> int:
    """Training records longer than the window: training sees their first ``seq_len`` - 1 tokens only."""
    return sum(1 + len(ids) > seq_len for ids in tokenizer.encode_batch(train_texts))


def main(params: Params, out_path: str | Path = paths.SECRETS, metrics_path: str | Path = paths.SECRETS_METRICS,
         heldout_dir: str | Path = paths.HELDOUT_DIR, prepared_dir: str | Path = paths.PREPARED_DIR) -> list[dict]:
    from empriv.io import write_json, write_jsonl
    from empriv.pipeline.staged_outputs import StagedOutputs
    from empriv.secrets.build import held_out, leak_text, public_view
    from empriv.secrets.leaks import check_no_leaks, find_leaks

    records, info = build(params, load_tokenizer(), Path(prepared_dir))
    source = params.data.source
    canaries_only = info.get("secret_kind") == "canaries"
    if not records and not canaries_only:
        raise ConfigError(f"no secret found in the {source} training split: nothing to measure")
    prepared = {split: _read(paths.split_path(split, prepared_dir)) for split in ("validation", "test")}
    kept = {split: held_out(rows, records) for split, rows in prepared.items()}
    # Real Enron's validation/test naturally hold its recurring strings: they are checked as written (without the
    # samples that contain one). Every other source's prepared splits must hold none at all.
    evaluated = kept if source in ("enron", "text") else prepared
    checked = {"public": load_texts("public", prepared_dir), **{s: [r["text"] for r in rows] for s, rows in evaluated.items()}}
    check_no_leaks(find_leaks({r["id"]: leak_text(r) for r in records}, checked))
    held = {split: {"dropped": len(prepared[split]) - len(kept[split]), "kept": len(kept[split])} for split in kept}
    record = {"n_secrets": len(records), **info, "held_out_samples_with_a_secret": held,
              "leak_check": {"n_checked": len(records), "splits": {s: len(t) for s, t in checked.items()},
                             "n_leaks": 0},
              "secrets": [public_view(r) for r in records]}
    with StagedOutputs() as out:  # the held-out splits, the secrets and their record replaced together
        tmp = out.directory(heldout_dir)
        for split, rows in kept.items():
            write_jsonl(Path(tmp) / f"{split}.jsonl", rows)
        write_jsonl(out.file(out_path), records)
        write_json(out.file(metrics_path), record)
    low = [r["id"] for r in records if r["in_window_fraction"] is not None and r["in_window_fraction"] < 1.0]
    if low:
        log.warning("secrets %s are cut off by the %d-token window in some samples", low, params.base.seq_len)
    if canaries_only:
        log.info("no secret scored (data.secret_kind: canaries): the audit's canaries measure memorisation")
    else:
        log.info("%d secrets, frequencies %.3f%%–%.3f%%", len(records),
                 100 * min(r["frequency"] for r in records), 100 * max(r["frequency"] for r in records))
    return records


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/mine_secrets.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
