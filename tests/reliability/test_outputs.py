"""Issue 29, row 10: `empriv summary` warns when a run's model or record is missing or fails its DVC hash."""

from __future__ import annotations

import hashlib
import json

import yaml

from reliability_project import snapshot

RUN = "train@8-8-1-0.01-0-record-full"
MODEL = "models/runs/record/full/eps8-b8-T1-lr0.01-s0"
RECORD = "records/train/record/full/eps8-b8-T1-lr0.01-s0.json"


def _lock(project, manifest: bool) -> None:
    root = project.root
    (root / RECORD).parent.mkdir(parents=True, exist_ok=True)
    (root / RECORD).write_text('{"final_loss": 1.0}\n')
    (root / MODEL / "config.json").write_text("{}\n")
    files = sorted(p for p in (root / MODEL).rglob("*") if p.is_file())
    entries = [{"md5": hashlib.md5(p.read_bytes()).hexdigest(), "relpath": p.relative_to(root / MODEL).as_posix()}
               for p in files]
    dir_md5 = hashlib.md5(json.dumps(entries).encode()).hexdigest() + ".dir"
    if manifest:
        cached = root / ".dvc" / "cache" / "files" / "md5" / dir_md5[:2] / dir_md5[2:]
        cached.parent.mkdir(parents=True)
        cached.write_text(json.dumps(entries))
    record = root / RECORD
    lock = {"schema": "2.0", "stages": {RUN: {"cmd": "python -m empriv.pipeline.train", "outs": [
        {"path": MODEL, "hash": "md5", "md5": dir_md5, "size": sum(p.stat().st_size for p in files), "nfiles": len(files)},
        {"path": RECORD, "hash": "md5", "md5": hashlib.md5(record.read_bytes()).hexdigest(),
         "size": record.stat().st_size}]}}}
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    (root / "records/scores_by_epsilon.json").write_text('{"n_runs": 1}\n')


def _warnings(project) -> list[str]:
    proc = project.run("empriv", "summary", "--json")
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]


def test_summary_warns_about_a_truncated_model_and_a_missing_record(project):
    for manifest in (True, False):  # with the DVC cache's manifest (per-file md5), and without (sizes, count)
        _lock(project, manifest)
        assert _warnings(project) == []
        weights = project.root / MODEL / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:10])  # truncated
        before = snapshot(project.root)
        warnings = _warnings(project)
        assert snapshot(project.root) == {**before, "params.yaml": snapshot(project.root)["params.yaml"]}
        expected = (f"warning: {MODEL}/model.safetensors: content differs from its DVC hash (truncated or changed since the "
                    "stage ran)" if manifest
                    else f"warning: {MODEL}: 13 bytes in all, dvc.lock says 67 (a file truncated or changed)")
        assert warnings == [f"{expected} (stage {RUN}: `dvc checkout {RUN}` restores it from the cache, `dvc repro "
                            f"{RUN}` re-runs it)"], warnings
        (project.root / RECORD).unlink()
        assert _warnings(project)[1].startswith(f"warning: {RECORD}: missing (stage {RUN}:")
        weights.write_bytes(b"x" * 64)
        if manifest:
            shutil_rm(project.root / ".dvc")


def shutil_rm(path):
    import shutil

    shutil.rmtree(path)
