"""empriv.tracking: secrets never reach W&B (scrubber, disabled mode, a real offline run)."""

from __future__ import annotations

import logging

import pytest

from empriv.io import write_jsonl
from empriv.tracking import REDACTED, SecretScrubber, Tracker, start_run

SECRET = {
    "id": "secret-03",
    "text": "Rita Mcconnell\nEB 5781\n713-345-6593",
    "prompt": "Rita Mcconnell\nEB 5781\n713",
    "continuation": "-345-6593",
}


def test_scrubber_redacts_strings_containing_text_prompt_or_continuation(caplog):
    scrub = SecretScrubber([SECRET])
    with caplog.at_level(logging.WARNING, logger="empriv.tracking"):
        assert scrub("sample: Rita Mcconnell\nEB 5781\n713-345-6593 and more") == REDACTED
        assert scrub("prefix Rita Mcconnell\nEB 5781\n713") == REDACTED
        assert scrub("call -345-6593 now") == REDACTED
    # the warning names the id, never the text
    assert "secret-03" in caplog.text
    assert "6593" not in caplog.text and "Mcconnell" not in caplog.text


def test_scrubber_leaves_other_values_untouched():
    scrub = SecretScrubber([SECRET])
    obj = {"loss": 1.25, "name": "eps8-b64-T16-lr0.01-s0", "n": 3, "ok": None, "xs": [1, 2.5], "t": ("a", 2)}
    assert scrub(obj) == obj
    assert scrub("713-345-0000") == "713-345-0000"  # a different number
    assert scrub("Rita Mcconnell") == "Rita Mcconnell"  # part of the prompt is not the prompt


def test_scrubber_recurses_into_nested_dicts_lists_and_keys():
    scrub = SecretScrubber([SECRET])
    obj = {
        "a": {"b": ["fine", {"c": "x -345-6593 y"}], "d": 2.0},
        "t": ("ok", "EB 5781\n713-345-6593"),
        "Rita Mcconnell\nEB 5781\n713": 1,
    }
    assert scrub(obj) == {"a": {"b": ["fine", {"c": REDACTED}], "d": 2.0}, "t": ("ok", REDACTED), REDACTED: 1}


def test_scrubber_ignores_fragments_shorter_than_six_chars():
    scrub = SecretScrubber([{"id": "s", "text": "Tom Allen <Tom.Allen@ect.enron.com>", "prompt": "Tom Allen <Tom.Allen@ect.enron", "continuation": ".com>"}])
    assert scrub("example.com>") == "example.com>"
    assert scrub("<Tom.Allen@ect.enron.com>? Tom Allen <Tom.Allen@ect.enron.com>") == REDACTED


def test_scrubber_from_files_reads_existing_files_only(tmp_path):
    write_jsonl(tmp_path / "planted.jsonl", [{"id": "secret-00", "text": "Forwarded by Stacy B Dasovich/CAL/Enron"}])
    scrub = SecretScrubber.from_files(tmp_path / "planted.jsonl", tmp_path / "missing.jsonl")
    assert scrub({"v": "--- Forwarded by Stacy B Dasovich/CAL/Enron on"}) == {"v": REDACTED}
    assert scrub("Forwarded by Stacy B Kean/CAL/Enron") == "Forwarded by Stacy B Kean/CAL/Enron"


class _Recorder:
    def __init__(self):
        self.logged = []

    def log(self, metrics, step):
        self.logged.append((metrics, step))


def test_tracker_scrubs_what_it_logs():
    rec = _Recorder()
    t = Tracker(rec, SecretScrubber([SECRET]))
    t.log({"loss": 0.5, "sample": "...-345-6593"}, step=3)
    assert rec.logged == [({"loss": 0.5, "sample": REDACTED}, 3)]


def test_disabled_tracker_logs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.chdir(tmp_path)
    t = start_run(project="p", name="n", group="g", job_type="train", config={"a": 1}, mode="offline",
                  scrub=SecretScrubber([SECRET]), directory=tmp_path / "wb")
    assert t.mode == "disabled"
    t.log({"loss": 1.0}, step=0)
    t.finish({"final": 1.0})
    assert list(tmp_path.iterdir()) == []


def test_offline_wandb_run_never_writes_a_secret(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    secrets = [SECRET, {"id": "secret-01", "text": "Forwarded by Stacy B Dasovich/CAL/Enron"}]
    tracker = start_run(
        project="empriv-test",
        name="eps8-b64-T16-lr0.01-s0",
        group="eps8-b64-T16-lr0.01",
        job_type="train",
        config={"epsilon": 8.0, "note": "leak " + SECRET["text"], "nested": {"p": [SECRET["prompt"]]}},
        mode="online",  # the environment variable wins
        scrub=SecretScrubber(secrets),
        directory=tmp_path / "run",
    )
    assert tracker.mode == "offline"
    tracker.log({"train/loss": 1.5, "sample": "generated: Forwarded by Stacy B Dasovich/CAL/Enron"}, step=0)
    tracker.log({"train/loss": 1.25, "sample": "harmless"}, step=1)
    tracker.finish({"final": SECRET["continuation"] + "!", "final_loss": 1.25})

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files), [p.name for p in files]
    blobs = {p: p.read_bytes() for p in files}
    assert any(b"harmless" in b for b in blobs.values())  # the run did record logged values
    needles = [
        SECRET["text"], SECRET["prompt"], SECRET["continuation"], "Dasovich/CAL/Enron", "EB 5781",
    ]
    for p, blob in blobs.items():
        for needle in needles:
            for enc in ("utf-8", "utf-16-le"):
                assert needle.encode(enc) not in blob, f"{needle!r} found in {p}"
            # JSON escapes the newlines of the secret text
            assert needle.replace("\n", "\\n").encode() not in blob, f"{needle!r} (escaped) found in {p}"
