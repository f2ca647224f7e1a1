"""empriv.train.loop: the DP loop skeleton against a naive hand-written loop (same batches, same noise, same curves
and empty count), resume after a crash bit-identical to the uninterrupted run (with an extra state drawn from too),
checkpoints refused when the extra state does not match, and one-line errors. The four methods' loops on real models:
test_dp.py, test_dpflat.py, test_dpzero.py, test_userwise.py and test_checkpoint.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from empriv.train.checkpoint import Checkpointer
from empriv.train.loop import DPLoop
from empriv.train.sampling import RecordSampling, UserSampling

N, Q, T, SIGMA = 20, 0.05, 9, 0.5


class Crash(RuntimeError):
    pass


class Counter:
    """An extra state: a NumPy generator the step draws from."""

    def __init__(self):
        self.rng = np.random.default_rng(7)

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


def toy_step(w: torch.Tensor, data: torch.Tensor, noise: torch.Generator, extra: Counter | None):
    """A clip + noise step on a vector w: per-record gradient w − x_i clipped to norm 1, summed, noised, / (q·n)."""
    def step(t: int, batch: torch.Tensor) -> dict:
        g = w - data[batch]
        g = g / torch.clamp(g.norm(dim=1, keepdim=True), min=1.0)
        total = g.sum(0) + torch.normal(0.0, SIGMA, w.shape, generator=noise)
        jitter = float(extra.rng.uniform()) if extra is not None else 0.0
        w.sub_(0.1 * (total / (Q * N)) + jitter * 1e-3)
        return {"losses": float(((w - data) ** 2).sum(1).mean()), "sizes": int(batch.numel()), "other": t}
    return step


def naive(data: torch.Tensor, extra: bool = False):
    """The same T steps written out by hand: Poisson draws, clip, noise, curves."""
    w, gen, noise = torch.zeros(3), torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    rng = np.random.default_rng(7)
    losses, sizes, empty = [], [], 0
    for _ in range(T):
        batch = torch.nonzero(torch.rand(N, generator=gen) < Q, as_tuple=False).flatten()
        empty += batch.numel() == 0
        g = w - data[batch]
        g = g / torch.clamp(g.norm(dim=1, keepdim=True), min=1.0)
        total = g.sum(0) + torch.normal(0.0, SIGMA, w.shape, generator=noise)
        w.sub_(0.1 * (total / (Q * N)) + (float(rng.uniform()) if extra else 0.0) * 1e-3)
        losses.append(float(((w - data) ** 2).sum(1).mean()))
        sizes.append(int(batch.numel()))
    return w, losses, sizes, empty


def run_loop(data, *, checkpoint=None, crash_at=None, extra=False):
    w, gen, noise = torch.zeros(3), torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    state = Counter() if extra else None
    loop = DPLoop(sampling=RecordSampling(N, Q), steps=T, curves=("losses", "sizes"), checkpoint=checkpoint,
                  facts={"loop": "toy"}, extra_state=state)
    snapshot = loop.resume_point()
    if snapshot is not None:
        w.copy_(snapshot.tensors["w"])
    seen = []

    def on_step(t, values):
        seen.append((t, values["other"]))
        if t == crash_at:
            raise Crash

    loop.run(toy_step(w, data, noise, state), generators={"sampler": gen, "noise": noise},
             tensors=lambda: {"w": w.clone()}, on_step=on_step)
    return w, loop, seen


@pytest.fixture
def data():
    return torch.randn(N, 3, generator=torch.Generator().manual_seed(0)) * 3


def test_the_loop_equals_a_naive_loop(data):
    w_ref, losses, sizes, empty = naive(data)
    assert empty >= 1  # q·n = 1: this seed draws empty batches, which still count as noised steps
    w, loop, seen = run_loop(data)
    assert torch.equal(w, w_ref)
    assert loop.curves == {"losses": losses, "sizes": sizes} and loop.empty == empty
    assert seen == [(t, t) for t in range(T)]  # values that are no curve reach on_step only
    assert loop.resumed_from_step is None and loop.wall_time_s >= 0


@pytest.mark.parametrize("extra", [False, True])
def test_a_crashed_loop_resumes_bit_identical(tmp_path, data, extra):
    w_ref, losses, sizes, empty = naive(data, extra=extra)
    ck = Checkpointer(tmp_path / "ck", 3)
    with pytest.raises(Crash):
        run_loop(data, checkpoint=ck, crash_at=7, extra=extra)
    assert [p.name for p in ck.checkpoints()] == ["step-000000006"]
    w, loop, seen = run_loop(data, checkpoint=ck, extra=extra)
    assert loop.resumed_from_step == 6 and [t for t, _ in seen] == [6, 7, 8]
    assert torch.equal(w, w_ref)
    assert loop.curves == {"losses": losses, "sizes": sizes} and loop.empty == empty
    assert not (tmp_path / "ck").exists()


def test_a_checkpoint_without_the_runs_extra_state_is_an_error(tmp_path, data):
    ck = Checkpointer(tmp_path / "ck", 3)
    with pytest.raises(Crash):
        run_loop(data, checkpoint=ck, crash_at=4, extra=False)
    with pytest.raises(ValueError, match="the extra state is missing, the run has extra_state"):
        run_loop(data, checkpoint=ck, extra=True)


def test_user_sampling_selects_the_sampled_units_records_step_by_step():
    ids = torch.arange(12).reshape(6, 2)
    owner = torch.tensor([0, 0, 1, 2, 2, 2])
    calls = []

    def select(step, units):
        calls.append(step)
        rows = torch.nonzero(torch.isin(owner, units)).flatten()
        return ids[rows], torch.ones_like(ids[rows]), owner[rows]

    sampling = UserSampling(3, 0.5, select)
    gen = torch.Generator().manual_seed(3)
    batches = list(sampling.batches(gen, start=2, steps=6))
    assert calls == [2, 3, 4, 5]
    again = [torch.nonzero(torch.rand(3, generator=g) < 0.5).flatten()
             for g in [torch.Generator().manual_seed(3)] for _ in range(4)]
    assert [b.units.tolist() for b in batches] == [u.tolist() for u in again]
    assert all(set(b.unit_ids.tolist()) <= set(b.units.tolist()) for b in batches)

    def stray(step, units):
        return ids[:1], torch.ones_like(ids[:1]), torch.tensor([5])

    with pytest.raises(ValueError, match="records of units that were not sampled at step 0"):
        list(UserSampling(3, 1.0, stray).batches(torch.Generator(), start=0, steps=1))


def test_bad_input():
    with pytest.raises(ValueError, match=r"steps: out of range \(got 0; allowed: an integer >= 1\)"):
        DPLoop(sampling=RecordSampling(N, Q), steps=0, curves=("losses",))
    with pytest.raises(ValueError, match="curves must name at least the loss curve"):
        DPLoop(sampling=RecordSampling(N, Q), steps=1, curves=())
    with pytest.raises(ValueError, match=r"start \(at most steps\): out of range "
                                         r"\(got 4; allowed: an integer in \[0, 3\]\)"):
        RecordSampling(N, Q).batches(torch.Generator(), start=4, steps=3)
    assert math.isclose(RecordSampling(N, Q).expected_batch_size, 1.0)
