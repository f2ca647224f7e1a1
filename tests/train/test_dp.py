"""empriv.train.dp: one DP step against a manual reference (sum, clipping, noise, empty batches, micro-batches)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from empriv.config import RunConfig, parse_params
from empriv.models.adapters import prepare_for_finetuning
from empriv.models.lm import encode_fixed, per_sample_mean_nll
from empriv.train.dp import dp_finetune, make_optimizer
from empriv.randomness import RunStreams
from empriv.train.sampling import poisson_batches

EOS = 299
CPU = torch.device("cpu")


def make_params(method: str = "full", **train):
    raw = {
        "data": {"n_train": 1000},
        "train": {"optimizer": "sgd", "clip_norm": 1e6, "micro_batch_size": 64, **train},
        "cube": {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0]},
    }
    return parse_params(raw).for_method(method)  # the method is a cube axis; a run's params name it in train


def make_model(convert: bool = True):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=300, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    return prepare_for_finetuning(model, "full") if convert else model


def make_data(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lists = [torch.randint(0, 299, (int(torch.randint(2, 15, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
    return encode_fixed(lists, EOS, 16)


def _sampler(run: RunConfig) -> torch.Generator:
    """The generator dp_finetune's Poisson sampler draws from: the run's own ``sampler`` stream."""
    return RunStreams.of(run, method="full").generator("sampler")


def first_batch(n: int, run: RunConfig) -> torch.Tensor:
    """The Poisson batch dp_finetune draws at step 0 (from the run's sampler stream)."""
    return next(poisson_batches(n, run.batch_size / n, run.steps, _sampler(run)))


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def per_example_grads(model, ids, mask, batch):
    params = [p for p in model.parameters() if p.requires_grad]
    out = []
    for i in batch.tolist():
        loss = per_sample_mean_nll(model, ids[i : i + 1], mask[i : i + 1])[0]
        out.append(torch.autograd.grad(loss, params))
    return params, out


def manual_dp_sgd_step(model, ids, mask, batch, *, lr, clip, b):
    """Reference: clip each example's gradient (opacus' factor C / (‖g‖ + 1e-6), at most 1), sum, / b, SGD."""
    params, grads = per_example_grads(model, ids, mask, batch)
    total = [torch.zeros_like(p) for p in params]
    norms = []
    for g in grads:
        norm = torch.sqrt(sum((x.double() ** 2).sum() for x in g)).item()
        norms.append(norm)
        factor = min(1.0, clip / (norm + 1e-6))
        for t, x in zip(total, g):
            t.add_(x * factor)
    with torch.no_grad():
        for p, t in zip(params, total):
            p.sub_(lr * t / b)
    return norms


def assert_same_state(a: dict, b: dict, rtol=1e-4, atol=1e-7):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=rtol, atol=atol, msg=lambda m: f"{k}: {m}")


def deltas(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in before}


def test_sigma0_huge_clip_equals_nonprivate_sum_over_b():
    n = 24
    ids, mask = make_data(n)
    run = RunConfig(8.0, 8, 1, 0.5, 3)
    params = make_params(clip_norm=1e6)
    batch = first_batch(n, run)
    assert 3 <= batch.numel() <= 14 and batch.numel() != run.batch_size  # b = expected, not actual, size

    model = make_model()
    reference = copy.deepcopy(model)
    before = state(model)
    res = dp_finetune(model, ids, mask, run=run, noise_multiplier=0.0, params=params, device=CPU)

    loss = per_sample_mean_nll(reference, ids[batch], mask[batch])
    (loss.sum() / run.batch_size).backward()
    with torch.no_grad():
        for p in reference.parameters():
            p.sub_(run.learning_rate * p.grad)
    after = state(model)
    assert_same_state(after, state(reference))
    assert max(float(d.abs().max()) for d in deltas(after, before).values()) > 1e-3  # a real update
    assert res.batch_sizes == [batch.numel()]
    assert res.losses == [pytest.approx(float(loss.detach().mean()), rel=1e-5)]
    assert res.empty_batches == 0


def test_tiny_clip_clips_each_example():
    n = 24
    ids, mask = make_data(n, seed=1)
    run = RunConfig(8.0, 8, 1, 1.0, 5)
    clip = 1e-3
    batch = first_batch(n, run)
    assert batch.numel() >= 3

    model = make_model()
    reference = copy.deepcopy(model)
    unclipped = copy.deepcopy(model)
    before = state(model)
    dp_finetune(model, ids, mask, run=run, noise_multiplier=0.0, params=make_params(clip_norm=clip), device=CPU)
    norms = manual_dp_sgd_step(reference, ids, mask, batch, lr=run.learning_rate, clip=clip, b=run.batch_size)
    manual_dp_sgd_step(unclipped, ids, mask, batch, lr=run.learning_rate, clip=1e9, b=run.batch_size)

    assert min(norms) > 100 * clip  # every example is clipped
    got, want, raw = deltas(state(model), before), deltas(state(reference), before), deltas(state(unclipped), before)
    for k in got:
        torch.testing.assert_close(got[k], want[k], rtol=1e-3, atol=1e-9, msg=lambda m: f"{k}: {m}")
    # the clipped update has norm at most lr * |B| * C / b, far below the unclipped one
    norm = math.sqrt(sum(float((d.double() ** 2).sum()) for k, d in got.items() if k != "lm_head.weight"))
    raw_norm = math.sqrt(sum(float((d.double() ** 2).sum()) for k, d in raw.items() if k != "lm_head.weight"))
    assert norm <= run.learning_rate * batch.numel() * clip / run.batch_size * (1 + 1e-4)
    assert norm > 0.3 * run.learning_rate * clip / run.batch_size
    assert raw_norm > 50 * norm


def test_tiny_clip_on_unconverted_conv1d_model_too():
    """Without the Conv1D → Linear conversion opacus falls back to functorch: same result."""
    n = 16
    ids, mask = make_data(n, seed=2)
    run = RunConfig(8.0, 6, 1, 1.0, 1)
    batch = first_batch(n, run)
    assert batch.numel() >= 2
    model = make_model(convert=False)
    reference = copy.deepcopy(model)
    before = state(model)
    dp_finetune(model, ids, mask, run=run, noise_multiplier=0.0, params=make_params(clip_norm=1e-3), device=CPU)
    manual_dp_sgd_step(reference, ids, mask, batch, lr=run.learning_rate, clip=1e-3, b=run.batch_size)
    got, want = deltas(state(model), before), deltas(state(reference), before)
    for k in got:
        torch.testing.assert_close(got[k], want[k], rtol=1e-3, atol=1e-9, msg=lambda m: f"{k}: {m}")


def _seed_with_empty_first_batch(n, b):
    for seed in range(200):
        if first_batch(n, RunConfig(8.0, b, 1, 0.1, seed)).numel() == 0:
            return seed
    raise AssertionError("no seed with an empty first batch")


def test_empty_batch_with_noise_still_steps_and_is_counted():
    n, b = 400, 1  # q = 0.0025: P(empty) = 0.9975^400 ≈ 0.37
    ids, mask = make_data(n)
    seed = _seed_with_empty_first_batch(n, b)
    run = RunConfig(8.0, b, 1, 0.1, seed)
    sigma, clip = 1.5, 0.2
    model = make_model()
    before = state(model)
    steps = []
    res = dp_finetune(model, ids, mask, run=run, noise_multiplier=sigma, params=make_params(clip_norm=clip),
                      device=CPU, on_step=lambda s, loss, bsz: steps.append((s, bsz)))
    assert res.empty_batches == 1
    assert res.batch_sizes == [0]
    assert len(res.losses) == 1 and math.isnan(res.losses[0])
    assert steps == [(0, 0)]
    d = torch.cat([v.flatten() for k, v in deltas(state(model), before).items() if k != "lm_head.weight"])
    assert bool((d != 0).all())  # noise reached every parameter
    # update = −lr · N(0, σ²C²) / b: standardised deltas are N(0, 1) over ~8k coordinates
    z = d.double() / (run.learning_rate * sigma * clip / b)
    assert d.numel() > 5000
    assert abs(float(z.mean())) < 0.1
    assert float(z.std()) == pytest.approx(1.0, abs=0.05)


def test_empty_batch_nonprivate_is_a_counted_no_op():
    n, b = 400, 1
    ids, mask = make_data(n)
    seed = _seed_with_empty_first_batch(n, b)
    model = make_model()
    before = state(model)
    res = dp_finetune(model, ids, mask, run=RunConfig(math.inf, b, 1, 0.1, seed), noise_multiplier=None,
                      params=make_params(), device=CPU)
    assert res.empty_batches == 1 and res.batch_sizes == [0]
    assert_same_state(state(model), before, rtol=0, atol=0)


def test_exactly_T_steps_with_the_reproduced_poisson_batches():
    n = 30
    ids, mask = make_data(n)
    run = RunConfig(8.0, 5, 7, 0.05, 11)
    calls = []
    res = dp_finetune(make_model(), ids, mask, run=run, noise_multiplier=0.8, params=make_params(clip_norm=1.0),
                      device=CPU, on_step=lambda s, loss, bsz: calls.append((s, bsz)))
    expected = [b.numel() for b in poisson_batches(n, run.batch_size / n, run.steps, _sampler(run))]
    assert len(res.losses) == run.steps == 7
    assert res.batch_sizes == expected
    assert calls == list(enumerate(expected))
    assert res.empty_batches == sum(s == 0 for s in expected)
    assert all((math.isnan(x) if s == 0 else x > 0) for x, s in zip(res.losses, expected))
    assert res.wall_time_s > 0


def test_micro_batching_equals_one_big_batch_when_sigma_0():
    n = 40
    ids, mask = make_data(n, seed=3)
    run = RunConfig(8.0, 20, 2, 0.5, 2)
    batches = list(poisson_batches(n, 0.5, 2, _sampler(run)))
    assert min(b.numel() for b in batches) > 7  # several micro-batches of 3 per step
    results = {}
    for mbs in (64, 3):
        model = make_model()
        res = dp_finetune(model, ids, mask, run=run, noise_multiplier=0.0,
                          params=make_params(clip_norm=0.05, micro_batch_size=mbs), device=CPU)
        results[mbs] = (state(model), res)
    assert_same_state(results[3][0], results[64][0], rtol=1e-4, atol=1e-7)
    assert results[3][1].batch_sizes == results[64][1].batch_sizes == [b.numel() for b in batches]
    assert results[3][1].losses == pytest.approx(results[64][1].losses, rel=1e-5)
    before = state(make_model())
    assert max(float((results[3][0][k] - before[k]).abs().max()) for k in before) > 1e-4


def test_nonprivate_step_is_mean_loss_sgd_and_micro_batching_invariant():
    n = 24
    ids, mask = make_data(n)
    run = RunConfig(math.inf, 8, 1, 0.5, 3)
    batch = first_batch(n, run)
    reference = make_model()
    loss = per_sample_mean_nll(reference, ids[batch], mask[batch]).mean()  # ε = ∞: mean over the actual batch
    loss.backward()
    with torch.no_grad():
        for p in reference.parameters():
            p.sub_(run.learning_rate * p.grad)
    for mbs in (64, 2):
        model = make_model()
        res = dp_finetune(model, ids, mask, run=run, noise_multiplier=None, params=make_params(micro_batch_size=mbs), device=CPU)
        assert_same_state(state(model), state(reference))
        assert res.losses == [pytest.approx(float(loss.detach()), rel=1e-5)]


def test_same_seed_same_noisy_run_different_seed_differs():
    n = 20
    ids, mask = make_data(n)
    out = []
    for seed in (4, 4, 5):
        model = make_model()
        dp_finetune(model, ids, mask, run=RunConfig(8.0, 5, 3, 0.1, seed), noise_multiplier=1.0,
                    params=make_params(clip_norm=0.5, optimizer="adam"), device=CPU)
        out.append(state(model))
    assert_same_state(out[0], out[1], rtol=0, atol=0)
    assert any(not torch.equal(out[0][k], out[2][k]) for k in out[0])


def test_model_left_without_hooks_and_in_eval_mode():
    n = 12
    ids, mask = make_data(n)
    model = make_model()
    dp_finetune(model, ids, mask, run=RunConfig(8.0, 4, 1, 0.1, 0), noise_multiplier=1.0, params=make_params(clip_norm=1.0), device=CPU)
    assert not model.training
    assert all(not m._forward_hooks and not m._backward_hooks for m in model.modules())
    out = model(input_ids=ids[:2]).logits  # still a plain, usable model
    assert out.shape == (2, 16, 300)


def test_make_optimizer():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(make_optimizer("adam", p, 0.1), torch.optim.Adam)
    assert isinstance(make_optimizer("sgd", p, 0.1), torch.optim.SGD)
    with pytest.raises(ValueError, match="train.optimizer must be 'adam' or 'sgd', got 'lamb'"):
        make_optimizer("lamb", p, 0.1)


def test_the_fast_dp_step_trains_the_same_model_as_opacus_within_float_rounding():
    """train.dp_step fast (empriv.models.fast_dp) and opacus (GradSampleModule + DPOptimizer): the same Poisson batches,
    the same noise draws, the same clipped sums — weights equal up to summation order after several steps."""
    import torch

    from empriv.config import RunConfig

    ids, mask = make_data(200, seed=5)
    run = RunConfig(8.0, 16, 4, 0.01, 0)
    out = {}
    for kind in ("fast", "opacus"):
        model = make_model()
        res = dp_finetune(model, ids, mask, run=run, noise_multiplier=1.1, device=CPU,
                          params=make_params(optimizer="adam", clip_norm=0.5, micro_batch_size=5, dp_step=kind))
        assert res.dp_step == kind and res.dp_step_reason is None
        out[kind] = (res, state(model))
    (fast, w_fast), (opac, w_opac) = out["fast"], out["opacus"]
    assert fast.batches == opac.batches and fast.empty_batches == opac.empty_batches
    assert fast.losses == pytest.approx(opac.losses, rel=1e-5)
    for k in w_fast:
        torch.testing.assert_close(w_fast[k], w_opac[k], rtol=1e-4, atol=1e-5)
    base = state(make_model())
    assert any(not torch.allclose(w_fast[k], base[k]) for k in base)  # and it did train


def test_dp_step_auto_falls_back_to_opacus_for_a_module_the_fast_step_cannot_record_and_says_why():
    from empriv.config import RunConfig
    from empriv.models.adaptations import prepare_adaptation

    ids, mask = make_data(64, seed=1)
    run = RunConfig(8.0, 16, 2, 0.01, 0)
    model = prepare_adaptation(make_model(convert=False), "prompt", n_virtual=2, init_seed=0)
    res = dp_finetune(model, ids[:, :12], mask[:, :12], run=run, noise_multiplier=1.0, device=CPU,
                      params=make_params(dp_step="auto"))
    assert res.dp_step == "opacus" and "VirtualTokens" in res.dp_step_reason
    with pytest.raises(ValueError, match="train.dp_step 'fast' cannot record prompt"):
        dp_finetune(prepare_adaptation(make_model(convert=False), "prompt", n_virtual=2, init_seed=0), ids[:, :12],
                    mask[:, :12], run=run, noise_multiplier=1.0, device=CPU, params=make_params(dp_step="fast"))
