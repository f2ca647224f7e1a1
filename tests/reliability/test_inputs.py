"""Issue 29, rows 1–6: inputs `empriv validate` used to accept and a later stage rejected after DVC had deleted its
outputs. Each is now one line from validation, before anything is touched."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest

from reliability_project import STAGES, email, snapshot, write_enron_csv, write_tofu_jsonl


def _hf_env(tmp_path, **extra) -> dict:
    return {"HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_CACHE": str(tmp_path / "hf-home" / "hub"), **extra}


# --------------------------------------------------------------------------- row 1: base.name
def test_a_made_up_hub_id_offline_is_one_line(project, tmp_path):
    project.set("base.name", "nobody-xyz/made-up-model")
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(**_hf_env(tmp_path, HF_HUB_OFFLINE="1")), before)
    assert line == ("error: base.name: 'nobody-xyz/made-up-model' is not in the local Hugging Face cache and "
                    "HF_HUB_OFFLINE is set; fix: `hf download nobody-xyz/made-up-model` where there is network, or set "
                    "base.name to a local model directory (allowed: tiny-gpt2, smollm2-135m, a local model directory, "
                    "or a hub id in the Hugging Face cache)")


def test_a_made_up_hub_id_with_the_hub_unreachable_is_one_line_in_seconds(project, tmp_path):
    import time

    project.set("base.name", "nobody-xyz/made-up-model")
    before = snapshot(project.root)
    t0 = time.time()
    # port 9 (discard) on localhost: refused at once, as an unreachable hub is
    proc = project.validate(**_hf_env(tmp_path, HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="0"))
    line = project.fails_with_one_line(proc, before)
    assert "the hub (http://127.0.0.1:9) is unreachable" in line and time.time() - t0 < 30


def test_a_hub_id_in_the_local_cache_is_accepted_offline(project, tmp_path):
    snap = tmp_path / "hf-home" / "hub" / "models--someorg--cached-model" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    refs = snap.parents[1] / "refs"
    refs.mkdir()
    (refs / "main").write_text("a" * 40)
    project.set("base.name", "someorg/cached-model")
    proc = project.validate(**_hf_env(tmp_path, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr


def test_a_local_base_directory_without_a_model_is_one_line(project):
    (project.root / "my-model").mkdir()
    project.set("base.name", "./my-model")
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line.startswith("error: base.name: ./my-model: no config.json there, not a saved model directory")


# --------------------------------------------------------------------------- row 2: runtime.device
@pytest.mark.optional(reason="a machine with a CUDA GPU cannot show the error")
def test_cuda_on_a_machine_without_a_gpu_is_one_line(project):
    from empriv.pipeline.input_checks import cuda_devices

    if cuda_devices():
        pytest.skip("this machine has a CUDA GPU")
    project.set("runtime.device", "cuda")
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line == "error: runtime.device: 'cuda' but this machine has no CUDA GPU (allowed here: auto or cpu)"
    project.set("sweep.engine", "slurm")  # the jobs run on the cluster's nodes: not checked here
    assert project.validate().returncode == 0


# --------------------------------------------------------------------------- row 3: secrets.overrides
def test_malformed_overrides_name_the_file_the_line_and_the_key(project):
    path = project.root / "overrides.jsonl"
    path.write_text('{"id": "secret-00", "prompt": "Forwarded by", "continuation": " X"}\n'
                    '{"id": "secret-01",\n "prompt": "a", "continuation": "b"}\n'
                    '{"id": "secret-02", "prompt": "", "continuation": "b", "note": 1}\n'
                    '{"id": "secret-00", "prompt": "c", "continuation": "d"}\n')
    project.set("secrets.overrides", "overrides.jsonl")
    before = snapshot(project.root)
    proc = project.validate()
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    allowed = ('(allowed: one JSON object per line, {"id": …, "prompt": …, "continuation": …}, non-empty strings, '
               'each id once)')
    assert lines == [
        "error: secrets.overrides: overrides.jsonl line 2: not valid JSON (at column 20); a record must fit on one "
        f"line {allowed}",
        "error: secrets.overrides: overrides.jsonl line 3: not valid JSON (at column 10); a record must fit on one "
        f"line {allowed}",
        f"error: secrets.overrides: overrides.jsonl line 4 (id secret-02): unknown key(s) note {allowed}",
        f"error: secrets.overrides: overrides.jsonl line 4 (id secret-02): prompt must be a non-empty string {allowed}",
        f"error: secrets.overrides: overrides.jsonl line 5 (id secret-00): id repeated (first on line 1; "
        f"{allowed[1:]}"]
    assert "Expecting" not in proc.stderr
    assert snapshot(project.root) == {**before, "params.yaml": snapshot(project.root)["params.yaml"]}


def test_one_bad_override_line_is_one_line(project):
    path = project.root / "overrides.jsonl"
    path.write_text('{"id": "secret-00", "prompt": "a"}\n')
    project.set("secrets.overrides", "overrides.jsonl")
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line.startswith("error: secrets.overrides: overrides.jsonl line 1 (id secret-00): missing key(s) continuation")


# --------------------------------------------------------------------------- row 4: Enron corpus content
def _enron(project, path, n_train=10):
    project.set("data.source", "enron").set("data.path", path.name).set("data.n_train", n_train)


def test_an_empty_enron_corpus_is_one_line(project):
    path = project.root / "emails.csv"
    path.write_text("")
    _enron(project, path)
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line == ("error: data.path: emails.csv: empty file (allowed: the Kaggle emails.csv (a CSV with header "
                    "file,message) or a CMU maildir directory)")


def test_a_one_email_corpus_says_what_the_corpus_needs(project):
    path = write_enron_csv(project.root / "emails.csv", 1)
    _enron(project, path)
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line == ("error: data.path: emails.csv: the corpus gives 1 cleaned training e-mails (1 rows read; 1 e-mails "
                    "parsed; 1 kept by cleaning), fewer than data.n_train's minimum 10 (allowed: a corpus with at least "
                    "10 cleaned training e-mails)")
    assert "<= 0" not in line


def test_too_small_a_corpus_gives_an_allowed_n_train(project):
    path = write_enron_csv(project.root / "emails.csv", 40)
    _enron(project, path, n_train=100)
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    # 40 e-mails: 2 validation, 2 test (5 % each), 36 train
    assert line.endswith("fewer than data.n_train = 100 (allowed: data.n_train <= 36)"), line
    _enron(project, path, n_train=36)
    assert project.validate().returncode == 0


def test_broken_csv_quoting_names_the_line(project):
    path = write_enron_csv(project.root / "emails.csv", 12)
    text = path.read_text()
    # an unclosed quote in the 3rd message: it swallows the next rows
    text = text.replace('w2x39\n"', "w2x39\n", 1)
    path.write_text(text)
    _enron(project, path)
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    starts_on = text.count("\n", 0, text.index("allen-p/sent/2.")) + 1  # the physical line of the broken row
    assert f"broken CSV quoting at line {starts_on}: one field holds 2 messages: a quoted field is not closed" in line
    assert "allowed: a corpus with at least 10 cleaned training e-mails" in line


# --------------------------------------------------------------------------- row 5: a binary file
@pytest.mark.parametrize("kind", ["random", "gzip"])
def test_a_binary_file_as_the_enron_corpus_is_one_short_line(project, kind):
    path = project.root / "emails.csv"
    if kind == "gzip":
        csv_path = write_enron_csv(project.root / "plain.csv", 20)
        path.write_bytes(gzip.compress(csv_path.read_bytes()))
        csv_path.unlink()
    else:
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + os.urandom(4096))
    _enron(project, path)
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    what = "a gzip-compressed file" if kind == "gzip" else "a binary file"
    assert line.startswith(f"error: data.path: emails.csv: {what}, not an Enron corpus (allowed: "), line
    assert line.endswith("; decompress or extract it first)" if kind == "gzip" else "maildir directory)"), line
    assert len(line) < 300 and line.isprintable()


# --------------------------------------------------------------------------- row 6: the other source's file
def test_a_tofu_file_given_as_enron_is_one_line(project):
    path = write_tofu_jsonl(project.root / "tofu.jsonl", 10)
    _enron(project, path)
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line == ("error: data.path: tofu.jsonl: a JSON file (a TOFU corpus?), not an Enron CSV (allowed: the Kaggle "
                    "emails.csv (a CSV with header file,message) or a CMU maildir directory; for TOFU set data.source: "
                    "tofu)")


def test_an_enron_csv_given_as_tofu_and_too_few_tofu_records(project):
    path = write_enron_csv(project.root / "emails.csv", 3)
    project.set("data.source", "tofu").set("data.path", "emails.csv")
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line.startswith("error: data.path: emails.csv: not JSON (allowed: a TOFU .json") and \
        line.endswith("; an Enron CSV? set data.source: enron)")
    write_tofu_jsonl(project.root / "tofu.jsonl", 10)  # 10 authors: 9 train → 180 records
    project.set("data.path", "tofu.jsonl").set("data.n_train", 200)
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line.endswith("fewer than data.n_train = 200 (allowed: data.n_train <= 180)"), line
    project.set("data.n_train", 180)
    assert project.validate().returncode == 0


# --------------------------------------------------------------------------- the input@ stage checks its file too
def test_the_input_stage_checks_its_file_before_its_dependents_run(project):
    """Plain `dvc repro` after an edit in place re-runs input@corpus (not validate): it stops there."""
    path = write_enron_csv(project.root / "emails.csv", 40)
    _enron(project, path, n_train=36)
    assert project.validate().returncode == 0
    path.write_text(path.read_text().split("allen-p/sent/5.")[0].rsplit("\n", 1)[0] + "\n")  # 5 e-mails left
    before = snapshot(project.root)
    proc = project.run(sys.executable, str(STAGES / "inputs.py"), "--key", "corpus")
    line = project.fails_with_one_line(proc, before)
    assert "the corpus gives 5 cleaned training e-mails" in line


def test_corpus_facts_are_cached_by_the_files_identity(project, monkeypatch):
    from empriv.config import parse_params
    from empriv.pipeline import input_checks

    path = write_enron_csv(project.root / "emails.csv", 40)
    params = parse_params({"data": {"source": "enron", "path": str(path), "n_train": 36}, "cube": {
        "epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}})
    assert input_checks.input_errors(params, project.root) == []
    calls = []
    monkeypatch.setattr(input_checks, "enron_facts", lambda *a: calls.append(a) or {"error": "recomputed"})
    assert input_checks.input_errors(params, project.root) == []  # cached: not parsed again
    assert calls == []
    path.write_text(path.read_text() + "\n")  # an edit: parsed again
    assert input_checks.input_errors(params, project.root) == [f"data.path: {path}: recomputed"]
    assert len(calls) == 1


# --------------------------------------------------------------------------- row 9: outputs that cannot be written
@pytest.mark.parametrize("stage", ["train", "audit"])
def test_a_stage_that_cannot_write_its_record_fails_in_one_line_before_training(project, stage):
    blocker = project.root / "records" / stage
    blocker.parent.mkdir(exist_ok=True)
    blocker.write_text("a file where the records directory should be\n")  # (chmod would not stop root)
    before = snapshot(project.root)
    proc = project.run(sys.executable, str(STAGES / f"{stage}.py"), "--name", "eps8-b8-T1-lr0.01-s0", "--epsilon",
                       "8", "--batch-size", "8", "--steps", "1", "--learning-rate", "0.01", "--seed", "0")
    line = project.fails_with_one_line(proc, before)
    assert line.startswith(f"error: records/{stage}/record/full: cannot write eps8-b8-T1-lr0.01-s0.json there "), line
    assert "nothing was run (allowed: a writable directory" in line


@pytest.mark.optional(reason="as root it needs chattr +i, which some file systems (overlayfs) lack")
def test_ensure_writable_as_a_user_without_permission(tmp_path):
    from empriv.config import ConfigError
    from empriv.io import ensure_writable

    ensure_writable(tmp_path / "a" / "b" / "x.json")  # created as needed
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    immutable = os.geteuid() == 0  # root writes through mode bits; an immutable directory (ext4 chattr +i) stops it
    if immutable and subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode != 0:
        pytest.skip("root writes anywhere and chattr +i is not available on this file system")
    try:
        with pytest.raises(ConfigError, match=r"ro: cannot write x.json there \((Permission denied|Operation not "
                                              r"permitted)\)"):
            ensure_writable(ro / "x.json")
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(ro)], check=True)


# --------------------------------------------------------------------------- row 7: params shapes DVC itself reads
def test_a_scalar_cube_axis_is_one_line_from_validate_which_make_repro_runs_before_any_dvc_call(project):
    """`cube.epsilon: 64` breaks DVC's own parser of dvc.yaml's matrix before any stage (validate included) runs. The
    choice: `make repro` runs `empriv validate` before any DVC call, and docs/pipeline.md says plain `dvc repro` needs
    lists."""
    from reliability_project import ROOT

    project.set("cube.epsilon", 64)
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line.startswith("error: cube.epsilon: not a list (got 64; allowed: a list of ε values"), line
    recipe, in_repro = [], False
    for text in (ROOT / "Makefile").read_text().splitlines():
        if text.startswith("repro:"):
            in_repro = True
        elif in_repro and text.startswith("\t"):
            recipe.append(text.strip())
        elif in_repro and text.strip():
            break
    calls = [c for c in recipe if "dvc" in c.split()[0] or c.split()[0].endswith("empriv")]
    assert calls[0].startswith("$(BIN)/empriv validate"), recipe
    assert "plain `dvc repro` needs lists" in " ".join((ROOT / "docs" / "pipeline.md").read_text().split())


# --------------------------------------------------------------------------- the same checks, in process
def _params(**sections):
    from empriv.config import parse_params

    from reliability_project import CUBE

    return parse_params({"cube": CUBE, **sections})


def test_a_maildir_with_too_few_emails_and_the_other_tofu_shapes(tmp_path, monkeypatch):
    from empriv.pipeline.input_checks import input_errors

    monkeypatch.chdir(tmp_path)

    for i in range(3):
        mail = tmp_path / "maildir" / "allen-p" / "sent" / f"{i}."
        mail.parent.mkdir(parents=True, exist_ok=True)
        mail.write_text(email(i))
    assert input_errors(_params(data={"source": "enron", "path": "maildir"}), tmp_path, None) == [
        "data.path: maildir: the corpus gives 3 cleaned training e-mails (3 rows read; 3 e-mails parsed; 3 kept by "
        "cleaning), fewer than data.n_train's minimum 10 (allowed: a corpus with at least 10 cleaned training e-mails)"]
    (tmp_path / "t.jsonl").write_text('{"question": "q", "answer": "a"}\n{"question": "q",\n')
    (tmp_path / "t.bin").write_bytes(b"\0\1\2" * 100)
    (tmp_path / "t19.json").write_text("[" + ",".join(['{"question": "q", "answer": "a"}'] * 19) + "]")
    (tmp_path / "t60.json").write_text("[" + ",".join(['{"question": "q", "answer": "a"}'] * 60) + "]")
    expected = {
        "t.jsonl": "data.path: t.jsonl: line 2: not valid JSON (allowed: a TOFU .json (a list of {question, answer} "
                   "records, or a Hugging Face export) or .jsonl file, one record per line)",
        "t.bin": "data.path: t.bin: a binary file, not a TOFU corpus (allowed: a TOFU .json",
        "maildir": "data.path: maildir: a directory, not a TOFU file (allowed: a TOFU .json",
        "t19.json": "data.path: t19.json: 19 records, not a positive multiple of 20",
        "t60.json": "data.path: t60.json: 3 authors: the author split (first 90% train) leaves no test author "
                    "(allowed: at least 5 authors, 100 records)",
    }
    for name, start in expected.items():
        lines = input_errors(_params(data={"source": "tofu", "path": name}), tmp_path, None)
        assert len(lines) == 1 and lines[0].startswith(start), (name, lines)


def test_device_checks_name_what_this_machine_has(monkeypatch):
    from empriv.pipeline import input_checks

    monkeypatch.setattr(input_checks, "cuda_devices", lambda: 2)
    assert input_checks.device_errors(_params(runtime={"device": "cuda:1"})) == []
    assert input_checks.device_errors(_params(runtime={"device": "cuda:2"})) == [
        "runtime.device: 'cuda:2' but this machine has 2 CUDA GPU(s) (allowed here: auto, cpu, cuda:0 … cuda:1)"]
    if sys.platform != "darwin":
        assert input_checks.device_errors(_params(runtime={"device": "mps"})) == [
            "runtime.device: 'mps' but this machine has no Apple GPU (allowed here: auto or cpu)"]
    assert input_checks.device_errors(_params(runtime={"device": "auto"})) == []


def test_a_csv_without_the_enron_columns_and_prepares_own_advice(tmp_path, monkeypatch):
    """The prepare stage's own check (a corpus validation did not see, e.g. checked before an edit) gives an
    allowed value too, never `n_train <= 0`."""
    from empriv.config import ConfigError
    from empriv.data.prepare import _take
    from empriv.pipeline.input_checks import input_errors

    monkeypatch.chdir(tmp_path)
    (tmp_path / "other.csv").write_text("name,value\na,1\n")
    assert input_errors(_params(data={"source": "enron", "path": "other.csv"}), tmp_path, None) == [
        "data.path: other.csv: the CSV header has no columns file and message (allowed: the Kaggle emails.csv (a CSV "
        "with header file,message) or a CMU maildir directory)"]
    with pytest.raises(ConfigError) as info:
        _take([1], 10, "cleaned training emails", "data.n_train")
    assert info.value.lines == ["data.n_train = 10 but the corpus has only 1 cleaned training emails, fewer than "
                                "data.n_train's minimum 10 (allowed: a corpus with at least 10 cleaned training emails)"]
    with pytest.raises(ConfigError) as info:
        _take(list(range(36)), 100, "cleaned training emails", "data.n_train")
    assert info.value.lines == ["data.n_train = 100 but the corpus has only 36 cleaned training emails (allowed: "
                                "data.n_train <= 36)"]


def test_sniffed_kinds_read_as_phrases(tmp_path):
    from empriv.pipeline.input_checks import _what, sniff

    for head, phrase in ((b"%PDF-1.7\n", "a PDF file"), (b"PK\x03\x04", "a zip archive"), (b"\x1f\x8b\x08", "a gzip-compressed file"),
                         (b"\0\0\0", "a binary file")):
        (tmp_path / "f").write_bytes(head + b"x" * 100)
        assert _what(sniff(tmp_path / "f")) == phrase
    (tmp_path / "f").write_bytes("file,message\nnaïve café\n".encode("latin-1"))  # 8-bit text is text
    assert sniff(tmp_path / "f") is None


def test_a_permission_error_a_stage_meets_anyway_is_one_line(tmp_path, capsys, monkeypatch):
    """What the up-front check cannot foresee (permissions changed during the run) is still one line, not a
    traceback."""
    import yaml

    from empriv.stage import run_stage

    from reliability_project import CUBE

    monkeypatch.delenv("EMPRIV_DEBUG", raising=False)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"cube": CUBE}))

    def main(params):
        raise PermissionError(13, "Permission denied", "records/train/record/full/x.json")

    with pytest.raises(SystemExit) as info:
        run_stage(main, tmp_path / "params.yaml")
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        "error: [Errno 13] Permission denied: 'records/train/record/full/x.json'"
