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
import ctypes, hashlib, json, os, resource, sys
import torch
sys.path.insert(0, {tests!r})
from empriv.infra.allocator import M_MMAP_THRESHOLD, tune_malloc
from tiny_models import tiny_gpt2
applied = tune_malloc()
if os.environ.get("MMAP_EVERY_TENSOR"):  # the control: glibc's initial threshold, held (not raised dynamically)
    assert ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1
torch.set_num_threads(1)
model = tiny_gpt2(vocab_size=2048, n_embd=64, n_head=2, n_layer=2, n_positions=64, seed=0).train()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ids = torch.randint(0, 2048, (32, 64), generator=torch.Generator().manual_seed(0))
def step():
    opt.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
def resident():  # pages
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1])
for _ in range(3):
    step()
faults0, resident0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, resident()
for _ in range(8):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
# a fault either brings in memory the process had not touched yet (the heap still growing: resident memory grows
# with it) or brings back memory it handed to the kernel and faults in again; only the second kind is the cost
refaults = (faults - (resident() - resident0)) / 8
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({{"applied": applied, "refaults": refaults, "digest": digest}}))
"""


def _python(code: str, env_extra: dict, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "EMPRIV_MALLOC"}
    env.update(OMP_NUM_THREADS="1", **env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_a_training_step_stops_faulting_its_tensors_in_and_computes_the_same_bits():
    runs = {}
    for name, env in (("default", {"EMPRIV_MALLOC": "default"}), ("tuned", {"EMPRIV_MALLOC": "tuned"}),
                      ("control", {"EMPRIV_MALLOC": "default", "MMAP_EVERY_TENSOR": "1"})):
        proc = _python(STEPS.format(tests=str(TESTS)), env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs["default"]["applied"] == "glibc defaults (EMPRIV_MALLOC=default)"
    assert runs["tuned"]["applied"].startswith("tuned: glibc ")
    assert "mmap threshold 32 MiB, trim threshold 1024 MiB" in runs["tuned"]["applied"]
    # Tuned, the step's large tensors are reused from the heap: nothing is faulted in again. Raw fault counts are not
    # the measure: the tuned heap may still grow by a tensor or two in the first steps (a CI run counted 2,049 faults
    # a step over 4 steps, all of them new memory), so faults that only grew the resident set are subtracted.
    assert runs["tuned"]["refaults"] < 50, runs
    # The measure sees memory handed back and faulted in again: with every large tensor mmapped (glibc's initial
    # threshold, held) each step faults its large tensors back in (43,098 pages a step, in each of 4 runs). glibc's
    # own defaults move the threshold with what was freed last and fall anywhere between: 0 to 11,000 pages a step
    # in 30 runs here, so the defaults are the bits' reference, not a count to assert.
    assert runs["control"]["refaults"] > 2 * 4096, runs
    assert runs["tuned"]["digest"] == runs["default"]["digest"] == runs["control"]["digest"]  # no bit changes


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
