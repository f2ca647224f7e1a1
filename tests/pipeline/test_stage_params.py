"""empriv.pipeline.stage_params: the per-stage params files (issue 30 prototype) hold exactly what each stage reads."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from empriv.pipeline.stage_params import STAGE_KEYS, render, stage_document, write_stage_params

ROOT = Path(__file__).resolve().parents[2]


def test_table_is_dvc_yaml_params_lists():
    """The table holds dvc.yaml's params: lists, stage by stage, in order (params.yaml's keys only)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    listed = {name: tuple(k for k in body.get("params", []) if isinstance(k, str))
              for name, body in stages.items()}
    assert STAGE_KEYS == {name: keys for name, keys in listed.items() if keys}


def test_every_key_exists_in_the_default_params():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for stage, keys in STAGE_KEYS.items():
        doc = stage_document(params, keys)
        assert set(doc) == {k.split(".")[0] for k in keys}, stage


def test_document_holds_only_the_named_keys():
    params = {"a": {"x": 1, "y": {"z": 2, "w": 3}}, "b": [1, 2], "c": 4}
    assert stage_document(params, ["a.y.z", "b"]) == {"a": {"y": {"z": 2}}, "b": [1, 2]}
    assert stage_document(params, ["a", "a.x"]) == {"a": {"x": 1, "y": {"z": 2, "w": 3}}}
    with pytest.raises(KeyError, match="'a.q.r'.*'a.q' is missing"):
        stage_document(params, ["a.q.r"])


def test_render_is_stable_and_keeps_inf():
    one = render({"b": 1, "a": {"eps": [1.0, math.inf]}})
    two = render({"a": {"eps": [1.0, math.inf]}, "b": 1})
    assert one == two
    assert json.loads(one)["a"]["eps"][1] == math.inf


def test_write_only_what_changed(tmp_path):
    params = {"train": {"lr": 0.1}, "score": {"k": 5}, "base": {"seq_len": 64}}
    keys = {"train": ("train", "base.seq_len"), "score": ("score",)}
    out = tmp_path / "params"
    (out).mkdir()
    (out / "gone.json").write_text("{}")
    assert sorted(p.name for p in write_stage_params(params, out, keys)) == ["score.json", "train.json"]
    assert not (out / "gone.json").exists()
    assert json.loads((out / "train.json").read_text()) == {"train": {"lr": 0.1}, "base": {"seq_len": 64}}
    os.utime(out / "train.json", (1, 1))
    assert write_stage_params(params, out, keys) == []  # nothing changed: nothing written
    assert (out / "train.json").stat().st_mtime == 1
    params["score"]["k"] = 6
    assert write_stage_params(params, out, keys) == [out / "score.json"]  # only the stage that reads it
    assert (out / "train.json").stat().st_mtime == 1
    assert sorted(p.name for p in out.iterdir()) == ["score.json", "train.json"]  # no temporary file left
