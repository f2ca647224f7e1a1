"""The disk-space estimate of a sweep (empriv.infra.sweep.space), on hand-made dvc.lock sizes and real files: an
item's own recorded size, its stage's mean, nothing measured; commit-only items count for the cache; whole blocks;
the one-line refusal on a real disk. The sweeps on a 1 MiB tmpfs cache: tests/reliability/test_sweep_disk.py (which
also covers empriv.infra.sweep.commit, the commit that runs out of space)."""

from __future__ import annotations

import errno
import re

import pytest

from empriv.infra.sweep.plan import Item
from empriv.infra.sweep.space import (BLOCK, RUN_CACHE_ENTRY, Estimate, NotEnoughSpace, check_space, commit_line,
                                      estimate, free_bytes, size_text)


def _item(address: str, outs: list[str] | None = None) -> Item:
    stage, _, key = address.partition("@")
    return Item(address=address, stage=stage, key=key, commands=["true"], wdir="/", outs=outs or [])


def test_the_estimate_takes_an_items_own_size_else_its_stages_mean(tmp_path):
    current = tmp_path / "train-1.bin"
    current.write_bytes(b"x" * (3 * BLOCK))  # removed before train@1 runs: the workspace needs only the rest
    lock = {"train@1": {"runs/train-1.bin": (10 * BLOCK, 1)}, "train@2": {"runs/train-2": (20 * BLOCK - 5, 4)},
            "total": {"total.txt": (3, 1)}}
    found = estimate([_item("train@1", [str(current)]), _item("train@3"), _item("score@1")], [], lock)
    mean = (10 * BLOCK + 20 * BLOCK) // 2
    assert found.workspace == 10 * BLOCK - 3 * BLOCK + mean
    assert found.cache == 10 * BLOCK + mean + 2 * RUN_CACHE_ENTRY
    assert found.unknown == ["score@1"] and (found.to_run, found.to_commit) == (3, 0)
    commit = estimate([], [_item("up", [str(current), str(tmp_path / "gone")])], {})
    assert (commit.workspace, commit.cache) == (0, 3 * BLOCK + RUN_CACHE_ENTRY)
    # many small files take a block each
    assert estimate([_item("x@1")], [], {"x@1": {"d": (10, 5)}}).cache == 5 * BLOCK + RUN_CACHE_ENTRY


def test_the_check_refuses_in_one_line_what_cannot_fit_and_logs_what_it_checked(tmp_path):
    free = free_bytes(tmp_path)
    line = check_space(tmp_path, tmp_path / "cache", ["copy"], Estimate(workspace=BLOCK, cache=BLOCK, to_run=1))
    assert line.startswith("disk space: 1 item(s) to run will write about 4.0 KiB into the workspace")
    assert "one disk, DVC keeps a second copy in the cache" in line
    with pytest.raises(NotEnoughSpace) as err:
        check_space(tmp_path, tmp_path / "cache", ["copy"], Estimate(workspace=free, cache=BLOCK, to_run=2,
                                                                     to_commit=1, unknown=["a@1"]))
    assert re.fullmatch(rf"not enough free disk space for this sweep: 2 item\(s\) to run and 1 to commit will write "
                        rf"about [\d.]+ \wiB into the workspace {tmp_path} and the DVC cache {tmp_path}/cache, one disk "
                        r"\(DVC keeps a second copy in the cache\), which has [\d.]+ \wiB free; free space, or point "
                        r"the DVC cache at a larger disk \(`dvc cache dir <path>`\), then run again \(estimated from "
                        r"dvc\.lock's output sizes; 1 item\(s\) of stages never committed not counted\)",
                        str(err.value)), str(err.value)
    # a cache DVC hard-links into the workspace holds no second copy
    check_space(tmp_path, tmp_path / "cache", ["hardlink"], Estimate(workspace=BLOCK, cache=free, to_run=1))


def test_sizes_and_the_commit_line():
    assert [size_text(n) for n in (512, 4096, 1536 * 1024, 3 * 1024**3)] == ["512 B", "4.0 KiB", "1.5 MiB", "3.0 GiB"]
    err = OSError(errno.ENOSPC, "No space left on device", "/c/files/md5/ab/cd")
    assert commit_line(err, __import__("pathlib").Path("/"), None, 2, 5).startswith(
        "no space left on device writing /c/files/md5/ab/cd while committing the finished items to the DVC cache (No "
        "space left on device); free now: workspace / ")
