"""Issue 29, row 8: defaults are not changes. Deleting a params section whose values are the defaults must not make
DVC re-run the stages that read it: validation writes the defaults of the keys dvc.yaml's stages read back into the
file (comments kept) before DVC compares them."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from reliability_project import CUBE, STAGES, env

PARAMS = """# my study
data:
  n_train: 10   # small
privacy:
  delta:
  delta_exponent: 1.1
  accountant: prv
  group_accounting: tight
  user_resample: true
cube: {cube}
audit:
  cube: {cube}
"""
DVC_YAML = """stages:
  validate:
    cmd: python STAGES/validate_params.py --fill-defaults
    deps:
      - params.yaml
    outs:
      - .empriv/params.ok:
          cache: false
  train:
    cmd: python -c "import time, pathlib; pathlib.Path('trained.txt').write_text(str(time.time()))"
    deps:
      - .empriv/params.ok
    params:
      - privacy
      - data.n_train
      - runtime.threads
    outs:
      - trained.txt
""".replace("STAGES", str(STAGES))


def _write(work, text):
    (work / "params.yaml").write_text(text.replace("{cube}", yaml.safe_dump(CUBE, default_flow_style=True).strip()))


def test_fill_defaults_writes_only_what_dvc_reads_and_keeps_comments(tmp_path):
    from empriv.pipeline.validate import fill_defaults

    _write(tmp_path, PARAMS.replace("privacy:\n  delta:\n  delta_exponent: 1.1\n  accountant: prv\n  group_accounting: "
                                    "tight\n  user_resample: true\n", ""))
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    assert fill_defaults(tmp_path / "params.yaml", tmp_path / "dvc.yaml") == ["privacy", "runtime.threads"]
    text = (tmp_path / "params.yaml").read_text()
    assert text.startswith("# my study\n") and "n_train: 10   # small" in text
    raw = yaml.safe_load(text)
    assert raw["privacy"] == {"delta": None, "delta_exponent": 1.1, "accountant": "prv", "group_accounting": "tight",
                              "user_resample": True}
    assert raw["runtime"] == {"threads": 2} and "score" not in raw  # only the keys a stage reads
    assert "  delta: null\n" in text  # null spelt out, as params.yaml is written by hand (not an empty value)
    assert fill_defaults(tmp_path / "params.yaml", tmp_path / "dvc.yaml") == []  # idempotent


@pytest.mark.slow
def test_deleting_a_section_of_defaults_reruns_nothing(tmp_path):
    work = tmp_path / "p"
    work.mkdir()

    def dvc(*args):
        proc = subprocess.run(["dvc", *args], cwd=work, env=env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    dvc("init", "--no-scm", "-q")
    (work / "dvc.yaml").write_text(DVC_YAML)
    _write(work, PARAMS)
    dvc("repro")
    trained = (work / "trained.txt").read_bytes()
    _write(work, PARAMS.replace("privacy:\n  delta:\n  delta_exponent: 1.1\n  accountant: prv\n  group_accounting: "
                                "tight\n  user_resample: true\n", ""))  # the privacy section deleted
    proc = dvc("repro")
    assert "Running stage 'validate'" in proc.stdout and "Running stage 'train'" not in proc.stdout, proc.stdout
    assert (work / "trained.txt").read_bytes() == trained
    assert yaml.safe_load((work / "params.yaml").read_text())["privacy"]["accountant"] == "prv"
    assert "changed" not in dvc("status").stdout
    # a real change still re-runs
    text = (work / "params.yaml").read_text().replace("accountant: prv", "accountant: rdp")
    (work / "params.yaml").write_text(text)
    assert "Running stage 'train'" in dvc("repro").stdout
