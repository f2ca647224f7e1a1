"""``secrets.overrides`` against the corpus, checked by ``empriv validate`` before any output is touched.

An override names a secret by id and gives its split, ``{"id", "prompt", "continuation"}``; the secrets stage
applies it to the secret of that id, whose text must be ``prompt + continuation``. Its file's format is checked
with the other raw inputs (:func:`empriv.pipeline.input_checks.overrides_errors`); this module checks what the
format cannot show, the way the secrets stage will see it, so that a wrong id or text fails ``make repro`` in
validation with one line per override, not in the secrets stage after the sweep removed its outputs (three times,
retried):

- ``synthetic-enron``: the id must be one of the planted secrets (``secret-00`` …, one per
  ``data.secret_frequencies``) and ``prompt + continuation`` that secret's text; the generator is run as prepare
  runs it (a fraction of a second at the default size);
- ``enron``: the id must be one the mining can give (``enron-000`` … below ``secrets.top_k``; which of them the
  mining keeps is known only after it ran) and the text must occur in the training split, the first
  ``data.n_train`` cleaned e-mails of ``data.path``, as prepare selects them;
- ``tofu`` and ``synthetic-tofu``: their secrets (author → genre) take no overrides.

Lines name the override's line and id, never its text (secrets stay out of logs). Results are cached in the input
checks' cache under the overrides file's and the corpus's identity and the params they depend on.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from empriv.config import Params
from empriv.pipeline.input_checks import CACHE, FactCache, _bounded_token_counter, identity

_MINED_ID = re.compile(r"^enron-(\d+)$")


def _problems_synthetic(params: Params, overrides: list[tuple[int, str, str, str]]) -> list[str]:
    from empriv.data.prepare import synthetic_enron

    prepared = synthetic_enron(params.data)  # exactly what the prepare stage writes
    planted = {p["id"]: p["text"] for p in prepared.planted}
    ids = sorted(planted)
    allowed = f"the planted secrets' ids, {ids[0]} … {ids[-1]}" if ids else "none: data.secret_frequencies is empty"
    train = [row["text"] for row in prepared.splits["train"]]
    problems = []
    for line, sid, prompt, continuation in overrides:
        text = prompt + continuation
        if sid not in planted:
            problems.append(f"line {line} (id {sid}): no planted secret has this id (allowed: {allowed})")
        elif text != planted[sid]:
            where = "is another string of the training data" if any(text in t for t in train) else \
                "does not occur in the training data"
            problems.append(f"line {line} (id {sid}): prompt + continuation {where}, not the text of secret {sid} "
                            "(allowed: the secret's text split in two)")
    return problems


def _problems_enron(params: Params, path: Path, overrides: list[tuple[int, str, str, str]]) -> list[str]:
    from empriv.data.enron import clean_enron, load_enron

    top_k = params.secrets.top_k
    allowed = f"an id the mining gives, enron-000 … enron-{top_k - 1:03d} (secrets.top_k = {top_k})"
    problems: list[tuple[int, str]] = []
    texts = []
    for line, sid, prompt, continuation in overrides:
        found = _MINED_ID.match(sid)
        if not found or sid != f"enron-{int(found.group(1)):03d}" or int(found.group(1)) >= top_k:
            problems.append((line, f"line {line} (id {sid}): not an id the secrets stage can mine (allowed: {allowed})"))
        else:
            texts.append((line, sid, prompt + continuation))
    if texts:
        try:
            emails, _ = load_enron(path)
        except (csv.Error, ValueError, OSError):
            emails = None  # a corpus prepare cannot read: the corpus's own check names it
        if emails is not None:
            d = params.data
            cleaned = clean_enron(emails, _bounded_token_counter(), top_n=d.top_n_people, seed=d.seed)
            train = [e.body for e in list(cleaned.train)[: d.n_train]]
            problems += [(line, f"line {line} (id {sid}): prompt + continuation does not occur in the training data "
                                f"(the first data.n_train = {d.n_train} cleaned e-mails of data.path; allowed: a string "
                                "the mining finds there)")
                         for line, sid, text in texts if not any(text in body for body in train)]
    return [message for _, message in sorted(problems)]


def override_corpus_errors(params: Params, root: str | Path = ".", cache_path: str | Path | None = CACHE) -> list[str]:
    """One line per override of ``secrets.overrides`` whose id or text the corpus does not have (see the module
    docstring), ``root`` the params file's directory; [] without overrides, and for a file whose format is wrong (its
    own check names that). Results are kept in the input checks' cache (``cache_path`` under ``root``)."""
    if params.secrets.overrides is None:
        return []
    root = Path(root)
    cache = FactCache(None if cache_path is None else root / cache_path)
    try:
        return _errors(params, root, cache)
    finally:
        cache.save()


def _errors(params: Params, root: Path, cache: FactCache) -> list[str]:
    from empriv.secrets.records import override_lines, override_problems

    o, d = params.secrets.overrides, params.data
    if o is None:
        return []
    path = Path(o).expanduser()
    path = path if path.is_absolute() else root / path
    if not path.is_file() or override_problems(path):
        return []
    where = f"secrets.overrides: {o}"
    if d.source in ("tofu", "synthetic-tofu"):
        n = len(override_lines(path))
        return [f"{where}: data.source {d.source} takes no overrides: its secrets are author → genre pairs "
                f"(got {n} override(s); allowed: secrets.overrides: null)"] if n else []
    if d.source == "synthetic-enron":
        key = ["overrides", identity(path), d.source, d.n_train, d.n_validation, d.n_test, d.n_public, d.seed,
               list(d.secret_frequencies)]
        problems = cache.get(key, lambda: _problems_synthetic(params, override_lines(path)))
    elif d.source == "enron" and d.path:
        corpus = Path(d.path).expanduser()
        corpus = corpus if corpus.is_absolute() else root / corpus
        if not corpus.exists():
            return []  # the params' own check says so
        key = ["overrides", identity(path), d.source, identity(corpus), d.top_n_people, d.seed, d.n_train,
               params.secrets.top_k]
        problems = cache.get(key, lambda: _problems_enron(params, corpus, override_lines(path)))
    else:
        return []
    return [f"{where} {problem}" for problem in problems]
