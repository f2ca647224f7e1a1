"""Through DVC itself: a bad corpus stops `dvc repro` at validate (params edited) or at input@corpus (the file edited
in place), and the stage that reads the corpus — whose outputs DVC would delete first — never starts."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from reliability_project import CUBE, STAGES, env, write_enron_csv

DVC_YAML = """stages:
  validate:
    cmd: python STAGES/validate_params.py
    deps:
      - params.yaml
    outs:
      - .empriv/params.ok:
          cache: false
  input:
    foreach: ${inputs}
    do:
      cmd: python STAGES/inputs.py --key ${key}
      deps:
        - .empriv/params.ok
        - ${item}
      outs:
        - data/inputs/${key}/fingerprint.json:
            persist: true
  prepare:
    cmd: python -c "import pathlib; pathlib.Path('prepared.txt').write_text(open('emails.csv').read()[:40])"
    deps:
      - .empriv/params.ok
      - data/inputs/corpus
    params:
      - data
    outs:
      - prepared.txt
""".replace("STAGES", str(STAGES))


@pytest.mark.slow
def test_dvc_repro_stops_before_the_stage_that_reads_a_bad_corpus(tmp_path):
    work = tmp_path / "p"
    work.mkdir()

    def dvc(*args, check=True):
        proc = subprocess.run(["dvc", *args], cwd=work, env=env(), capture_output=True, text=True, timeout=600)
        assert not check or proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    dvc("init", "--no-scm", "-q")
    (work / "dvc.yaml").write_text(DVC_YAML)
    (work / "data/inputs/corpus").mkdir(parents=True)
    corpus = write_enron_csv(work / "emails.csv", 40)
    params = {"data": {"source": "enron", "path": "emails.csv", "n_train": 30}, "cube": CUBE, "audit": {"cube": CUBE},
              "inputs": {"corpus": "emails.csv"}}
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    dvc("repro")
    prepared = (work / "prepared.txt").read_bytes()

    params["data"]["n_train"] = 100  # the params: validate stops it
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    proc = dvc("repro", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Running stage 'prepare'" not in proc.stdout, out
    assert "error: data.path: emails.csv: the corpus gives 36 cleaned training e-mails" in out
    assert "(allowed: data.n_train <= 36)" in out and "Traceback" not in out
    assert (work / "prepared.txt").read_bytes() == prepared

    params["data"]["n_train"] = 30
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    dvc("repro")
    fingerprint = (work / "data/inputs/corpus/fingerprint.json").read_bytes()
    corpus.write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4)  # the file, edited in place: input@corpus stops it
    proc = dvc("repro", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Running stage 'prepare'" not in proc.stdout, out
    assert "error: data.path: emails.csv: a gzip-compressed file, not an Enron corpus" in out
    assert (work / "prepared.txt").read_bytes() == prepared
    assert (work / "data/inputs/corpus/fingerprint.json").read_bytes() == fingerprint  # persist: not deleted either
