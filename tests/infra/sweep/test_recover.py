"""Records of finished items (empriv.infra.sweep.recover), on real files: what a record holds, when it stands for
its item (same commands, params values, deps and outputs) and when not (each reason), which records a sweep reads,
and that they follow their outputs and go once committed. The sweeps around them: tests/reliability/test_sweep_killed.py."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from empriv.infra.sweep.plan import Item
from empriv.infra.sweep.recover import FinishedRecords, param_values, signature, started_state, write_record


def _item(root: Path, **change) -> Item:
    fields = dict(address="train@1", stage="train", key="1", commands=["python train.py 1"], wdir=str(root),
                  deps=[str(root / "train.py"), str(root / "data")], outs=[str(root / "runs" / "train-1.txt")],
                  params={str(root / "params.yaml"): ["cube.x", "base.lr"]})
    fields.update(change)
    return Item(**fields)


def _workspace(root: Path) -> None:
    (root / "data").mkdir()
    (root / "data" / "a.txt").write_text("a")
    (root / "train.py").write_text("print(1)")
    (root / "params.yaml").write_text("cube:\n  x: [1, 2]\nbase:\n  lr: 1e-05\n  other: 3\n")


def _finish(root: Path, folder: Path, item: Item) -> Path:
    """What StageJob does: note the state at the start, write the output, write the record."""
    state = started_state(item.deps, item.params, root)
    out = Path(item.outs[0])
    out.parent.mkdir(exist_ok=True)
    out.write_text("2")
    return write_record(folder, item.address, root, item.commands, state, item.outs)


def test_signature_and_params_values(tmp_path):
    _workspace(tmp_path)
    sig = signature([str(tmp_path / "data"), str(tmp_path / "train.py"), str(tmp_path / "gone")], tmp_path)
    st = os.stat(tmp_path / "data" / "a.txt")
    assert sig == {"data": "dir", "data/a.txt": [1, st.st_mtime_ns], "train.py": [8, os.stat(tmp_path / "train.py")
                                                                                   .st_mtime_ns], "gone": None}
    path = str(tmp_path / "params.yaml")
    assert param_values({path: ["cube.x.1", "base.lr", "base.nope"]}) == {
        path: {"cube.x.1": 2, "base.lr": 1e-05, "base.nope": "<missing>"}}  # YAML 1.2: 1e-05 is a number
    assert param_values({path: []}) == {path: {"cube": {"x": [1, 2]}, "base": {"lr": 1e-05, "other": 3}}}
    assert param_values({str(tmp_path / "nope.yaml"): ["a"]}) is None
    (tmp_path / "broken.yaml").write_text("a: [1\n")
    assert param_values({str(tmp_path / "broken.yaml"): ["a"]}) is None


def test_a_record_stands_for_its_item_only_while_everything_it_noted_holds(tmp_path):
    _workspace(tmp_path)
    item = _item(tmp_path)
    record = _finish(tmp_path, tmp_path / "sweep" / "1", item)
    assert json.loads(record.read_text())["commands"] == item.commands
    records = FinishedRecords([tmp_path / "sweep" / "1"], tmp_path)
    assert "train@1" in records and len(records) == 1 and records.check(item) is None
    # an unrelated params key may change; the ones the item reads may not
    (tmp_path / "params.yaml").write_text("cube:\n  x: [1, 2]\nbase:\n  lr: 1e-05\n  other: 4\n")
    assert records.check(item) is None
    (tmp_path / "params.yaml").write_text("cube:\n  x: [1, 3]\nbase:\n  lr: 1e-05\n")
    assert records.check(item) == "a params value it reads changed"
    (tmp_path / "params.yaml").write_text("cube:\n  x: [1, 2]\nbase:\n  lr: 1e-05\n")
    assert records.check(_item(tmp_path, commands=["python train.py 1 --fast"])) == "its command changed"
    assert records.check(_item(tmp_path, always_runs=True)) == "its stage always runs"
    (tmp_path / "data" / "b.txt").write_text("b")  # a file more under a dep directory
    assert records.check(item) == "a dependency changed since its command started"
    (tmp_path / "data" / "b.txt").unlink()
    assert records.check(item) is None
    out = Path(item.outs[0])
    os.utime(out, ns=(out.stat().st_atime_ns, out.stat().st_mtime_ns + 10**9))  # rewritten after its job ended
    assert records.check(item) == "its outputs changed since its job ended"
    records.refresh_outs("train@1", item.outs)  # as after DVC's commit re-linked it
    assert records.check(item) is None and FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) is None
    out.unlink()
    assert records.check(item) == "an output is missing"


def test_which_records_a_sweep_reads_and_forgetting_them(tmp_path):
    _workspace(tmp_path)
    item = _item(tmp_path)
    old = _finish(tmp_path, tmp_path / "sweep" / "1", item)
    new = _finish(tmp_path, tmp_path / "sweep" / "2", item)  # a later sweep's record of the same item wins
    other = tmp_path / "other"
    other.mkdir()
    _workspace(other)
    _finish(other, tmp_path / "sweep" / "2", _item(other, address="train@2"))  # another workspace's: not read
    (tmp_path / "sweep" / "2" / "finished" / "junk.json").write_text("{not json")
    records = FinishedRecords([tmp_path / "sweep" / "1", tmp_path / "sweep" / "2"], tmp_path)
    assert len(records) == 1 and records.check(item) is None
    records.forget(["train@1"])
    assert "train@1" not in records and not old.exists() and not new.exists()
    assert (tmp_path / "sweep" / "2" / "finished" / "train@2.json").exists()


def test_a_committed_output_re_linked_by_dvc_moves_the_records_that_read_it_along(tmp_path):
    _workspace(tmp_path)
    train = _item(tmp_path)
    _finish(tmp_path, tmp_path / "sweep" / "1", train)
    total = _item(tmp_path, address="total", stage="total", key="", deps=list(train.outs),
                  outs=[str(tmp_path / "total.txt")], params={})
    state = started_state(total.deps, total.params, tmp_path)
    (tmp_path / "total.txt").write_text("2")
    write_record(tmp_path / "sweep" / "1", "total", tmp_path, total.commands, state, total.outs)
    records = FinishedRecords([tmp_path / "sweep" / "1"], tmp_path)
    out = Path(train.outs[0])
    os.utime(out, ns=(out.stat().st_atime_ns, out.stat().st_mtime_ns + 10**9))  # DVC's re-link: same content
    assert records.check(train) == "its outputs changed since its job ended"
    assert records.check(total) is None  # a dep: its noted MD5 still holds
    records.refresh_outs("train@1", train.outs)
    again = FinishedRecords([tmp_path / "sweep" / "1"], tmp_path)  # as the next sweep reads them
    assert again.check(train) is None and again.check(total) is None


def test_a_dep_written_again_with_the_same_content_still_matches_and_other_content_does_not(tmp_path, monkeypatch):
    from empriv.infra.sweep import recover

    _workspace(tmp_path)
    item = _item(tmp_path)
    _finish(tmp_path, tmp_path / "sweep" / "1", item)
    noted = json.loads((tmp_path / "sweep" / "1" / "finished" / "train@1.json").read_text())["deps"]
    assert noted["train.py"][2] == hashlib.md5(b"print(1)").hexdigest() and noted["data"] == "dir"

    def rewrite(path: Path, text: str) -> None:  # a new file (a new inode and mtime), as a re-run stage leaves it
        path.unlink()
        path.write_text(text)
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))

    rewrite(tmp_path / "train.py", "print(1)")
    rewrite(tmp_path / "data" / "a.txt", "a")
    assert FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) is None
    rewrite(tmp_path / "data" / "a.txt", "b")  # same size, other content
    assert FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) == (
        "a dependency changed since its command started")
    rewrite(tmp_path / "data" / "a.txt", "a")
    (tmp_path / "data" / "new.txt").write_text("n")  # a file more under a dep directory
    assert FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) is not None
    (tmp_path / "data" / "new.txt").unlink()
    assert FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) is None

    # above the size limit a file is noted by size and mtime alone: written again, it no longer matches
    monkeypatch.setattr(recover, "DIGEST_MAX_BYTES", 4)
    (tmp_path / "sweep" / "1" / "finished" / "train@1.json").unlink()
    _finish(tmp_path, tmp_path / "sweep" / "1", item)
    noted = json.loads((tmp_path / "sweep" / "1" / "finished" / "train@1.json").read_text())["deps"]
    assert noted["train.py"][2] is None and noted["data/a.txt"][2] is not None
    rewrite(tmp_path / "data" / "a.txt", "a")
    assert FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) is None
    rewrite(tmp_path / "train.py", "print(1)")
    assert FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) == (
        "a dependency changed since its command started")


def test_a_record_without_digests_is_compared_by_size_and_mtime(tmp_path):
    _workspace(tmp_path)
    item = _item(tmp_path)
    record = _finish(tmp_path, tmp_path / "sweep" / "1", item)
    data = json.loads(record.read_text())
    data["deps"] = {k: (v[:2] if isinstance(v, list) else v) for k, v in data["deps"].items()}  # an older sweep's
    record.write_text(json.dumps(data))
    assert FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) is None
    os.utime(tmp_path / "train.py", ns=(0, os.stat(tmp_path / "train.py").st_mtime_ns + 10**9))
    assert FinishedRecords([tmp_path / "sweep" / "1"], tmp_path).check(item) == (
        "a dependency changed since its command started")
