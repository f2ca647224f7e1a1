"""The reliability suite's project (the ``project`` fixture is in conftest.py): a copy of the pipeline definition with stand-in outputs, a bad input, and
`empriv validate` (or a stage) run on it in a subprocess. Each test asserts the one line the user sees and that
no output file changed (every file hashed before and after)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "stages"  # the stage scripts dvc.yaml runs
VENV_BIN = Path(sys.executable).parent
CUBE = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0], "unit": ["record"],
        "method": ["full"]}
# stand-ins for the outputs DVC would delete when a stage re-runs
OUTPUTS = ("data/prepared/train.jsonl", "models/tokenizer/tokenizer.json", "models/base/model.safetensors",
           "data/secrets.jsonl", "records/prepare.json", "records/base.json", "data/inputs/corpus/fingerprint.json",
           "models/runs/record/full/eps8-b8-T1-lr0.01-s0/model.safetensors", ".empriv/params.ok")
NOT_OUTPUTS = (".empriv/input_checks.json",)  # validation's cache of corpus facts


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and str(p.relative_to(root)) not in NOT_OUTPUTS
            and p.relative_to(root).parts[0] != ".dvc"}


def env(**extra) -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
    e.update({"WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"})
    e.pop("EMPRIV_DEBUG", None)
    e.update(extra)
    return e


class Project:
    def __init__(self, root: Path):
        self.root = root
        for rel in ("dvc.yaml",):
            shutil.copy2(ROOT / rel, root / rel)
        for rel in OUTPUTS:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(b"valid\n" if rel.endswith(".ok") else os.urandom(64))
        self.params: dict = {"data": {"n_train": 10}, "cube": dict(CUBE), "audit": {"cube": dict(CUBE)}}

    def set(self, dotted: str, value) -> "Project":
        *parents, last = dotted.split(".")
        node = self.params
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
        return self

    def write_params(self) -> None:
        from empriv.config import expected_inputs

        p = self.params
        inputs = expected_inputs(p.get("data", {}).get("path"), p.get("secrets", {}).get("overrides"),
                                 p.get("base", {}).get("name"), p.get("data", {}).get("public_path"))
        if inputs:
            p["inputs"] = inputs
        (self.root / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))

    def run(self, *command: str, **env_extra) -> subprocess.CompletedProcess:
        self.write_params()
        return subprocess.run(list(command), cwd=self.root, env=env(**env_extra), capture_output=True, text=True,
                              timeout=300)

    def validate(self, **env_extra) -> subprocess.CompletedProcess:
        return self.run("empriv", "validate", **env_extra)

    def fails_with_one_line(self, proc: subprocess.CompletedProcess, before: dict) -> str:
        """The failure's one ``error: …`` line (and nothing changed)."""
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert "Traceback" not in proc.stderr
        after = snapshot(self.root)
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)} - {"params.yaml"}
        assert not changed, changed
        return lines[0]


# --------------------------------------------------------------------------- corpora
def email(i: int, sender: str = "a@x.com", to: str = "b@x.com", words: int = 40) -> str:
    body = " ".join(f"w{i}x{k}" for k in range(words))
    return (f"Message-ID: <{i}.JavaMail.evans@thyme>\nDate: Mon, 23 Apr 2001 12:41:00 -0700 (PDT)\nFrom: {sender}\n"
            f"To: {to}\nSubject: s{i}\nMime-Version: 1.0\nX-From: A\nX-To: B\n\n{body}\n")


def write_enron_csv(path: Path, n: int) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "message"])
        for i in range(n):
            w.writerow([f"allen-p/sent/{i}.", email(i)])
    return path


def write_tofu_jsonl(path: Path, authors: int) -> Path:
    rows = [{"question": f"Who is author {a}? ({k})", "answer": f"Author {a} writes in the crime genre ({k})."}
            for a in range(authors) for k in range(20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
