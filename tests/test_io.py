"""empriv.io: atomic outputs and the JSON encoding of non-finite numbers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from empriv.io import (atomic_dir, atomic_path, file_digest, parse_float, read_json, read_jsonl, write_json,
                       write_jsonl)


class Boom(RuntimeError):
    pass


def test_write_json_round_trip_and_inf_encoding(tmp_path):
    path = tmp_path / "sub" / "m.json"
    write_json(path, {"eps": math.inf, "neg": -math.inf, "nan": math.nan, "x": [1.5, (2, 3)], 4: "int key"})
    raw = json.loads(path.read_text())
    assert raw == {"eps": "inf", "neg": "-inf", "nan": None, "x": [1.5, [2, 3]], "4": "int key"}
    assert '"eps": "inf"' in path.read_text()
    assert parse_float(raw["eps"]) == math.inf
    assert parse_float(raw["neg"]) == -math.inf
    assert parse_float(raw["x"][0]) == 1.5
    assert read_json(path) == raw


def test_write_json_converts_numpy_and_torch_scalars(tmp_path):
    path = tmp_path / "m.json"
    write_json(path, {"a": np.float64(0.25), "b": torch.tensor(3), "c": np.float32("inf")})
    assert read_json(path) == {"a": 0.25, "b": 3, "c": "inf"}


def test_write_json_failure_keeps_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "m.json"
    write_json(path, {"old": 1})
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_json(path, {"new": object()})  # not JSON serialisable
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_atomic_path_body_raises_keeps_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old content")
    with pytest.raises(Boom):
        with atomic_path(path) as tmp:
            assert tmp.parent == path.parent and tmp != path
            tmp.write_text("half of the new con")
            raise Boom()
    assert path.read_text() == "old content"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_atomic_path_body_raises_without_old_file_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(tmp_path / "new.txt") as tmp:
            tmp.write_text("partial")
            raise KeyboardInterrupt()
    assert list(tmp_path.iterdir()) == []


def test_atomic_path_success_replaces(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with atomic_path(path) as tmp:
        tmp.write_text("new")
        assert path.read_text() == "old"  # not visible before the body finishes
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_write_jsonl_failure_midway_keeps_old_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [{"i": 0}, {"i": 1}])

    def rows():
        yield {"i": 10}
        raise Boom()

    with pytest.raises(Boom):
        write_jsonl(path, rows())
    assert read_jsonl(path) == [{"i": 0}, {"i": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_write_jsonl_keeps_unicode(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [{"t": "Zoë → 中文"}, {"t": math.inf}])
    assert "Zoë → 中文" in path.read_text(encoding="utf-8")
    assert read_jsonl(path) == [{"t": "Zoë → 中文"}, {"t": "inf"}]


def test_atomic_dir_replaces_directory_whole(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "stale.bin").write_text("stale")
    (out / "keep.txt").write_text("old")
    with atomic_dir(out) as tmp:
        (tmp / "keep.txt").write_text("new")
        (tmp / "nested").mkdir()
        (tmp / "nested" / "w.bin").write_bytes(b"\x00\x01")
        assert (out / "stale.bin").exists()  # old directory intact until success
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["keep.txt", "nested", "nested/w.bin"]
    assert (out / "keep.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_atomic_dir_failure_keeps_old_and_leaves_no_temp(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "w.bin").write_text("old")
    with pytest.raises(Boom):
        with atomic_dir(out) as tmp:
            (tmp / "w.bin").write_text("partial")
            raise Boom()
    assert [p.name for p in out.iterdir()] == ["w.bin"]
    assert (out / "w.bin").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_atomic_dir_failure_without_old_leaves_nothing(tmp_path):
    with pytest.raises(Boom):
        with atomic_dir(tmp_path / "a" / "fresh") as tmp:
            (tmp / "x").write_text("partial")
            raise Boom()
    assert not (tmp_path / "a" / "fresh").exists()
    assert list((tmp_path / "a").iterdir()) == []


def test_file_digest_is_hashlib_over_the_whole_file_in_blocks(tmp_path):
    import hashlib

    data = bytes(range(256)) * 9000  # 2.2 MB: more than one read block
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert file_digest(path) == hashlib.sha256(data).hexdigest()
    assert file_digest(str(path), "md5") == hashlib.md5(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert file_digest(tmp_path / "empty", "md5") == "d41d8cd98f00b204e9800998ecf8427e"
    with pytest.raises(FileNotFoundError):
        file_digest(tmp_path / "missing")
