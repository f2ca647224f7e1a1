"""empriv.infra.allocator: glibc keeps a training step's large tensors in the heap (no page faults every step), the
same bits are computed, every stage process applies it, and EMPRIV_MALLOC chooses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")

# A non-private step of a GPT-2 with a 2,048-token vocabulary on 32 records of 64 tokens: its logits and their
# gradient are 16 MiB each, allocated and freed every step (the default model's shape).
STEPS = """
import hashlib, json, resource, sys
import torch
sys.path.insert(0, {tests!r})
from empriv.infra.allocator import tune_malloc
from tiny_models import tiny_gpt2
applied = tune_malloc()
torch.set_num_threads(1)
model = tiny_gpt2(vocab_size=2048, n_embd=64, n_head=2, n_layer=2, n_positions=64, seed=0).train()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ids = torch.randint(0, 2048, (32, 64), generator=torch.Generator().manual_seed(0))
def step():
    opt.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
for _ in range(2):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    step()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 4
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({{"applied": applied, "faults": faults, "digest": digest}}))
"""


def _python(code: str, env_extra: dict, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "EMPRIV_MALLOC"}
    env.update(OMP_NUM_THREADS="1", **env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_a_training_step_stops_faulting_its_tensors_in_and_computes_the_same_bits():
    runs = {}
    for choice in ("default", "tuned"):
        proc = _python(STEPS.format(tests=str(TESTS)), {"EMPRIV_MALLOC": choice})
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[choice] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs["default"]["applied"] == "glibc defaults (EMPRIV_MALLOC=default)"
    assert runs["tuned"]["applied"].startswith("tuned: glibc ")
    assert "mmap threshold 32 MiB, trim threshold 1024 MiB" in runs["tuned"]["applied"]
    # glibc's defaults hand the step's large tensors back to the kernel and fault them in again every step
    # (thousands of pages); tuned, they are reused from the heap
    assert runs["default"]["faults"] > 2000, runs
    assert runs["tuned"]["faults"] < runs["default"]["faults"] / 3, runs
    assert runs["tuned"]["digest"] == runs["default"]["digest"]  # where memory comes from changes no bit


def test_every_stage_process_applies_it_and_a_bad_choice_is_one_line_before_any_work(tmp_path):
    code = ("from empriv.stage import run_stage\nfrom empriv.infra import allocator\n"
            "run_stage(lambda params: print('applied:', allocator._applied), 'params.yaml')\n")
    proc = _python(code, {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "applied: tuned: glibc " in proc.stdout
    proc = _python(code, {"EMPRIV_MALLOC": "jemalloc"})
    assert proc.returncode == 2 and "applied" not in proc.stdout
    assert proc.stderr.strip().splitlines() == [
        "error: EMPRIV_MALLOC='jemalloc': must be 'tuned' or 'default'"], proc.stderr
