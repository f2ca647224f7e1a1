"""A raw input file's kind and identity, read without parsing it: what the corpus checks of validation
(:mod:`empriv.pipeline.input_checks`, :mod:`empriv.pipeline.text_checks`) share."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

SNIFF_BYTES = 8192
_MAGIC = {b"\x1f\x8b": "gzip-compressed", b"PK\x03\x04": "a zip archive", b"BZh": "bzip2-compressed",
          b"\xfd7zXZ\x00": "xz-compressed", b"7z\xbc\xaf\x27\x1c": "a 7z archive", b"\x28\xb5\x2f\xfd": "zstd-compressed",
          b"%PDF": "a PDF file", b"SQLite format 3": "an SQLite database", b"PAR1": "a Parquet file"}


def sniff(path: Path) -> str | None:
    """What a file looks like from its first bytes when it is not text: ``"gzip-compressed"``, ``"binary"`` …;
    None for text."""
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    for magic, what in _MAGIC.items():
        if head.startswith(magic):
            return what
    if b"\0" in head:
        return "binary"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 4:  # not just a character cut at the end of the sample
            bad = sum(1 for b in head if b >= 0x80)
            if bad > len(head) // 10:
                return "binary"
    return None


def _what(kind: str) -> str:
    """A sniffed kind as a noun phrase: ``a binary file``, ``a gzip-compressed file``, ``a zip archive``."""
    if kind == "binary" or kind.endswith("compressed"):
        return f"a {kind} file"
    return kind


def identity(path: Path) -> list:
    """A file's (or every file of a directory's) path, size, modification time and inode: what DVC's own state
    database keys its hashes on. Cheap: no byte is read."""
    if path.is_file():
        st = path.stat()
        return [str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino]
    h = hashlib.sha256()
    n = 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            st = os.stat(os.path.join(root, name))
            h.update(f"{os.path.join(root, name)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
            n += 1
    return [str(path.resolve()), n, h.hexdigest()]
