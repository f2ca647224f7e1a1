"""empriv.train.checkpoint: a run killed mid-way and re-run resumes from its last complete checkpoint and ends
bit-identical to the uninterrupted run (weights, losses, batches, ε); checkpoints vanish on completion; a
checkpoint of another run, or a truncated/corrupt one, is refused and ignored.

Real training on a tiny GPT-2 with dropout switched on (so torch's global generator matters), one thread.
Run as a script (``python test_checkpoint.py <kind> <checkpoint dir> <out dir> <kill step> <kill mode>``) it
trains one run with checkpoints and can SIGKILL itself: the SIGKILL test drives it in subprocesses.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from empriv.config import RunConfig, parse_params
from empriv.models.adapters import prepare_for_finetuning
from empriv.models.lm import encode_fixed
from empriv.randomness import RunStreams
from empriv.train.checkpoint import Checkpointer
from empriv.train.dp import dp_finetune

EOS = 299
CPU = torch.device("cpu")
N = 40
T = 12
EVERY = 3
SIGMA = 0.8
DROPOUT = 0.1

HERE = Path(__file__).resolve()


class Crash(RuntimeError):
    """Stands for the process dying inside a step."""


def make_params(method: str, unit: str = "record", micro: int = 4, dp_step: str = "auto"):
    raw = {
        "runtime": {"device": "cpu", "threads": 1, "wandb_mode": "disabled"},
        "data": {"n_train": N},
        "train": {"optimizer": "adam", "clip_norm": 0.5, "micro_batch_size": micro, "dp_step": dp_step,
                  "lora": {"rank": 2, "alpha": 4, "dropout": DROPOUT}},
        "cube": {"epsilon": [8, "inf"], "batch_size": [1, 6], "steps": [T], "learning_rate": [0.01], "seed": [0],
                 "unit": [unit]},
    }
    params = parse_params(raw)
    if hasattr(params, "for_method"):  # the method is a cube axis (cube.method); a run's params name it in train
        return params.for_method(method)
    raw["train"]["method"] = method
    return parse_params(raw)


def records(n: int = N, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lists = [torch.randint(0, EOS, (int(torch.randint(3, 15, (1,), generator=g)),), generator=g).tolist()
             for _ in range(n)]
    return lists, *encode_fixed(lists, EOS, 16)


def make_model(params, run: RunConfig, streams: RunStreams):
    """The tiny GPT-2 of tests/tiny_models.py with dropout 0.1 everywhere, prepared as the pipeline prepares it."""
    sys.path.insert(0, str(HERE.parent.parent))
    from tiny_models import tiny_gpt2

    model = tiny_gpt2()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = DROPOUT
    return prepare_for_finetuning(model, params.train.method, params.train.lora, init_seed=streams.seed_of("init"))


def record_run(method: str, private: bool, *, batch_size: int = 6, checkpoint=None, crash_at=None, kill_at=None,
               dp_step: str = "auto"):
    """Train one record-level run (fresh model, as a re-run process would build it); returns (model, result)."""
    params = make_params(method, dp_step=dp_step)
    run = RunConfig(8 if private else math.inf, batch_size, T, 0.01, 0)
    streams = RunStreams.of(run, method=method)
    model = make_model(params, run, streams)
    _, ids, mask = records()

    def on_step(step, loss, bsz):
        if step == crash_at:
            raise Crash(f"crash at step {step}")
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    res = dp_finetune(model, ids, mask, run=run, noise_multiplier=SIGMA if private else None, params=params,
                      device=CPU, on_step=on_step, streams=streams, checkpoint=checkpoint)
    return model, res


def user_run(unit: str, private: bool, *, checkpoint=None, crash_at=None):
    """Train one user-level run through train_user_level (10 units of 4 records)."""
    from empriv.train.user_level import make_unit_data, train_user_level

    params = make_params("full", unit=unit)
    run = RunConfig(8 if private else math.inf, 4, T, 0.01, 0, unit)
    streams = RunStreams.of(run, method="full")
    model = make_model(params, run, streams)
    lists, ids, mask = records()
    units = [f"u{(i * 7) % 10}" for i in range(N)]
    data = make_unit_data(ids, mask, units, record_tokens=lists, scores=np.linspace(1, 2, N))
    n_slots = data.n_units * run.privacy_unit.k if run.privacy_unit.method == "group" else data.n_units
    privacy = {"noise_multiplier": SIGMA if private else 0.0, "sample_rate": run.batch_size / n_slots}

    def on_step(step, loss, bsz):
        if step == crash_at:
            raise Crash(f"crash at step {step}")

    res, _ = train_user_level(params, run, model, data, privacy=privacy, streams=streams, device=CPU, eos_id=EOS,
                              on_step=on_step, checkpoint=checkpoint)
    return model, res


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_bit_identical(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    differing = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differing, f"{len(differing)} tensors differ, e.g. {differing[:3]}"


def same_floats(a: list, b: list) -> bool:
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b))


def assert_same_run(res, ref) -> None:
    assert same_floats(res.losses, ref.losses)
    assert res.batch_sizes == ref.batch_sizes
    assert res.batches == ref.batches
    assert res.empty_batches == ref.empty_batches
    assert len(res.losses) == T  # every step taken exactly once


def crash_then_resume(train, directory: Path, crash_at: int):
    """Run ``train`` with checkpoints until it crashes at ``crash_at``, then re-run it to the end."""
    ck = Checkpointer(directory, EVERY)
    with pytest.raises(Crash):
        train(checkpoint=ck, crash_at=crash_at)
    saved = ck.checkpoints()
    assert [int(p.name.split("-")[1]) for p in saved] == [crash_at // EVERY * EVERY]  # the last one only
    model, res = train(checkpoint=ck)
    assert not directory.exists()  # deleted on completion
    return model, res


# ------------------------------------------------------------------------------------------------ resume


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("private", [True, False], ids=["private", "nonprivate"])
def test_record_level_resume_is_bit_identical_to_the_uninterrupted_run(tmp_path, method, private):
    ref_model, ref = record_run(method, private)
    crash_at = random.Random(f"{method}{private}").randrange(EVERY, T - 1)

    def train(**kw):
        return record_run(method, private, **kw)

    model, res = crash_then_resume(train, tmp_path / "ck", crash_at)
    assert res.resumed_from_step == crash_at // EVERY * EVERY and ref.resumed_from_step is None
    assert_bit_identical(weights(model), weights(ref_model))
    assert_same_run(res, ref)
    # the run really moved the weights (the comparison is not between two untouched models)
    run = RunConfig(8 if private else math.inf, 6, T, 0.01, 0)
    fresh = make_model(make_params(method), run, RunStreams.of(run, method=method))
    assert any(not torch.equal(a, b) for a, b in zip(weights(fresh).values(), weights(ref_model).values()))


def test_resume_through_empty_batches_and_two_crashes(tmp_path):
    """b = 1 of n = 40: empty Poisson batches happen; crash twice, resume twice; the counts add up once."""
    ref_model, ref = record_run("full", True, batch_size=1)
    assert ref.empty_batches >= 3
    ck = Checkpointer(tmp_path / "ck", EVERY)
    with pytest.raises(Crash):
        record_run("full", True, batch_size=1, checkpoint=ck, crash_at=4)
    with pytest.raises(Crash):
        record_run("full", True, batch_size=1, checkpoint=ck, crash_at=10)
    model, res = record_run("full", True, batch_size=1, checkpoint=ck)
    assert res.resumed_from_step == 9
    assert_bit_identical(weights(model), weights(ref_model))
    assert_same_run(res, ref)


def test_checkpointing_itself_changes_nothing_and_leaves_nothing(tmp_path):
    ref_model, ref = record_run("lora", True)
    model, res = record_run("lora", True, checkpoint=Checkpointer(tmp_path / "ck", 2))
    assert_bit_identical(weights(model), weights(ref_model))
    assert_same_run(res, ref)
    assert res.resumed_from_step is None
    assert not (tmp_path / "ck").exists()


def test_kept_checkpoints_until_told_to_clear(tmp_path):
    ck = Checkpointer(tmp_path / "ck", 5, clear_on_completion=False)
    record_run("lora", False, checkpoint=ck)
    assert [p.name for p in ck.checkpoints()] == ["step-000000010"]  # 5 and 10 written, 5 replaced; none at T
    ck.clear()
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("unit", ["userwise-k2-random", "userwise-k2-chunk", "userwise-k3-longest", "group-k2-random"])
@pytest.mark.parametrize("private", [True, False], ids=["private", "nonprivate"])
def test_user_level_resume_is_bit_identical_to_the_uninterrupted_run(tmp_path, unit, private):
    ref_model, ref = user_run(unit, private)
    crash_at = random.Random(f"{unit}{private}").randrange(EVERY, T - 1)

    def train(**kw):
        return user_run(unit, private, **kw)

    model, res = crash_then_resume(train, tmp_path / "ck", crash_at)
    assert res.resumed_from_step == crash_at // EVERY * EVERY
    assert_bit_identical(weights(model), weights(ref_model))
    assert same_floats(res.losses, ref.losses) and res.batch_sizes == ref.batch_sizes
    assert res.empty_batches == ref.empty_batches and len(res.losses) == T


def test_userwise_random_selection_state_is_in_the_checkpoint(tmp_path):
    """Without the selection's generator in the checkpoint a resumed random-k run would pick other records."""
    from empriv.train import user_level

    ck = Checkpointer(tmp_path / "ck", EVERY)
    with pytest.raises(Crash):
        user_run("userwise-k2-random", True, checkpoint=ck, crash_at=7)
    snapshot_state = json.loads((ck.checkpoints()[0] / "state.json").read_text())
    assert snapshot_state["extra"]["rng"]["bit_generator"] == "PCG64"
    assert len(snapshot_state["extra"]["records_per_step"]) == 6

    original = user_level.SelectionState.load_state_dict
    try:
        user_level.SelectionState.load_state_dict = lambda self, state: None  # forget the selection's position
        model, _ = user_run("userwise-k2-random", True, checkpoint=ck)
    finally:
        user_level.SelectionState.load_state_dict = original
    ref_model, _ = user_run("userwise-k2-random", True)
    assert any(not torch.equal(a, b) for a, b in zip(weights(model).values(), weights(ref_model).values()))


# ------------------------------------------------------------------------------------------------ refusal


def _crashed_checkpoint(tmp_path, **kw) -> Checkpointer:
    ck = Checkpointer(tmp_path / "ck", EVERY)
    with pytest.raises(Crash):
        record_run("full", True, checkpoint=ck, crash_at=7, **kw)
    assert len(ck.checkpoints()) == 1
    return ck


def test_checkpoint_of_another_configuration_is_refused_in_one_line_and_ignored(tmp_path, caplog):
    ck = _crashed_checkpoint(tmp_path, batch_size=6)
    ref_model, ref = record_run("full", True, batch_size=5)
    with caplog.at_level(logging.WARNING, logger="empriv.train"):
        model, res = record_run("full", True, batch_size=5, checkpoint=ck)
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and "\n" not in refusals[0]
    assert "run: 'eps8-b6-T12" in refusals[0] and "training starts fresh" in refusals[0]
    assert res.resumed_from_step is None
    assert_bit_identical(weights(model), weights(ref_model))
    assert_same_run(res, ref)


def test_checkpoint_with_other_params_or_sigma_is_refused(tmp_path, caplog):
    from empriv.train.checkpoint import params_digest

    ck = _crashed_checkpoint(tmp_path)
    stored = json.loads((ck.checkpoints()[0] / "meta.json").read_text())["fingerprint"]
    assert stored["sigma"] == SIGMA and stored["n"] == N and stored["method"] == "full"
    assert stored["params"] == params_digest(make_params("full"))
    assert params_digest(make_params("full", micro=8)) != stored["params"]
    # the cadence is not part of what training computes
    raw_cadence = make_params("full").model_copy(update={"train": make_params("full").train.model_copy(
        update={"log_every": 7})})
    assert params_digest(raw_cadence) == stored["params"]

    caplog.set_level(logging.WARNING, logger="empriv.train")
    assert ck.load({**stored, "sigma": 0.9}) is None
    assert "sigma: 0.8 != 0.9" in caplog.records[-1].getMessage()
    assert ck.load(ck.with_identity(job="audit").fingerprint(stored)) is None  # an identity it was not written with
    assert ck.load(stored).step == 6


def test_truncated_or_corrupt_checkpoint_is_ignored(tmp_path, caplog):
    ck = _crashed_checkpoint(tmp_path)
    good = ck.checkpoints()[0]
    # a later checkpoint whose tensors were cut short, and a half-written temporary directory
    later = tmp_path / "ck" / "step-000000009"
    shutil.copytree(good, later)
    data = (later / "tensors.pt").read_bytes()
    (later / "tensors.pt").write_bytes(data[: len(data) // 2])
    shutil.copytree(good, tmp_path / "ck" / ".tmp-step-000000012-999")
    with caplog.at_level(logging.WARNING, logger="empriv.train"):
        model, res = record_run("full", True, checkpoint=ck)
    assert res.resumed_from_step == 6  # the intact one, the corrupt one skipped
    assert any("incomplete or corrupt" in r.getMessage() and "step-000000009" in r.getMessage()
               for r in caplog.records)
    ref_model, ref = record_run("full", True)
    assert_bit_identical(weights(model), weights(ref_model))
    assert_same_run(res, ref)
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("damage", ["no-meta", "bad-state", "bad-meta"])
def test_damaged_only_checkpoint_means_a_fresh_start(tmp_path, caplog, damage):
    ck = _crashed_checkpoint(tmp_path)
    path = ck.checkpoints()[0]
    if damage == "no-meta":
        (path / "meta.json").unlink()
    elif damage == "bad-state":
        (path / "state.json").write_text((path / "state.json").read_text().replace("[", "[1,", 1))
    else:
        (path / "meta.json").write_text("{\"format\": 1, \"step\"")
    with caplog.at_level(logging.WARNING, logger="empriv.train"):
        model, res = record_run("full", True, checkpoint=ck)
    assert res.resumed_from_step is None
    assert any("incomplete or corrupt" in r.getMessage() for r in caplog.records)
    ref_model, ref = record_run("full", True)
    assert_bit_identical(weights(model), weights(ref_model))


def test_bad_cadence_is_one_line_value_error(tmp_path):
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match=r"^runtime.checkpoint_every \(steps between checkpoints\): "
                                             r"(out of range|not an integer) \(got .*; allowed: an integer >= 1\)$"):
            Checkpointer(tmp_path, bad)


# ------------------------------------------------------------------------------------------------ SIGKILL


def script_run(directory: str, out: str, kill_at: int, mode: str) -> None:
    """The subprocess side of the SIGKILL test: one private full run with checkpoints every 3 steps; ``mode``
    'step' kills at step ``kill_at``, 'save' kills while the checkpoint after step ``kill_at`` is being written
    (after its tensors, before its meta.json); then the weights and metrics (with ε over the steps taken)."""
    import empriv.train.checkpoint as ckmod

    torch.set_num_threads(1)
    if mode == "save":
        write_text = ckmod._write_text

        def dying_write(path, text):
            if path.name == "meta.json" and f"step-{kill_at + 1:09d}" in path.parent.name:
                os.kill(os.getpid(), signal.SIGKILL)
            write_text(path, text)

        ckmod._write_text = dying_write
    model, res = record_run("full", True, checkpoint=Checkpointer(directory, EVERY),
                            kill_at=kill_at if mode == "step" else None)
    Path(out).mkdir(parents=True, exist_ok=True)
    torch.save(weights(model), Path(out) / "weights.pt")
    (Path(out) / "metrics.json").write_text(json.dumps({
        "losses": res.losses, "batch_sizes": res.batch_sizes, "empty_batches": res.empty_batches,
        "steps": len(res.losses), "resumed_from_step": res.resumed_from_step,
        "epsilon": epsilon_spent(len(res.losses))}))


def epsilon_spent(steps: int) -> float:
    """ε of the steps a run took (σ, q = 6/40, δ = 1e-5; RDP): what accounting over the realised steps gives."""
    from empriv.privacy.accounting import epsilon_for

    return epsilon_for(SIGMA, 6 / N, steps, 1e-5, "rdp")


def _script(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    return subprocess.run([sys.executable, str(HERE), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=300)


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def test_sigkill_and_rerun_equals_the_uninterrupted_run(tmp_path):
    """Killed at a random step after a checkpoint, re-run and killed again while writing the next checkpoint,
    re-run to the end: the weights, curves and ε equal those of an uninterrupted run."""
    ck, out = tmp_path / "ck", tmp_path / "out"
    kill_at = random.Random(18).randrange(EVERY, 2 * EVERY + 2)  # a step in [3, 8): the last checkpoint is 3 or 6
    last = kill_at // EVERY * EVERY

    killed = _script(ck, out, kill_at, "step")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not out.exists()
    assert sorted(p.name for p in ck.iterdir()) == [f"step-{last:09d}"]

    killed = _script(ck, out, last + EVERY - 1, "save")  # dies between the next checkpoint's tensors and its meta.json
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not out.exists()
    names = sorted(p.name for p in ck.iterdir())
    assert names[0].startswith(f".tmp-step-{last + EVERY:09d}-") and names[1:] == [f"step-{last:09d}"]

    rerun = _script(ck, out, -1, "none")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert not ck.exists()  # deleted on completion, the half-written one too
    got = _metrics(out)

    # uninterrupted, in this process at the script's one thread: results differ across thread counts (the fast DP
    # step's weighted sums reduce in another order at two threads), and pytest's process may have more
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref_model, ref = record_run("full", True)
    finally:
        torch.set_num_threads(threads)
    assert ref.dp_step == "fast"  # the default step (auto) on a full fine-tune
    assert got["resumed_from_step"] == last
    assert got["steps"] == len(ref.losses) == T
    assert got["epsilon"] == epsilon_spent(len(ref.losses))
    assert same_floats(got["losses"], ref.losses) and got["batch_sizes"] == ref.batch_sizes
    assert_bit_identical(torch.load(out / "weights.pt"), weights(ref_model))


if __name__ == "__main__":
    script_run(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
