"""empriv.train.precision and its use in the DP loop: bf16 autocast with float32 clipping, noise and
weights; unsupported precision/device pairs; the micro-batch halving probe; auto micro-batch sizes."""

from __future__ import annotations

import math

import pytest
import torch

from empriv.config import RunConfig, parse_params
from empriv.models.lm import per_sample_mean_nll
from empriv.train.dp import dp_finetune, memory_probe
from empriv.train.precision import (
    auto_start,
    autocast,
    check_precision,
    cpu_micro_batch_size,
    grad_samples_to_fp32,
    probe_micro_batch_size,
)
from train.test_dp import CPU, assert_same_state, deltas, first_batch, make_data, make_model, state


def make_params(precision: str = "fp32", **train):
    return parse_params({
        "runtime": {"precision": precision},
        "data": {"n_train": 1000},
        "train": {"optimizer": "adam", "clip_norm": 1.0, "micro_batch_size": 64, **train},
        "cube": {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0]},
    })


def make_dropout_model():
    """The tests' tiny GPT-2 with dropout on, so the global RNG matters to the result."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from empriv.models.adapters import prepare_for_finetuning

    config = GPT2Config(vocab_size=300, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    torch.manual_seed(0)
    return prepare_for_finetuning(GPT2LMHeadModel(config), "full")


# --------------------------------------------------------------------------- precision
def test_autocast_really_gives_bf16_per_sample_grads_and_the_cast_makes_them_fp32():
    """Without the cast opacus would clip bf16 per-sample gradients: the cast is doing real work."""
    from opacus import GradSampleModule

    ids, mask = make_data(6)
    model = make_model()
    module = GradSampleModule(model, batch_first=True, loss_reduction="sum")
    with autocast("bf16", CPU):
        losses = per_sample_mean_nll(module, ids, mask)
    assert losses.dtype == torch.float32  # the loss is computed in float32
    losses.sum().backward()
    params = [p for p in model.parameters() if p.requires_grad]
    before = {id(p): p.grad_sample.clone() for p in params}
    assert torch.bfloat16 in {g.dtype for g in before.values()}
    grad_samples_to_fp32(params)
    for p in params:
        assert p.grad_sample.dtype == torch.float32
        assert torch.equal(p.grad_sample, before[id(p)].float())  # exact: bf16 → fp32 loses nothing
    module._close()


def test_fp32_cast_is_a_no_op_that_keeps_the_same_tensors():
    p = torch.nn.Parameter(torch.zeros(3))
    g = torch.randn(2, 3)
    p.grad_sample = g
    grad_samples_to_fp32([p])
    assert p.grad_sample is g
    q = torch.nn.Parameter(torch.zeros(3))
    q.grad_sample = [torch.randn(1, 3, dtype=torch.bfloat16), g]
    grad_samples_to_fp32([q])
    assert [x.dtype for x in q.grad_sample] == [torch.float32, torch.float32] and q.grad_sample[1] is g


def test_bf16_dp_training_on_cpu_hands_fp32_per_sample_grads_to_the_optimizer():
    n = 40
    ids, mask = make_data(n, seed=3)
    run = RunConfig(8.0, 12, 3, 0.01, 1)
    seen = {"before": 0, "after_last": 0, "dtypes": set(), "summed": set(), "grad": set()}

    def inspect(optimizer, phase):
        if phase == "before":
            seen["before"] += 1
            for p in optimizer.params:
                seen["dtypes"].add(p.grad_sample.dtype)
        elif not optimizer._is_last_step_skipped:  # the step's last micro-batch: clipped sum + noise happened
            seen["after_last"] += 1
            for p in optimizer.params:
                seen["summed"].add(p.summed_grad.dtype)  # opacus draws the noise with this dtype
                seen["grad"].add(p.grad.dtype)

    model = make_model()
    res = dp_finetune(model, ids, mask, run=run, noise_multiplier=1.0,
                      params=make_params("bf16", micro_batch_size=4, dp_step="opacus"), device=CPU, inspect_dp_step=inspect)
    assert res.precision == "bf16" and res.micro_batch_size == 4
    assert seen["before"] >= run.steps + 3  # several micro-batches per step, each inspected
    assert seen["after_last"] == run.steps
    assert seen["dtypes"] == seen["summed"] == seen["grad"] == {torch.float32}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # final weights fp32
    assert all(math.isfinite(x) for x in res.losses)


def _seed_with_empty_first_batch(n, b):
    for seed in range(200):
        if first_batch(n, RunConfig(8.0, b, 1, 0.1, seed)).numel() == 0:
            return seed
    raise AssertionError("no seed with an empty first batch")


def test_noise_of_a_bf16_run_is_float32_at_full_resolution():
    # Empty Poisson batch, b = 1: the privatised gradient is exactly the noise N(0, σ²C²).
    n, b, sigma, clip = 400, 1, 1.5, 0.2
    ids, mask = make_data(n)
    run = RunConfig(8.0, b, 1, 0.1, _seed_with_empty_first_batch(n, b))
    noise = []

    def inspect(optimizer, phase):
        if phase == "after":
            noise.extend(p.grad.detach().clone() for p in optimizer.params)

    res = dp_finetune(make_model(), ids, mask, run=run, noise_multiplier=sigma, device=CPU, inspect_dp_step=inspect,
                      params=make_params("bf16", clip_norm=clip, optimizer="sgd", dp_step="opacus"))
    assert res.batch_sizes == [0]
    z = torch.cat([x.flatten() for x in noise])
    assert {x.dtype for x in noise} == {torch.float32}
    assert z.numel() > 5000
    # bf16 keeps 8 significant bits: bf16-drawn noise would be on the bf16 grid; float32 draws almost never are.
    on_bf16_grid = float((z.to(torch.bfloat16).float() == z).float().mean())
    assert on_bf16_grid < 0.01
    assert float((z / (sigma * clip)).std()) == pytest.approx(1.0, abs=0.05)


def test_bf16_loss_curve_is_close_to_fp32():
    """Same streams (Poisson batches, noise), σ = 0.5: the bf16 curve tracks the fp32 one.

    Tolerance: bf16 autocast rounds each matmul input to 8 significant bits (relative 2⁻⁹ ≈ 0.2%);
    this model's logits are O(0.1–1), so a token's NLL moves by ~1e-3 nats at most and the per-step
    mean by less; weights stay fp32 so the error does not compound much over 12 steps. A relative
    1e-3 (≈ 0.006 nats at a loss of 5.7) is therefore generous for correct bf16 (measured: ~4e-5) —
    yet tight enough to fail if the noise were drawn differently: a run with another noise draw
    (another seed) departs by more than that, checked below.
    """
    n = 64
    ids, mask = make_data(n, seed=4)
    run = RunConfig(8.0, 16, 12, 0.003, 0)
    curves = {}
    for precision in ("fp32", "bf16"):
        res = dp_finetune(make_model(), ids, mask, run=run, noise_multiplier=0.5, params=make_params(precision), device=CPU)
        curves[precision] = res.losses
    fp32, bf16 = curves["fp32"], curves["bf16"]
    assert bf16 != fp32  # autocast did change the arithmetic
    assert bf16 == pytest.approx(fp32, rel=1e-3)
    assert fp32[-1] < fp32[0] - 0.02  # a real training curve
    other = dp_finetune(make_model(), ids, mask, run=RunConfig(8.0, 16, 12, 0.003, 1), noise_multiplier=0.5,
                        params=make_params("fp32"), device=CPU).losses
    assert other != pytest.approx(fp32, rel=1e-3)


def test_unsupported_precision_device_pairs_raise_one_clear_line():
    check_precision("fp32", CPU)
    check_precision("bf16", CPU)
    check_precision("fp32", torch.device("cuda"))  # fp32 is never refused (availability is resolve_device's job)
    if not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
        with pytest.raises(ValueError, match=r"^runtime\.precision 'bf16' is not supported on device 'cuda:1': "
                                             r"torch\.cuda\.is_bf16_supported\(\) is False") as info:
            check_precision("bf16", torch.device("cuda:1"))
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"runtime\.precision 'bf16' is not supported on device 'mps'.*cpu and cuda only"):
        check_precision("bf16", torch.device("mps"))
    with pytest.raises(ValueError, match=r"runtime\.precision must be one of fp32, bf16, got 'fp16'"):
        check_precision("fp16", CPU)
    with pytest.raises(ValueError, match=r"runtime\.precision must be one of fp32, bf16, got 'fp16'"):
        autocast("fp16", CPU)


@pytest.mark.optional(reason="a device with bf16 cannot show the refusal")
@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.is_bf16_supported(), reason="needs a device without bf16")
def test_dp_finetune_refuses_bf16_on_such_a_device_before_any_work():
    model = make_model()
    before = state(model)
    ids, mask = make_data(10)
    with pytest.raises(ValueError, match=r"runtime\.precision 'bf16' is not supported on device 'cuda'"):
        dp_finetune(model, ids, mask, run=RunConfig(8.0, 4, 1, 0.1, 0), noise_multiplier=1.0,
                    params=make_params("bf16"), device=torch.device("cuda"))
    assert_same_state(state(model), before, rtol=0, atol=0)


def test_bf16_refuses_non_fp32_master_weights():
    model = make_model().to(torch.bfloat16)
    ids, mask = make_data(10)
    with pytest.raises(ValueError, match=r"runtime\.precision 'bf16' keeps float32 master weights.*torch\.bfloat16"):
        dp_finetune(model, ids, mask, run=RunConfig(8.0, 4, 1, 0.1, 0), noise_multiplier=1.0,
                    params=make_params("bf16"), device=CPU)


# --------------------------------------------------------------------------- micro-batch size
class MemoryLimit:
    """A ``try_batch`` whose device fits at most ``limit`` examples: the probe's input, not a mock."""

    def __init__(self, limit: int):
        self.limit, self.calls = limit, []

    def __call__(self, m: int) -> None:
        self.calls.append(m)
        if m > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory (simulated: {m} > {self.limit})")


@pytest.mark.parametrize("start, limit, chosen, calls", [
    (256, 1000, 256, [256]),
    (256, 40, 32, [256, 128, 64, 32]),
    (256, 32, 32, [256, 128, 64, 32]),
    (128, 1, 1, [128, 64, 32, 16, 8, 4, 2, 1]),
    (100, 60, 50, [100, 50]),
    (1, 1, 1, [1]),
])
def test_probe_halves_to_the_largest_size_that_fits(start, limit, chosen, calls):
    try_batch = MemoryLimit(limit)
    assert probe_micro_batch_size(try_batch, start, device="cpu") == chosen
    assert try_batch.calls == calls


def test_probe_errors_clearly_when_not_even_one_example_fits():
    try_batch = MemoryLimit(0)
    with pytest.raises(torch.OutOfMemoryError, match=r"train\.micro_batch_size auto: even a micro-batch of 1 example "
                                                     r"does not fit in memory on cuda:0 \(tried 8, 4, 2, 1\)"):
        probe_micro_batch_size(try_batch, 8, device="cuda:0")
    assert try_batch.calls == [8, 4, 2, 1]


def test_probe_lets_other_errors_through():
    def broken(m):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        probe_micro_batch_size(broken, 64)
    with pytest.raises(ValueError, match=r"start: out of range \(got 0; allowed: an integer >= 1\)"):
        probe_micro_batch_size(MemoryLimit(4), 0)


def test_auto_start_and_cpu_estimate():
    assert [auto_start(b) for b in (1, 2, 3, 64, 100, 128, 129, 256, 1024, 5000)] == [1, 2, 4, 64, 128, 128, 256, 256, 256, 256]
    assert cpu_micro_batch_size(256, 0, None) == 64
    assert cpu_micro_batch_size(16, 10**9, None) == 16
    assert cpu_micro_batch_size(256, 10**6, 10**7) == 8  # 8 × 1 MB ≤ 10 MB < 16 × 1 MB
    assert cpu_micro_batch_size(256, 10**9, 10**7) == 1


def test_memory_probe_runs_a_real_step_and_leaves_no_state():
    from opacus import GradSampleModule

    model = make_model()
    module = GradSampleModule(model, batch_first=True, loss_reduction="sum")
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = state(model)
    try_batch = memory_probe(module, trainable, private=True, optimizer_name="adam", seq_len=16, precision="bf16",
                             device=CPU)
    try_batch(5)
    assert all(p.grad is None and getattr(p, "grad_sample", None) is None for p in trainable)
    assert not any(hasattr(m, "activations") or hasattr(m, "max_batch_len") for m in module.modules())
    assert_same_state(state(model), before, rtol=0, atol=0)
    # a real per-sample backward ran: opacus' hooks saw it (a second call works the same way)
    try_batch(3)
    module._close()


def _train(factory, setting, probe, ids, mask, run):
    model = factory()
    res = dp_finetune(model, ids, mask, run=run, noise_multiplier=1.0, device=CPU, probe_memory=probe,
                      params=make_params(clip_norm=0.5, micro_batch_size=setting))
    return state(model), res


def test_probed_auto_micro_batch_equals_the_fixed_size_it_chose_bit_for_bit():
    """σ > 0, dropout on: ``auto`` probed with real forward + backward passes (as on CUDA) gives the
    same weights as a fixed micro-batch of the size it chose — the probe consumes no random draw of
    the run and leaves no gradient or opacus activation behind."""
    n = 60
    ids, mask = make_data(n, seed=5)
    run = RunConfig(8.0, 20, 3, 0.01, 2)
    auto_state, auto_res = _train(make_dropout_model, "auto", True, ids, mask, run)
    fixed_state, fixed_res = _train(make_dropout_model, 32, None, ids, mask, run)
    assert auto_res.micro_batch_size == auto_start(20) == 32
    assert_same_state(auto_state, fixed_state, rtol=0, atol=0)
    assert auto_res.losses == fixed_res.losses
    before = state(make_dropout_model())
    assert max(float(d.abs().max()) for d in deltas(auto_state, before).values()) > 1e-3  # a real update


def test_auto_micro_batch_equals_a_small_fixed_micro_batch_with_noise():
    """σ > 0, same streams (no dropout: its draws depend on the micro-batch shapes): auto (32) and a
    fixed micro-batch of 3 give the same weights up to float summation order — the Poisson batches
    and the one noise draw per logical step do not depend on the micro-batch."""
    n = 60
    ids, mask = make_data(n, seed=5)
    run = RunConfig(8.0, 20, 3, 0.01, 2)
    auto_state, auto_res = _train(make_model, "auto", True, ids, mask, run)
    small_state, small_res = _train(make_model, 3, None, ids, mask, run)
    assert (auto_res.micro_batch_size, small_res.micro_batch_size) == (32, 3)
    assert max(small_res.batch_sizes) > 6  # several micro-batches of 3 per step
    assert auto_res.batch_sizes == small_res.batch_sizes
    assert_same_state(auto_state, small_state, rtol=1e-4, atol=1e-6)
    assert auto_res.losses == pytest.approx(small_res.losses, rel=1e-5)
    before = state(make_model())
    assert max(float(d.abs().max()) for d in deltas(small_state, before).values()) > 1e-3  # a real update


def test_auto_micro_batch_on_cpu_is_the_estimate_and_is_recorded():
    ids, mask = make_data(30)
    res = dp_finetune(make_model(), ids, mask, run=RunConfig(8.0, 10, 1, 0.01, 0), noise_multiplier=1.0,
                      params=make_params(micro_batch_size="auto"), device=CPU)
    assert res.micro_batch_size == min(64, auto_start(10)) == 16
    res = dp_finetune(make_model(), ids, mask, run=RunConfig(math.inf, 10, 1, 0.01, 0), noise_multiplier=None,
                      params=make_params(micro_batch_size=7), device=CPU)
    assert res.micro_batch_size == 7 and res.precision == "fp32"


def test_the_fast_dp_step_under_bf16_keeps_fp32_gradients_noise_and_weights():
    n = 40
    ids, mask = make_data(n, seed=3)
    run = RunConfig(8.0, 12, 3, 0.01, 1)
    seen = []
    model = make_model()
    res = dp_finetune(model, ids, mask, run=run, noise_multiplier=1.0,
                      params=make_params("bf16", micro_batch_size=4, dp_step="fast"), device=CPU,
                      inspect_dp_step=lambda stats, phase: seen.append((phase, stats.per_sample_norms.dtype)))
    assert res.dp_step == "fast" and res.precision == "bf16"
    assert seen == [("fast", torch.float32)] * run.steps
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert all(math.isfinite(x) for x in res.losses)
