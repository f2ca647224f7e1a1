"""empriv.infra.tracking: one W&B run per configuration (train, score and audit parts), one summary run per pipeline,
the project-level directory (also from a DVC temporary copy), and no secret or canary in any file W&B writes."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from empriv.io import write_jsonl
from empriv.infra.tracking import (
    JOURNAL_DIR,
    REDACTED,
    SecretScrubber,
    epsilon_checkpoints,
    epsilon_tags,
    local_copies,
    numeric,
    open_configuration_run,
    open_run,
    open_summary_run,
    project_root,
    read_journal,
    run_id,
    study_group,
    write_offline_runs,
)
from empriv.infra.tracking.transaction_log import (CHUNK_HEADER, LOG_BLOCK, LOG_HEADER, CorruptTransactionLog,
                                                   LogEndsMidRecord, finished_records, read_transaction_log)

SECRET = {
    "id": "secret-03",
    "text": "Rita Mcconnell\nEB 5781\n713-345-6593",
    "prompt": "Rita Mcconnell\nEB 5781\n713",
    "continuation": "-345-6593",
}
OTHER = {"id": "secret-01", "text": "Forwarded by Stacy B Dasovich/CAL/Enron"}
WANDB_ENV = ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR")


# --------------------------------------------------------------------------- scrubbing
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


def _canary_set():
    from empriv.secrets.canaries import Canary, CanarySet

    canaries = [Canary("c0000", (101, 102, 103, 104), (250, 251), True),
                Canary("c0001", (105, 106, 107, 108), (252, 253, 254), False),
                Canary("c0002", (109, 110, 111, 112), (255,), None)]
    return CanarySet(canaries, design="random", prefix="random", loss="sft", base_vocab_size=300)


def test_scrubber_with_canaries_redacts_their_token_ids_in_lists_and_text():
    scrub = SecretScrubber([SECRET]).with_canaries(_canary_set())
    assert scrub([7, 101, 102, 103, 104, 250, 251, 9]) == REDACTED  # a whole canary inside a list of ids
    assert scrub((1, 252, 253, 254)) == REDACTED  # a secret of >= 3 tokens on its own
    assert scrub({"ids": "[105, 106, 107, 108, 252, 253, 254]"}) == {"ids": REDACTED}  # as JSON text
    assert scrub("tokens 109 110 111 112 255 here") == REDACTED  # space-separated
    assert scrub("109,110,111,112,255") == REDACTED  # comma-separated
    # a 2-token secret alone, other numbers and booleans are left alone (no chance hits on any list of numbers)
    assert scrub([250, 251]) == [250, 251]
    assert scrub([101, 102, 103, 999]) == [101, 102, 103, 999]
    assert scrub([True, False, True]) == [True, False, True]
    assert scrub("call -345-6593 now") == REDACTED  # the secrets are still there


def test_scrubber_with_canaries_redacts_their_decoded_text(gpt2_tokenizer):
    from empriv.secrets.canaries import Canary, CanarySet

    tok = gpt2_tokenizer
    prefix, secret = tok.encode(" zebra quantum"), tok.encode(" marmalade cathedral")
    cs = CanarySet([Canary("c0009", tuple(prefix), tuple(secret), True)], design="random", prefix="random", loss="sft",
                   base_vocab_size=tok.vocab_size)
    scrub = SecretScrubber().with_canaries(cs, tok)
    assert scrub("the model said marmalade cathedral twice") == REDACTED
    assert scrub("zebra quantum marmalade cathedral") == REDACTED
    assert scrub("marmalade alone") == "marmalade alone"


def test_numeric_makes_json_safe_values_with_infinity_as_none():
    import numpy as np

    assert numeric({"epsilon": math.inf, "x": [1.5, -math.inf, math.nan], "t": (1, 2), "n": np.float32(0.5),
                    "k": np.int64(3), "p": Path("a/b"), "b": True}) == \
        {"epsilon": None, "x": [1.5, None, None], "t": [1, 2], "n": 0.5, "k": 3, "p": "a/b", "b": True}


# --------------------------------------------------------------------------- names, groups, ids, ε
def test_run_ids_are_deterministic_distinct_and_safe():
    a = run_id("empriv", "workspace", "eps8-b64-T16-lr0.005-s0")
    assert a == run_id("empriv", "workspace", "eps8-b64-T16-lr0.005-s0")
    assert a.startswith("workspace--eps8-b64-T16-lr0_005-s0-")
    others = {run_id("empriv", "workspace", "eps8-b64-T16-lr0.005-s1"), run_id("empriv", "exp-a", "eps8-b64-T16-lr0.005-s0"),
              run_id("other", "workspace", "eps8-b64-T16-lr0.005-s0"), run_id("empriv", "workspace", "eps8-b64-T16-lr0_005-s0")}
    assert a not in others and len(others) == 4
    assert all(c.isalnum() or c in "-_" for c in a)


def test_epsilon_tags():
    assert epsilon_tags(8.0, "lora") == ["eps=8", "method=lora"]
    assert epsilon_tags(0.5, None) == ["eps=0.5"]
    assert epsilon_tags(math.inf, "full") == ["eps=inf", "non-private", "method=full"]


def test_study_group_precedence(monkeypatch, tmp_path):
    for var in ("EMPRIV_WANDB_GROUP", "DVC_EXP_NAME", "DVC_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    assert study_group() == "workspace"
    study = tmp_path / ".studies" / "enron-smollm2"
    study.mkdir(parents=True)
    monkeypatch.setenv("DVC_ROOT", str(study))
    assert study_group() == "enron-smollm2"
    monkeypatch.setenv("DVC_EXP_NAME", "lobed-pads")
    assert study_group() == "lobed-pads"
    monkeypatch.setenv("EMPRIV_WANDB_GROUP", "my-study")
    assert study_group() == "my-study"


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_project_root_from_subdirectories_worktrees_dvc_temp_copies_and_without_git(tmp_path, monkeypatch):
    monkeypatch.delenv("DVC_ROOT", raising=False)
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    _git("init", "-q", cwd=repo)
    (repo / "f").write_text("x")
    _git("add", "f", cwd=repo)
    _git("commit", "-qm", "one", cwd=repo)
    assert project_root(repo / "src" / "pkg") == repo.resolve()
    # a preset study: a git worktree under .studies/ shares the main checkout's git directory
    _git("worktree", "add", "-q", "--detach", str(repo / ".studies" / "s1"), cwd=repo)
    assert project_root(repo / ".studies" / "s1") == repo.resolve()
    # a DVC temporary copy is a git repository of its own: the part before .dvc/tmp/exps wins
    tmpcopy = repo / ".dvc" / "tmp" / "exps" / "tmpab12cd"
    tmpcopy.mkdir(parents=True)
    _git("init", "-q", cwd=tmpcopy)
    assert project_root(tmpcopy) == repo.resolve()
    # DVC_ROOT (set by DVC for every stage; the original repository for queued experiments) wins over the start
    monkeypatch.setenv("DVC_ROOT", str(repo / ".studies" / "s1"))
    assert project_root(tmp_path) == repo.resolve()
    monkeypatch.delenv("DVC_ROOT")
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert project_root(plain) == plain.resolve()


def test_epsilon_checkpoints_thin_the_logged_steps_and_keep_the_last():
    assert epsilon_checkpoints(5, 1) == [1, 2, 3, 4, 5]
    assert epsilon_checkpoints(10, 4) == [1, 5, 9, 10]
    pts = epsilon_checkpoints(1000, 1, max_points=20)
    assert len(pts) == 20 and pts[0] == 1 and pts[-1] == 1000 and pts == sorted(set(pts))
    assert epsilon_checkpoints(0, 1) == []


def test_spent_epsilon_grows_to_the_calibrated_target():
    from empriv.privacy.accounting import calibrate_noise_multiplier, epsilon_for
    from empriv.train.finetune import spent_epsilons

    q, steps, delta = 0.05, 40, 1e-5
    cal = calibrate_noise_multiplier(4.0, delta, q, steps, accountant="prv")
    spent = spent_epsilons(cal.noise_multiplier, q, delta, [1, 10, 20, 40], cal.accountant)
    values = [spent[t] for t in (1, 10, 20, 40)]
    assert values == sorted(values) and values[0] < values[-1]
    assert spent[40] == pytest.approx(epsilon_for(cal.noise_multiplier, q, steps, delta, "prv"))
    assert spent[40] == pytest.approx(4.0, rel=0.02)
    assert spent[10] == pytest.approx(epsilon_for(cal.noise_multiplier, q, 10, delta, "prv"))


# --------------------------------------------------------------------------- the offline files
def finished_transaction_log(path: Path) -> list:
    """The records of a run's transaction log, which must be finished already: ``run.finish()`` offline returns
    before W&B's service has written the log (issue 45, :mod:`empriv.infra.tracking.transaction_log`), so the
    writers (``Tracker.finish``, ``write_offline_runs``) wait for each new copy's log before they return and before
    any older copy goes. A copy still unfinished here is that wait failing; a corrupt log fails the reader."""
    records = finished_records(path)
    assert records is not None, f"{path}: not finished when its writer returned ({path.stat().st_size} bytes)"
    return records


def _put(target: dict, item) -> None:
    """Set a history/summary/config item (a ``key``, or a ``nested_key`` path for nested dicts) in ``target``."""
    path = [item.key] if item.key else list(item.nested_key)
    for k in path[:-1]:
        target = target.setdefault(k, {})
    target[path[-1]] = json.loads(item.value_json)


def run_contents(run_dir: Path) -> dict:
    """What a local run directory holds: its run record, history rows, summary and config (JSON-decoded)."""
    (log_file,) = list(run_dir.glob("*.wandb"))
    out: dict = {"history": [], "summary": {}, "config": {}, "run": None}
    for rec in finished_transaction_log(log_file):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out["run"] = rec.run
            for item in rec.run.config.update:
                _put(out["config"], item)
        elif kind == "history":
            row: dict = {}
            for item in rec.history.item:
                _put(row, item)
            out["history"].append(row)
        elif kind == "summary":
            for item in rec.summary.update:
                _put(out["summary"], item)
        elif kind == "config":
            for item in rec.config.update:
                _put(out["config"], item)
    return out


def scan_for(root: Path, needles: list[str]) -> list[tuple[str, Path]]:
    """(needle, file) for every needle found in any file under ``root``: UTF-8, UTF-16 and JSON-escaped forms."""
    hits = []
    for p in (q for q in root.rglob("*") if q.is_file()):
        blob = p.read_bytes()
        for needle in needles:
            forms = {needle.encode("utf-8"), needle.encode("utf-16-le"), json.dumps(needle)[1:-1].encode()}
            if any(f in blob for f in forms):
                hits.append((needle, p))
    return hits


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """W&B offline with every W&B directory inside tmp_path, the project root tmp_path/project."""
    pytest.importorskip("wandb")
    for var in WANDB_ENV:
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    for var in ("EMPRIV_WANDB_GROUP", "DVC_EXP_NAME", "DVC_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.setenv("EMPRIV_WANDB_DIR", str(root))
    monkeypatch.chdir(root)
    return root


def tiny_params(**train):
    from empriv.config import parse_params

    return parse_params({
        "runtime": {"device": "cpu", "threads": 1, "wandb_mode": "offline"},
        "data": {"n_train": 200},
        "train": {"micro_batch_size": 32, "log_every": 1, **train},
        "cube": {"epsilon": [8], "batch_size": [16], "steps": [6], "learning_rate": [0.01], "seed": [0]},
    })


def tiny_data(n: int = 200):
    import torch

    from empriv.models.lm import encode_fixed

    g = torch.Generator().manual_seed(0)
    return encode_fixed([torch.randint(0, 299, (12,), generator=g).tolist() for _ in range(n)], 299, 16)


def test_disabled_mode_writes_nothing(tmp_path, monkeypatch):
    from empriv.config import RunConfig

    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("EMPRIV_WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.chdir(tmp_path)
    t = open_configuration_run(tiny_params(), RunConfig(8.0, 16, 6, 0.01, 0), section="train",
                               scrub=SecretScrubber([SECRET]))
    assert t.mode == "disabled" and not t.active
    t.log({"train/loss": 1.0})
    t.config({"a": 1})
    t.summary({"s": 1})
    t.table("t", ["a"], [[1]])
    t.finish({"final": 1.0})
    assert list(tmp_path.iterdir()) == []


def three_row_run(root: Path) -> tuple:
    """(params, run, run id, its one local copy): a configuration's train part of three rows, written offline."""
    from empriv.config import RunConfig

    params, run = tiny_params(), RunConfig(8.0, 16, 6, 0.01, 0)
    with open_configuration_run(params, run, section="train", scrub=SecretScrubber()) as t:
        for i in range(3):
            t.log({"train/step": i + 1, "train/loss": 2.0 - i})
    rid = run_id("empriv", "workspace", run.name)
    assert write_offline_runs(root) == [rid]
    (copy,) = local_copies(root, rid)
    return params, run, rid, copy


def test_the_log_reader_checks_each_chunk_and_tells_a_log_cut_off_from_a_whole_one(offline, tmp_path):
    """The reader the tests use on W&B's ``.wandb`` files: a whole log ends with the run's exit record; any shorter
    prefix of it (what a reader sees while wandb-core is still writing, issue 45) is whole records only or raises
    LogEndsMidRecord, never a protobuf error or a half record; a changed byte fails its chunk's checksum."""
    (log,) = three_row_run(offline)[3].glob("*.wandb")
    records = finished_transaction_log(log)
    assert read_transaction_log(log) == records and records[-1].WhichOneof("record_type") == "exit"
    rows = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]
    assert [row["train/loss"] for row in rows if "train/loss" in row] == [2.0, 1.0, 0.0]
    data, cut = log.read_bytes(), tmp_path / "cut.wandb"
    starts = chunk_starts(data)  # one block: each record is one chunk, each chunk starts where the last one ends
    assert starts[-1] == len(data) and len(starts) == len(records) + 1
    for k, start in enumerate(starts[:-1]):
        cut.write_bytes(data[:start])  # cut between records: the records before the cut
        assert read_transaction_log(cut) == records[:k]
        inside = {start + 1, start + CHUNK_HEADER - 1, start + CHUNK_HEADER, (start + starts[k + 1]) // 2,
                  starts[k + 1] - 1}
        for size in sorted(n for n in inside if start < n < starts[k + 1]):
            cut.write_bytes(data[:size])  # cut inside a chunk's header or payload
            with pytest.raises(LogEndsMidRecord):
                read_transaction_log(cut)
    length = starts[1] - starts[0] - CHUNK_HEADER
    flipped = bytearray(data)
    flipped[len(LOG_HEADER) + CHUNK_HEADER + length - 1] ^= 0x01  # the last byte of the first record
    cut.write_bytes(bytes(flipped))
    with pytest.raises(CorruptTransactionLog, match="checksum mismatch at offset 7"):
        read_transaction_log(cut)


def chunk_starts(data: bytes) -> list[int]:
    """Where each chunk of a one-block log starts (each record one chunk), and the end of the file."""
    assert len(data) < LOG_BLOCK
    starts = [len(LOG_HEADER)]
    while starts[-1] < len(data):
        starts.append(starts[-1] + CHUNK_HEADER + struct.unpack("<H", data[starts[-1] + 4 : starts[-1] + 6])[0])
    return starts


def test_the_log_reader_reads_records_over_several_blocks(offline, tmp_path):
    """A long run's log spans several 32 KiB blocks (chunks end at block boundaries, the rest of a block is padding)
    and a record longer than a block is split into FIRST, MIDDLE and LAST chunks: read whole, it is finished; cut
    anywhere before its end it is whole records only or ends mid-record, never finished and never corrupt."""
    from empriv.config import RunConfig

    params, run = tiny_params(), RunConfig(8.0, 16, 6, 0.01, 2)
    with open_configuration_run(params, run, section="train", scrub=SecretScrubber()) as t:
        t.config({"long_note": "x" * (3 * LOG_BLOCK)})  # one record over three blocks
        for i in range(400):
            t.log({"train/step": i + 1, "train/loss": 1.0 / (i + 1)})
    rid = run_id("empriv", "workspace", run.name)
    assert write_offline_runs(offline) == [rid]
    (log,) = local_copies(offline, rid)[0].glob("*.wandb")
    records = finished_transaction_log(log)
    data = log.read_bytes()
    assert len(data) > 4 * LOG_BLOCK and max(r.ByteSize() for r in records) > 3 * LOG_BLOCK, len(data)
    rows = [r for r in records if r.WhichOneof("record_type") == "history"]
    assert [json.loads(i.value_json) for r in rows for i in r.history.item
            if (i.key or "/".join(i.nested_key)) == "train/step"] == list(range(1, 401))
    cut = tmp_path / "cut.wandb"
    at_blocks = (k * LOG_BLOCK + d for k in range(1, 5) for d in (-7, -1, 0, 1, 7, 8))
    sizes = sorted({*range(len(LOG_HEADER), len(data), 6007), *(n for n in at_blocks if n < len(data))})
    mid = 0
    for size in sizes:
        cut.write_bytes(data[:size])
        try:
            got = read_transaction_log(cut)
        except LogEndsMidRecord:
            mid += 1
        else:
            assert got == records[: len(got)] and len(got) < len(records)
        assert finished_records(cut) is None
    assert 0 < mid < len(sizes)


def test_an_unfinished_new_copy_never_replaces_the_last_complete_one(offline, caplog, monkeypatch):
    """Issue 45: ``run.finish()`` returns before W&B has written the new copy's log; the older copies were deleted
    right then, so a process killed (or a W&B service dying) in that window left no complete copy of the run. Now
    the older copies go only once the new copy's log is finished: a new copy as W&B leaves it when stopped in the
    window (its header alone, or cut inside or before its exit record), or corrupt, keeps them, with one warning
    line, and its journal is not marked written; the next writing replaces both with one finished copy."""
    from empriv.infra.tracking import transaction_log
    from empriv.infra.tracking.journal import dump_journal, journal_digest, retire_older_copies
    from empriv.infra.tracking.offline import _retire_older_copies

    params, run, rid, complete = three_row_run(offline)
    (log,) = complete.glob("*.wandb")
    records, data = finished_transaction_log(log), log.read_bytes()
    exit_at = chunk_starts(data)[-2]  # the exit record is the last one
    assert records[-1].WhichOneof("record_type") == "exit"
    new = complete.with_name(complete.name + "-1")  # W&B's name for a second copy started in the same second
    shutil.copytree(complete, new)
    flipped = bytearray(data)
    flipped[exit_at + CHUNK_HEADER] ^= 0x01
    unfinished = {"the header alone (what run.finish() returned to)": data[: len(LOG_HEADER)],
                  "inside the exit record": data[: exit_at + CHUNK_HEADER + 2],
                  "every record but the exit record": data[:exit_at], "a changed byte": bytes(flipped)}
    for what, content in unfinished.items():
        (new / log.name).write_bytes(content)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="empriv.tracking"):
            assert retire_older_copies(rid, new, [complete], timeout=0.2) is False, what
        assert local_copies(offline, rid) == [complete, new], what
        assert finished_transaction_log(log) == records
        (line,) = caplog.messages
        assert f"the new local copy of run {rid} is not finished, the 1 older one(s) are kept" in line and \
            "\n" not in line, what

    # write_offline_runs marks a journal written only once its new copy is finished and the older ones are gone
    monkeypatch.setattr(transaction_log, "FINISH_TIMEOUT_S", 0.2)
    (new / log.name).write_bytes(data[: len(LOG_HEADER)])
    journal = read_journal(offline, rid)
    digest = journal.pop("written")
    assert digest == journal_digest(journal)
    dump_journal(offline, rid, journal)  # as write_offline_runs leaves it while it writes the run again
    with caplog.at_level(logging.WARNING, logger="empriv.tracking"):
        _retire_older_copies(offline, [(rid, digest, new, [complete])])
    assert local_copies(offline, rid) == [complete, new] and "written" not in read_journal(offline, rid)

    # the next writing (a stage changed the journal meanwhile) leaves one finished copy, and marks the journal
    with open_configuration_run(params, run, section="score", scrub=SecretScrubber()) as t:
        t.summary({"score/test_nll": 3.0})
    assert write_offline_runs(offline) == [rid]
    (latest,) = local_copies(offline, rid)
    assert latest not in (complete, new) and run_contents(latest)["summary"]["score/test_nll"] == 3.0
    assert read_journal(offline, rid)["written"] == journal_digest(read_journal(offline, rid))
    # once W&B has written the rest of a new copy, it replaces the older one
    shutil.copytree(latest, new)
    assert retire_older_copies(rid, new, [latest], timeout=0.2) is True
    assert local_copies(offline, rid) == [new]


def test_train_score_and_audit_make_one_complete_offline_run_per_configuration(offline, gpt2_tokenizer):
    """The real train_model (cube part and audit part), the score stage's and the audit stage's tracking, each in
    its own session as in separate processes: one local copy of the run remains, holding all three parts; no
    secret or canary reaches any file written."""
    from tiny_models import tiny_gpt2

    from empriv.config import RunConfig
    from empriv.pipeline.audit import track_audit
    from empriv.pipeline.score import track_scores
    from empriv.train.finetune import TrainingRecords, TrainRequest, train_model

    params = tiny_params()
    run = RunConfig(8.0, 16, 6, 0.01, 0)
    ids, mask = tiny_data()
    cs = _canary_set()
    secrets = [SECRET, OTHER]

    # train: train_model opens the configuration's run itself (section train)
    _, metrics = train_model(TrainRequest(params, run, tiny_gpt2(), TrainingRecords(ids, mask), scrub_secrets=secrets))
    rid = run_id("empriv", "workspace", run.name)
    # offline, a stage only journals its part: W&B itself is started once, by write_offline_runs
    assert local_copies(offline, rid) == [] and set(read_journal(offline, rid)["sections"]) == {"train"}
    assert write_offline_runs(offline) == [rid]
    (first,) = local_copies(offline, rid)
    assert first.name.startswith("offline-run-")
    assert write_offline_runs(offline) == []  # nothing changed: nothing rewritten

    # score: the score stage's tracking (a secret smuggled into a per-secret row and a metric)
    score_metrics = {"config": run.name, **run.as_dict(), "test_nll": 3.25, "exposure_gap_mean": 0.5,
                     "note": "generated " + SECRET["text"], "acr_protocol": {"ran": False, "why_not": "off"},
                     "per_secret": [{"id": "secret-03", "vmr": 0.0, "exposure_gap": 0.5, "sample": SECRET["continuation"]},
                                    {"id": "secret-01", "vmr": 0.1, "exposure_gap": None, "frequency": 0.01}]}
    track_scores(params, run, score_metrics, secrets)

    # audit: its own training curve, then its results, in one session (as pipeline.audit does)
    scrub = SecretScrubber(secrets).with_canaries(cs, gpt2_tokenizer)
    with open_configuration_run(params, run, section="audit", scrub=scrub) as t:
        train_model(TrainRequest(params, run, tiny_gpt2(), TrainingRecords(ids, mask), job_type="audit", tracker=t))
        t.log({"audit/train/step": 99, "leak": [5, 101, 102, 103, 104, 250, 251]})  # a canary as token ids
        track_audit(t, {"audit_eps_lb_95": 0.25, "audit_eps_lb_99": 0.1, "audit_auc": 0.61, "audit_design": "random",
                        "audit_mia": {"loss": {"auc": 0.61, "tpr_at_fpr_0.01": 0.02},
                                      "zlib": {"auc": 0.55, "tpr_at_fpr_0.01": 0.0}},
                        "optimistic_eps_lb_max_over_r": {"0.95": 0.3}, "wall_time_s": 1.5})
        t.summary({"audit/canary_text": "[105, 106, 107, 108, 252, 253, 254]"})

    assert local_copies(offline, rid) == [first]  # the stages wrote journals only
    assert write_offline_runs(offline) == [rid]
    copies = local_copies(offline, rid)
    assert len(copies) == 1 and copies[0] != first and not first.exists()
    got = run_contents(copies[0])
    assert got["run"].display_name == run.name and got["run"].run_id == rid
    assert got["run"].run_group == "workspace" and got["run"].job_type == "configuration"
    assert set(got["run"].tags) == {"eps=8", "method=full"}
    assert got["config"]["epsilon"] == 8.0 and got["config"]["private"] is True
    assert got["config"]["configuration"] == run.name and got["config"]["data"]["n_train"] == 200
    assert got["config"]["noise_multiplier"] == pytest.approx(metrics["noise_multiplier"])
    assert got["config"]["audit_run"]["noise_multiplier"] == pytest.approx(metrics["noise_multiplier"])

    train_rows = [r for r in got["history"] if "train/loss" in r]
    assert [r["train/step"] for r in train_rows] == [1, 2, 3, 4, 5, 6]
    assert [r["train/loss"] for r in train_rows] == pytest.approx(metrics["loss_curve"])
    assert all(r["train/noise_multiplier"] == pytest.approx(metrics["noise_multiplier"]) for r in train_rows)
    eps = [r["train/epsilon"] for r in train_rows]
    assert eps == sorted(eps) and eps[-1] == pytest.approx(metrics["epsilon_calibrated"], rel=1e-6)
    audit_rows = [r for r in got["history"] if "audit/train/loss" in r]
    assert [r["audit/train/step"] for r in audit_rows] == [1, 2, 3, 4, 5, 6]
    steps = [r["_step"] for r in got["history"] if "_step" in r]
    assert steps == sorted(steps)

    s = got["summary"]
    assert s["train/final_loss"] == pytest.approx(metrics["final_loss"])
    assert s["train/epsilon_prv"] == pytest.approx(metrics["epsilon_prv"])
    assert s["score/test_nll"] == 3.25 and s["score/exposure_gap_mean"] == 0.5 and s["score/note"] == REDACTED
    assert s["audit/eps_lb_95"] == 0.25 and s["audit/auc"] == 0.61 and s["audit/canary_text"] == REDACTED
    assert s["audit/mia"]["_type"] == "table-file" and s["score/per_secret"]["_type"] == "table-file"
    assert "epsilon" not in s and "score/per_secret" in s
    leak_rows = [r for r in got["history"] if "leak" in r]
    assert [r["leak"] for r in leak_rows] == [REDACTED]

    # the per-secret table landed as a file, with the smuggled continuation redacted
    (table_file,) = list(copies[0].rglob("score/per_secret*.table.json"))
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["id", "vmr", "exposure_gap", "sample", "frequency"]
    assert table["data"][0][:4] == ["secret-03", 0.0, 0.5, REDACTED]

    # the journal (inside the W&B directory) holds all three parts, scrubbed
    journal = read_journal(offline, rid)
    assert set(journal["sections"]) == {"train", "score", "audit"}

    needles = sorted({*SecretScrubber(secrets).with_canaries(cs, gpt2_tokenizer).needles, "Dasovich/CAL/Enron", "EB 5781"})
    assert any("Mcconnell" in n for n in needles) and "[105, 106, 107, 108, 252, 253, 254]" in needles
    files = [p for p in (offline / "wandb").rglob("*") if p.is_file()]
    assert len(files) >= 5 and (offline / "wandb" / JOURNAL_DIR / f"{rid}.json").is_file()
    assert scan_for(offline, needles) == []


def test_rewriting_a_part_replaces_it_and_a_failed_stage_keeps_the_last_complete_copy(offline):
    from empriv.config import RunConfig

    params, run = tiny_params(), RunConfig(math.inf, 16, 6, 0.01, 1)
    scrub = SecretScrubber([SECRET])
    with open_configuration_run(params, run, section="train", scrub=scrub) as t:
        t.axis("train/*", "train/step")
        for i in range(3):
            t.log({"train/step": i + 1, "train/loss": 2.0 - i})
    with open_configuration_run(params, run, section="score", scrub=scrub) as t:
        t.summary({"score/test_nll": 4.0})
    with open_configuration_run(params, run, section="train", scrub=scrub) as t:  # train again: 2 rows now
        for i in range(2):
            t.log({"train/step": i + 1, "train/loss": 1.0 - i})
    rid = run_id("empriv", "workspace", run.name)
    assert write_offline_runs(offline) == [rid]
    (good,) = local_copies(offline, rid)
    got = run_contents(good)
    assert [r["train/loss"] for r in got["history"] if "train/loss" in r] == [1.0, 0.0]
    assert got["summary"]["score/test_nll"] == 4.0
    assert set(got["run"].tags) == {"eps=inf", "non-private", "method=full"} and got["config"]["epsilon"] is None
    with pytest.raises(RuntimeError, match="boom"):
        with open_configuration_run(params, run, section="score", scrub=scrub) as t:
            t.summary({"score/test_nll": 9.0})
            raise RuntimeError("boom")
    assert write_offline_runs(offline) == []  # the failed part changed nothing
    assert local_copies(offline, rid) == [good]
    assert read_journal(offline, rid)["sections"]["score"]["summary"] == {"score/test_nll": 4.0}


def test_live_offline_mode_writes_each_stage_at_once_and_leaves_nothing_to_write(offline, monkeypatch):
    """EMPRIV_WANDB_LIVE=1: each stage starts W&B and rewrites the whole run (the online path, offline)."""
    from empriv.config import RunConfig

    monkeypatch.setenv("EMPRIV_WANDB_LIVE", "1")
    params, run = tiny_params(), RunConfig(8.0, 16, 6, 0.01, 0)
    scrub = SecretScrubber([SECRET])
    with open_configuration_run(params, run, section="train", scrub=scrub) as t:
        assert not t.deferred and t.mode == "offline"
        t.axis("train/*", "train/step")
        t.log({"train/step": 1, "train/loss": 2.0})
    rid = run_id("empriv", "workspace", run.name)
    (first,) = local_copies(offline, rid)
    with open_configuration_run(params, run, section="score", scrub=scrub) as t:
        t.summary({"score/test_nll": 3.0})
    (second,) = local_copies(offline, rid)
    assert second != first
    got = run_contents(second)
    assert [r["train/loss"] for r in got["history"] if "train/loss" in r] == [2.0]
    assert got["summary"]["score/test_nll"] == 3.0
    assert write_offline_runs(offline) == []  # each live copy was whole already


def test_summary_run_holds_tables_and_figures_and_is_rewritten_whole(offline):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    png = offline / "variance.png"
    plt.plot([0, 1], [1, 0])
    plt.savefig(png)
    plt.close()
    params = tiny_params()
    scrub = SecretScrubber([SECRET])
    with open_summary_run(params, scrub=scrub) as t:
        t.table("analysis/runs", ["config", "epsilon", "test_nll"], [["eps8-b16-T6-lr0.01-s0", 8.0, 3.0],
                                                                     ["epsinf-b16-T6-lr0.01-s0", math.inf, 2.5]])
        t.image("figures/variance", png, caption="variance")
        t.summary({"analysis/n_runs": 2})
    with open_summary_run(params, scrub=scrub) as t:
        t.table("analysis/runs", ["config", "epsilon", "test_nll"], [["eps8-b16-T6-lr0.01-s0", 8.0, 3.5]])
        t.image("figures/variance", png, caption="variance")
    rid = run_id("empriv", "workspace", "analysis-workspace")
    assert write_offline_runs(offline) == [rid]
    (copy,) = local_copies(offline, rid)
    got = run_contents(copy)
    assert got["run"].job_type == "analysis" and got["run"].display_name == "analysis-workspace"
    assert "analysis/n_runs" not in got["summary"]  # the second analysis replaced the first whole
    assert got["summary"]["figures/variance"]["_type"] == "image-file"
    (table_file,) = list(copy.rglob("analysis/runs*.table.json"))
    assert json.loads(table_file.read_text())["data"] == [["eps8-b16-T6-lr0.01-s0", 8.0, 3.5]]
    assert len(list(copy.rglob("figures/variance*.png"))) == 1


def test_runs_of_a_dvc_experiment_in_a_temporary_copy_land_in_the_project(tmp_path):
    """A queued experiment (`dvc exp run --queue`, `dvc queue start`) runs the stage in .dvc/tmp/exps/<tmp> and
    deletes that copy: the offline run is in the project's wandb/ afterwards, grouped under the experiment's name."""
    pytest.importorskip("wandb")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "EMPRIV_WANDB", "DVC_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", WANDB_MODE="offline",
               WANDB_SILENT="true", **{v: str(tmp_path / v.lower()) for v in WANDB_ENV})
    script = (
        "import os\n"
        "from empriv.infra.tracking import SecretScrubber, open_run, study_group, write_offline_runs\n"
        "with open_run(project='empriv', group=study_group(), name='eps8-b16-T6-lr0.01-s0', section='train',\n"
        "              mode='offline', scrub=SecretScrubber()) as t:\n"
        "    t.log({'train/step': 1, 'train/loss': 1.5})\n"
        "    t.summary({'ran_in': os.getcwd()})\n"
        "write_offline_runs()\n"
        "open('out.txt', 'w').write(os.getcwd())\n"
    )
    (repo / "log_run.py").write_text(script)
    (repo / "dvc.yaml").write_text("stages:\n  log:\n    cmd: python log_run.py\n    deps: [log_run.py]\n"
                                   "    outs: [out.txt]\n")
    (repo / ".gitignore").write_text("/wandb/\n")
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "init"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *cmd[1:]] if cmd[0] == "git"
                       else cmd, cwd=repo, env=env, check=True, capture_output=True)
    for cmd in (["dvc", "exp", "run", "--queue", "-n", "exp-one"], ["dvc", "queue", "start"]):
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    deadline = time.monotonic() + 600
    while True:  # the worker runs in the background: wait until the task has an outcome
        status = subprocess.run(["dvc", "queue", "status"], cwd=repo, env=env, capture_output=True, text=True,
                                timeout=600).stdout
        line = next((ln for ln in status.splitlines() if "exp-one" in ln), "")
        if "Success" in line or "Failed" in line or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert "Success" in line, status
    rid = run_id("empriv", "exp-one", "eps8-b16-T6-lr0.01-s0")
    (copy,) = local_copies(repo, rid)
    got = run_contents(copy)
    assert got["history"][0]["train/loss"] == 1.5
    assert "/.dvc/tmp/exps/" in got["summary"]["ran_in"]  # the stage really ran in the temporary copy
    assert read_journal(repo, rid)["group"] == "exp-one"
    assert not any((repo / ".dvc" / "tmp" / "exps").glob("tmp*"))  # the temporary copy is gone


def test_wandb_write_command_writes_changed_runs_only(offline, capsys):
    from empriv.cli import main
    from empriv.config import RunConfig

    params, run = tiny_params(), RunConfig(2.0, 16, 6, 0.01, 0)
    with open_configuration_run(params, run, section="score", scrub=SecretScrubber()) as t:
        t.summary({"score/test_nll": 3.5})
    assert main(["wandb-write", "--root", str(offline)]) == 0
    assert "wrote 1 offline W&B run(s)" in capsys.readouterr().out
    assert main(["wandb-write", "--root", str(offline)]) == 0
    assert "wrote 0 offline W&B run(s) (every journal was already written)" in capsys.readouterr().out
    assert main(["wandb-write", "--root", str(offline), "--all"]) == 0
    assert "wrote 1 offline W&B run(s)" in capsys.readouterr().out
    (copy,) = local_copies(offline, run_id("empriv", "workspace", run.name))
    assert run_contents(copy)["summary"]["score/test_nll"] == 3.5


def test_a_run_that_a_stage_is_tracking_is_left_to_it_not_waited_for(offline, caplog):
    """A stage's tracker holds its run's journal lock from start to finish (minutes of training, possibly a study's
    stage sharing the project root): writing the offline runs skips that run, with one line, instead of waiting on
    the lock, and writes it on a later call once the stage has ended."""
    import time

    from empriv.config import RunConfig

    params, scrub = tiny_params(), SecretScrubber()
    done, busy = RunConfig(8.0, 16, 6, 0.01, 0), RunConfig(8.0, 16, 6, 0.01, 1)
    with open_configuration_run(params, done, section="train", scrub=scrub) as t:
        t.log({"train/step": 1, "train/loss": 1.0})
    with open_configuration_run(params, busy, section="train", scrub=scrub) as t:
        t.log({"train/step": 1, "train/loss": 2.0})
    tracking = open_configuration_run(params, busy, section="score", scrub=scrub)  # a stage running now
    try:
        started = time.monotonic()
        with caplog.at_level("INFO", logger="empriv.tracking"):
            assert write_offline_runs(offline) == [run_id("empriv", "workspace", done.name)]
        assert time.monotonic() - started < 60  # it did not wait for the stage
        busy_id = run_id("empriv", "workspace", busy.name)
        assert f"W&B: 1 run(s) left to the stages tracking them now ({busy_id}); a later call writes them" in caplog.messages
        assert local_copies(offline, busy_id) == []
        tracking.summary({"score/test_nll": 3.0})
    finally:
        tracking.finish()
    assert write_offline_runs(offline) == [busy_id]
    (copy,) = local_copies(offline, busy_id)
    assert run_contents(copy)["summary"]["score/test_nll"] == 3.0
