"""A real text corpus from Debian's per-package copyright files, for ``data.source: text`` (issue 44).

    python tools/debian_copyright_corpus.py                      # /usr/share/doc → data/external/debian-copyright.jsonl
    python tools/debian_copyright_corpus.py --doc-root DIR --out FILE --records file

Every Debian package installs ``/usr/share/doc/<package>/copyright``. Most follow the machine-readable format DEP-5
(https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/): paragraphs separated by blank lines — a header
(``Format:``, ``Upstream-Name:``, ``Upstream-Contact:``), ``Files:`` paragraphs naming who holds the copyright of which
files and under which ``License:``, and stand-alone ``License:`` paragraphs with a licence's text; the others are
free-form prose. The same maintainers' names and e-mail addresses recur across many packages (the ``debian/*``
paragraph of every package a person maintains, upstream contacts of a project's several packages): real PII-like
strings that ``data.secret_kind: patterns`` finds and counts.

What this writes, deterministically (no clock, no randomness; the same doc tree gives the same bytes):

- Packages are read in sorted order of their directory name; a package without a readable ``copyright`` file is
  skipped. Files are decoded as UTF-8 (Latin-1 when that fails) with line ends normalised to ``\\n``.
- **Identical files are one source.** Binary packages built from one source package ship the same copyright file
  (``libfoo1``, ``libfoo-dev``, ``foo-doc``), and some doc directories are symlinks to another's. Each distinct
  content is kept once, named by the first package (sorted) that ships it; ``packages`` counts how many do. Without
  this a file would count once per binary package, and a record could sit in the training and the test split at once.
- **One record per paragraph** (the default, ``--records paragraph``): a file's median is ~4,000 characters (a few
  hundred to thousands of tokens), so a training window of ~100 tokens would see the header of each file and almost
  never its ``Files: debian/*`` paragraph, where the Debian maintainer's address sits. A paragraph (median ~170
  characters) is a self-contained statement that fits the window, and repetition across packages is what is left
  to memorise. ``--records file`` writes one record per distinct file instead.

Fields of a record (JSONL, one object per line):

- ``text``: the paragraph (or file) as written, without the blank lines around it;
- ``package``: the package naming the file — usable as ``data.user_field``: every paragraph of one source package
  then forms one privacy unit of user-level DP (a package's copyright statements are one contributor's data);
- ``packages``: how many installed packages ship this exact file;
- ``paragraph``: the paragraph's index in its file (0 for ``--records file``);
- ``format``: ``dep5`` (the file's first paragraph has a ``Format:`` field) or ``free-form``;
- ``kind``: ``header``, ``files`` or ``license`` for DEP-5 paragraphs (``other`` for any other DEP-5 paragraph),
  ``text`` for free-form paragraphs and whole files;
- ``license``: the first line of the paragraph's ``License:`` field (a short name such as ``GPL-2+``), else null.

Licences: each copyright file states the licence(s) of its package's files and is distributed with the package
under those terms; Debian's archive holds only packages whose licences allow redistribution (the Debian Free
Software Guidelines, or non-free with redistribution allowed). The corpus is a collection of those files as
installed on a machine and is redistributable as the packages are; the ``license`` field says which licence a
paragraph states. The corpus is not committed: this tool rebuilds it from the doc tree (its content depends on
which packages are installed). The summary it prints holds counts only, never a name or address.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

DEFAULT_DOC_ROOT = Path("/usr/share/doc")
DEFAULT_OUT = Path("data/external/debian-copyright.jsonl")
RECORD_UNITS = ("paragraph", "file")


def read_text(path: Path) -> str:
    """The file's text: UTF-8, else Latin-1 (old files), with ``\\r\\n`` and ``\\r`` made ``\\n``."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def copyright_files(doc_root: Path) -> list[tuple[str, str]]:
    """(package, text) of every ``<doc_root>/<package>/copyright`` that is a readable, non-empty file (symlinks
    followed), in sorted order of the package name."""
    out = []
    for entry in sorted(os.listdir(doc_root)):
        path = doc_root / entry / "copyright"
        if not path.is_file():
            continue
        try:
            text = read_text(path)
        except OSError:
            continue
        if text.strip():
            out.append((entry, text))
    return out


def distinct_files(files: list[tuple[str, str]]) -> list[tuple[str, int, str]]:
    """(first package, how many packages ship it, text) of each distinct content, in the order first seen."""
    first: dict[str, str] = {}
    count: Counter = Counter()
    for package, text in files:
        first.setdefault(text, package)
        count[text] += 1
    return [(package, count[text], text) for text, package in first.items()]


def paragraphs(text: str) -> list[str]:
    """The blank-line-separated paragraphs of ``text`` (a line of only spaces or tabs is blank), lines unchanged."""
    out, current = [], []
    for line in text.split("\n"):
        if line.strip():
            current.append(line)
        elif current:
            out.append("\n".join(current))
            current = []
    if current:
        out.append("\n".join(current))
    return out


def field_value(paragraph: str, name: str) -> str | None:
    """The first line of DEP-5 field ``name`` in ``paragraph`` (stripped), None when absent or empty."""
    prefix = name.lower() + ":"
    for line in paragraph.split("\n"):
        if not line[:1].isspace() and line.lower().startswith(prefix):
            return line[len(prefix):].strip() or None
    return None


def is_dep5(paras: list[str]) -> bool:
    return bool(paras) and field_value(paras[0], "Format") is not None


def paragraph_kind(paragraph: str, index: int, dep5: bool) -> str:
    if not dep5:
        return "text"
    if index == 0 and field_value(paragraph, "Format") is not None:
        return "header"
    if field_value(paragraph, "Files") is not None:
        return "files"
    if field_value(paragraph, "License") is not None:
        return "license"
    return "other"


def build_records(doc_root: Path, records: str = "paragraph") -> list[dict]:
    """The corpus's records (see the module docstring), in a deterministic order: distinct files in sorted order
    of their first package, paragraphs in file order."""
    if records not in RECORD_UNITS:
        raise ValueError(f"records must be one of {', '.join(RECORD_UNITS)}, got {records!r}")
    if not Path(doc_root).is_dir():
        raise ValueError(f"doc root must be a directory, got {str(doc_root)!r}")
    out = []
    for package, n_packages, text in distinct_files(copyright_files(Path(doc_root))):
        paras = paragraphs(text)
        dep5 = is_dep5(paras)
        if records == "file":
            out.append({"text": "\n\n".join(paras), "package": package, "packages": n_packages, "paragraph": 0,
                        "format": "dep5" if dep5 else "free-form", "kind": "text",
                        "license": field_value(paras[0], "License") if dep5 else None})
            continue
        for i, p in enumerate(paras):
            out.append({"text": p, "package": package, "packages": n_packages, "paragraph": i,
                        "format": "dep5" if dep5 else "free-form", "kind": paragraph_kind(p, i, dep5),
                        "license": field_value(p, "License") if dep5 else None})
    return out


def write_jsonl(rows: list[dict], out: Path) -> None:
    """``rows`` as JSONL at ``out``, written to a temporary file and renamed (no partial corpus)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, out)


def summary(doc_root: Path, rows: list[dict]) -> dict:
    """Counts only (no text, name or address): files read, distinct files, records by format and kind."""
    files = copyright_files(Path(doc_root))
    return {"copyright_files": len(files), "distinct_files": len(distinct_files(files)), "records": len(rows),
            "by_format": dict(sorted(Counter(r["format"] for r in rows).items())),
            "by_kind": dict(sorted(Counter(r["kind"] for r in rows).items())),
            "packages_as_units": len({r["package"] for r in rows})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--doc-root", type=Path, default=DEFAULT_DOC_ROOT, help="where the <package>/copyright files are")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSONL to write (keep it out of git)")
    parser.add_argument("--records", choices=RECORD_UNITS, default="paragraph",
                        help="one record per paragraph (default) or per distinct file")
    args = parser.parse_args(argv)
    try:
        rows = build_records(args.doc_root, args.records)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: no copyright file under {args.doc_root}", file=sys.stderr)
        return 1
    write_jsonl(rows, args.out)
    print(json.dumps({"out": str(args.out), **summary(args.doc_root, rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
