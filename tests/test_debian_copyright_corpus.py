"""tools/debian_copyright_corpus.py: a corpus from Debian copyright files, deterministic, one record per paragraph of
each distinct file, on a real (small, fake) doc tree."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "debian_copyright_corpus.py"
sys.path.insert(0, str(ROOT / "tools"))
import debian_copyright_corpus as dcc  # noqa: E402

DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: alpha
Upstream-Contact: Ann Upstream <ann@alpha.example>

Files: *
Copyright: 2001 Ann Upstream <ann@alpha.example>
License: GPL-2+

Files: debian/*
Copyright: 2010 Dee Maintainer <dee@maint.example>
License: GPL-2+
  \t
License: GPL-2+
 This program is free software.
 .
 On Debian systems see /usr/share/common-licenses/GPL-2.
"""
FREE = "This package was debianized by Dee Maintainer <dee@maint.example>.\r\n\r\nCopyright: public domain\r\n"


def fake_doc_tree(root: Path) -> Path:
    """A doc tree: alpha (DEP-5), alpha-dev (the same file), beta (free-form, CRLF), an alias directory linking to
    beta, a package without a copyright file, one with an empty file and one in Latin-1."""
    doc = root / "doc"
    for name, text in (("alpha", DEP5), ("alpha-dev", DEP5), ("beta", FREE), ("empty", "  \n")):
        (doc / name).mkdir(parents=True)
        (doc / name / "copyright").write_bytes(text.encode("utf-8"))
    (doc / "gamma").mkdir()
    (doc / "gamma" / "copyright").write_bytes("Copyright: 1999 Jos\xe9 Lat\xedn\n".encode("latin-1"))
    (doc / "nocopyright").mkdir()
    (doc / "nocopyright" / "changelog.gz").write_bytes(b"\x1f\x8b")
    os.symlink(doc / "beta", doc / "beta-alias")
    return doc


def test_paragraph_records_of_distinct_files_in_sorted_package_order(tmp_path):
    rows = dcc.build_records(fake_doc_tree(tmp_path))
    assert [(r["package"], r["paragraph"], r["kind"]) for r in rows] == [
        ("alpha", 0, "header"), ("alpha", 1, "files"), ("alpha", 2, "files"), ("alpha", 3, "license"),
        ("beta", 0, "text"), ("beta", 1, "text"), ("gamma", 0, "text")]
    alpha, beta, gamma = rows[0], rows[4], rows[6]
    assert alpha["packages"] == 2 and beta["packages"] == 2 and gamma["packages"] == 1  # alpha-dev, beta-alias
    assert {r["format"] for r in rows[:4]} == {"dep5"} and beta["format"] == gamma["format"] == "free-form"
    assert [r["license"] for r in rows] == [None, "GPL-2+", "GPL-2+", "GPL-2+", None, None, None]
    # a whitespace-only line separates paragraphs; continuation lines (' .') stay inside theirs; CRLF normalised
    assert rows[2]["text"] == "Files: debian/*\nCopyright: 2010 Dee Maintainer <dee@maint.example>\nLicense: GPL-2+"
    assert rows[3]["text"].count("\n") == 3 and rows[3]["text"].endswith("GPL-2.")
    assert beta["text"] == "This package was debianized by Dee Maintainer <dee@maint.example>."
    assert gamma["text"] == "Copyright: 1999 José Latín"  # Latin-1 decoded


def test_file_records(tmp_path):
    rows = dcc.build_records(fake_doc_tree(tmp_path), records="file")
    assert [(r["package"], r["packages"], r["license"]) for r in rows] == [("alpha", 2, None), ("beta", 2, None),
                                                                           ("gamma", 1, None)]
    assert rows[0]["text"] == "\n\n".join(dcc.paragraphs(DEP5)) and rows[0]["kind"] == "text"
    with pytest.raises(ValueError, match="records must be one of paragraph, file, got 'line'"):
        dcc.build_records(tmp_path / "doc", records="line")


def test_cli_writes_the_same_bytes_twice_and_prints_counts_only(tmp_path):
    doc = fake_doc_tree(tmp_path)
    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}" / "corpus.jsonl"
        proc = subprocess.run([sys.executable, str(TOOL), "--doc-root", str(doc), "--out", str(out)],
                              capture_output=True, text=True, check=True)
        outs.append(out.read_bytes())
        summary = json.loads(proc.stdout)
        assert "example" not in proc.stdout and "Maintainer" not in proc.stdout  # no address or name
    assert outs[0] == outs[1]
    # five non-empty files (the empty one is skipped), three distinct contents
    assert summary == {"out": str(out), "copyright_files": 5, "distinct_files": 3, "records": 7,
                       "by_format": {"dep5": 4, "free-form": 3},
                       "by_kind": {"files": 2, "header": 1, "license": 1, "text": 3}, "packages_as_units": 3}
    lines = outs[0].decode("utf-8").splitlines()
    assert len(lines) == 7 and json.loads(lines[0])["text"].startswith("Format: ")
    assert not list(out.parent.glob("*.tmp"))


def test_cli_errors_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(TOOL), "--doc-root", str(tmp_path / "missing"),
                           "--out", str(tmp_path / "x.jsonl")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "doc root must be a directory" in proc.stderr
    (tmp_path / "emptydoc").mkdir()
    proc = subprocess.run([sys.executable, str(TOOL), "--doc-root", str(tmp_path / "emptydoc"),
                           "--out", str(tmp_path / "x.jsonl")], capture_output=True, text=True)
    assert proc.returncode == 1 and "no copyright file" in proc.stderr and not (tmp_path / "x.jsonl").exists()
