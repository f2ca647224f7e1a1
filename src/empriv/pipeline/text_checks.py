"""Validation of your own corpus (``data.source: text``) before DVC touches any output: one line per problem.

Called by :func:`empriv.pipeline.input_checks.corpus_errors` (``empriv validate``, ``make repro``, the validate and
``input@corpus`` stages). It reads the corpus as prepare will (:mod:`empriv.data.text`) and reports:

- the file as a whole: empty, binary or compressed, a directory without files, a Parquet file polars cannot read;
- every record problem the loader finds (a line that is not JSON, a missing ``data.text_field`` /
  ``data.user_field`` / ``data.split_field``, a text that is not a string, an unknown split value);
- too few training records for ``data.n_train`` (after ``data.long_records: drop``), no ``public`` record with
  ``data.public: split``;
- the secret choice: ``given`` needs ``secrets.overrides`` and each of its secrets must occur in the training
  records prepare will select (a secret that never occurs is one line naming its id, never its text); ``canaries``
  takes no overrides.
- the public file (``data.public: file``, :func:`public_file_errors`; the ``input@public`` stage runs it again): the
  file as a whole and its records as above (the corpus's format and text field), at least one record that is not
  also a record of the corpus (those prepare drops), and no ``given`` secret in the public split prepare will write.

Records longer than ``data.max_tokens`` GPT-2 tokens are counted (prepare truncates or drops them as configured,
and records the count in ``records/prepare.json``); the secrets stage counts the training records longer than the
window ``base.seq_len`` in the run's own tokens (``records/secrets.json``). Facts are cached with the other input
checks'.
"""

from __future__ import annotations

from pathlib import Path

from empriv.config import Params


def _whole_file_problem(path: Path, fmt: str) -> str | None:
    from empriv.pipeline.file_facts import _what, sniff

    if fmt == "files":
        if not path.is_dir():
            return "a file, but data.text_format is files (allowed: a directory of plain-text files, or text_format auto)"
        if not any(f.is_file() and not f.name.startswith(".") for f in path.rglob("*")):
            return "a directory without any file (allowed: a directory of plain-text files, one record each)"
        return None
    if not path.is_file():
        return f"a directory, but data.text_format is {fmt} (allowed: a {fmt} file, or text_format files or auto)"
    if path.stat().st_size == 0:
        return f"empty file (allowed: a {fmt} file with at least one record)"
    if fmt == "parquet":
        return None
    kind = sniff(path)
    if kind is not None:
        return f"{_what(kind)}, not {fmt} text (allowed: a UTF-8 {fmt} file; decompress or convert it first)"
    return None


def text_facts(params: Params, path: Path, given: list[tuple[int, str, str, str]] | None) -> dict:
    """What prepare would find in the corpus: ``problems`` (lines), the counts, and the ``given`` secrets missing
    from the training records (their line and id)."""
    from empriv.data.text import limit_length, load_text_corpus, resolve_format, split_records

    d = params.data
    fmt = resolve_format(path, d.text_format)
    whole = _whole_file_problem(path, fmt)
    if whole:
        return {"problems": [whole]}
    records, load = load_text_corpus(path, text_format=d.text_format, text_field=d.text_field,
                                     user_field=d.user_field, split_field=d.split_field,
                                     allow_public=d.public == "split")
    if load.problems:
        return {"problems": load.problems}
    if not records:
        return {"problems": [f"no record with a non-empty text ({load.n_rows} read, {load.n_empty} empty; allowed: a "
                             "corpus with text)"]}
    from empriv.models.tokenizer import load_gpt2

    kept, n_over = limit_length(records, load_gpt2() if d.max_tokens else None, d.max_tokens, d.long_records)
    parts = split_records(kept, d.seed, d.split_field is not None)
    facts = {"problems": [], "records": len(records), "rows": load.n_rows, "empty": load.n_empty,
             "over_max_tokens": n_over,
             "available": {s: len(v) for s, v in parts.items()}, "missing_given": []}
    if given:
        train = [r.text for r in parts["train"][: d.n_train]]
        facts["missing_given"] = [(line, sid) for line, sid, p, c in given if not any(p + c in t for t in train)]
    return facts


def text_corpus_errors(params: Params, root: Path, path: Path, cache) -> list[str]:
    """One line per problem of the text corpus at ``path`` and of the secret choice (see the module docstring)."""
    from empriv.data.prepare import MIN_N_TRAIN
    from empriv.pipeline.file_facts import identity
    from empriv.secrets.records import override_lines, override_problems

    d, o = params.data, params.secrets.overrides
    where = f"data.path: {d.path}"
    overrides = None
    if o is not None:
        opath = Path(o).expanduser()
        opath = opath if opath.is_absolute() else root / opath
        overrides = opath if opath.is_file() and not override_problems(opath) else None
    errors = []
    if d.secret_kind == "given" and o is None:
        errors.append("data.secret_kind: 'given' needs secrets.overrides, the JSONL of your secrets (got "
                      "secrets.overrides: null; allowed: a file of {id, prompt, continuation} lines)")
    if d.secret_kind == "canaries" and o is not None:
        errors.append(f"secrets.overrides: {o}: data.secret_kind canaries scores no secret (allowed: null)")
    given = override_lines(overrides) if overrides is not None and d.secret_kind == "given" else None
    key = ["text", identity(path), d.text_format, d.text_field, d.user_field, d.split_field, d.public, d.seed,
           d.max_tokens, d.long_records, d.n_train,
           identity(overrides) if given is not None else None]
    facts = cache.get(key, lambda: text_facts(params, path, given))
    if facts["problems"]:
        return errors + [f"{where}: {p}" for p in facts["problems"]]
    train = facts["available"]["train"]
    detail = (f"{facts['records']} records" + (f", {facts['over_max_tokens']} dropped as longer than data.max_tokens "
                                               f"= {d.max_tokens}" if d.long_records == "drop" and d.max_tokens else "")
              + (", split by data.split_field" if d.split_field else ", 90 % of them by the seeded split"))
    if train < d.n_train:
        bound = (f"data.n_train <= {train}" if train >= MIN_N_TRAIN else
                 f"a corpus with at least {MIN_N_TRAIN} training records")
        errors.append(f"{where}: the corpus gives {train} training records ({detail}), fewer than data.n_train = "
                      f"{d.n_train} (allowed: {bound})")
    if d.public == "split" and not facts["available"]["public"]:
        errors.append(f"{where}: data.public is split but no record has split 'public' (allowed: builtin, or public "
                      "records in the corpus)")
    for line, sid in facts["missing_given"]:
        errors.append(f"secrets.overrides: {o} line {line} (id {sid}): the secret occurs in no training record (the "
                      f"first data.n_train = {d.n_train} of data.path; allowed: a string of the training data)")
    return errors


def public_facts(params: Params, root: Path, path: Path, given: list[tuple[int, str, str, str]] | None) -> dict:
    """What prepare would find in the public file: ``problems`` (lines), ``records``, ``dropped`` (also a record of
    the corpus) and the ``given`` secrets that occur in the public split (their line and id)."""
    from empriv.data.text import drop_private_overlap, limit_length, load_text_corpus, private_texts, resolve_format
    from empriv.data.text import split_records

    d = params.data
    fmt = resolve_format(path, d.text_format)
    whole = _whole_file_problem(path, fmt)
    if whole:
        return {"problems": [whole]}
    public, load = load_text_corpus(path, text_format=d.text_format, text_field=d.text_field)
    if load.problems:
        return {"problems": load.problems}
    if not public:
        return {"problems": [f"no record with a non-empty text ({load.n_rows} read, {load.n_empty} empty; allowed: a "
                             "file of public records)"]}
    corpus = Path(d.path).expanduser()
    corpus = corpus if corpus.is_absolute() else root / corpus
    unknown = {"problems": [], "records": len(public), "dropped": None, "given_in_public": []}
    if not corpus.exists() or _whole_file_problem(corpus, resolve_format(corpus, d.text_format)):
        return unknown  # the corpus's own lines say what is wrong with it
    records, corpus_load = load_text_corpus(corpus, text_format=d.text_format, text_field=d.text_field,
                                            user_field=d.user_field, split_field=d.split_field)
    if corpus_load.problems:
        return unknown
    gpt2 = None
    if d.max_tokens:
        from empriv.models.tokenizer import load_gpt2

        gpt2 = load_gpt2()
    kept_corpus, _ = limit_length(records, gpt2, d.max_tokens, d.long_records)
    kept, dropped = drop_private_overlap(public, private_texts(records, split_records(kept_corpus, d.seed,
                                                                                       d.split_field is not None)))
    written = [r.text for r in kept[: d.n_public]]
    found = [(line, sid) for line, sid, p, c in (given or []) if any(p + c in t for t in written)]
    return {"problems": [], "records": len(public), "dropped": dropped, "given_in_public": found}


def public_file_errors(params: Params, root: Path, cache) -> list[str]:
    """One line per problem of the public file ``data.public_path`` (``data.public: file``; the module docstring)."""
    from empriv.pipeline.file_facts import identity
    from empriv.secrets.records import override_lines, override_problems

    d, o = params.data, params.secrets.overrides
    if d.source != "text" or d.public != "file" or not d.public_path:
        return []
    path = Path(d.public_path).expanduser()
    path = path if path.is_absolute() else root / path
    if not path.exists():
        return []  # the params' own check says so
    corpus = Path(d.path).expanduser()
    corpus = corpus if corpus.is_absolute() else root / corpus
    overrides = None
    if o is not None and d.secret_kind == "given":
        opath = Path(o).expanduser()
        opath = opath if opath.is_absolute() else root / opath
        overrides = opath if opath.is_file() and not override_problems(opath) else None
    given = override_lines(overrides) if overrides is not None else None
    key = ["text-public", identity(path), identity(corpus) if corpus.exists() else None, d.text_format, d.text_field,
           d.user_field, d.split_field, d.seed, d.max_tokens, d.long_records, d.n_public,
           identity(overrides) if given is not None else None]
    facts = cache.get(key, lambda: public_facts(params, root, path, given))
    where = f"data.public_path: {d.public_path}"
    if facts["problems"]:
        return [f"{where}: {p}" for p in facts["problems"]]
    errors = []
    if facts["dropped"] is not None and facts["dropped"] == facts["records"]:
        errors.append(f"{where}: every one of its {facts['records']} records is also a record of data.path (the same "
                      "text up to whitespace), so no public record is left (allowed: public records that are not in "
                      "the corpus)")
    for line, sid in facts["given_in_public"]:
        errors.append(f"secrets.overrides: {o} line {line} (id {sid}): the secret occurs in the public split (records "
                      f"of data.public_path: {d.public_path}; allowed: a string the public file does not hold)")
    return errors
