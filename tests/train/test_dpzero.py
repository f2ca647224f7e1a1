"""empriv.train.dpzero: soft-prompt losses, the DPZero estimator (exact on quadratics, clipping, noise),
the MeZO path against a naive in-place MeZO loop, determinism, frozen weights, learning, accounting."""

from __future__ import annotations

import math

import pytest
import torch

from empriv.models.lm import encode_fixed, per_sample_mean_nll
from empriv.privacy.accounting import calibrate_noise_multiplier, epsilon_for
from empriv.train.dpzero import (
    DIRECTION_STREAM,
    calibrate_dpzero,
    dpzero_epsilon,
    dpzero_prompt_tuning,
    dpzero_step,
    dpzero_streams,
    finite_differences,
    init_soft_prompt,
    privatize_finite_differences,
    soft_prompt_losses,
)
from empriv.train.sampling import poisson_batches
from tiny_models import tiny_gpt2, train_on_sequences

EOS = 299


def toy_data(n: int = 12, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lists = [torch.randint(0, 299, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
             for _ in range(n)]
    return encode_fixed(lists, EOS, 10)


def quadratic_losses(n: int = 5, shape=(3, 4), seed: int = 0):
    """Per-sample L_i(θ) = ½ vec(θ)ᵀ A_i vec(θ) + b_iᵀ vec(θ) (float64) and its gradients."""
    g = torch.Generator().manual_seed(seed)
    k = math.prod(shape)
    m = torch.randn((n, k, k), generator=g, dtype=torch.float64)
    a = m @ m.transpose(1, 2) / k
    b = torch.randn((n, k), generator=g, dtype=torch.float64)

    def loss(theta):
        v = theta.reshape(-1).double()
        return 0.5 * torch.einsum("i,nij,j->n", v, a, v) + b @ v

    def grads(theta):
        v = theta.reshape(-1).double()
        return torch.einsum("nij,j->ni", a, v) + b

    return loss, grads


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ----------------------------------------------------------------------------- soft prompt


def test_soft_prompt_of_token_embeddings_equals_those_tokens_as_hard_prefix():
    model = tiny_gpt2(n_positions=16)
    ids, mask = toy_data()
    prompt_tokens = [7, 42, 101]
    prompt = init_soft_prompt(model, 3, token_ids=prompt_tokens)
    assert torch.equal(prompt, model.transformer.wte.weight[prompt_tokens].detach())
    soft = soft_prompt_losses(model, prompt, ids, mask, micro_batch_size=5)  # chunks of 5, 5, 2
    hard_ids = torch.cat([torch.tensor(prompt_tokens).expand(ids.shape[0], -1), ids], dim=1)
    hard_mask = torch.cat([torch.zeros(ids.shape[0], 3), mask], dim=1)
    with torch.no_grad():
        hard = per_sample_mean_nll(model, hard_ids, hard_mask)
    assert soft.shape == (ids.shape[0],)
    torch.testing.assert_close(soft, hard, rtol=1e-5, atol=1e-5)
    # padding carries no loss: the same records padded further score the same
    ids_long, mask_long = encode_fixed([[5, 6, 7]], EOS, 12)
    ids_short, mask_short = encode_fixed([[5, 6, 7]], EOS, 4)
    torch.testing.assert_close(soft_prompt_losses(model, prompt, ids_long, mask_long),
                               soft_prompt_losses(model, prompt, ids_short, mask_short), rtol=1e-5, atol=1e-6)


def test_random_prompt_is_seeded_and_on_the_embedding_scale():
    model = tiny_gpt2()
    a = init_soft_prompt(model, 4, generator=torch.Generator().manual_seed(3))
    b = init_soft_prompt(model, 4, generator=torch.Generator().manual_seed(3))
    c = init_soft_prompt(model, 4, generator=torch.Generator().manual_seed(4))
    assert a.shape == (4, 16) and torch.equal(a, b) and not torch.equal(a, c)
    scale = float(model.transformer.wte.weight.detach().std())
    assert 0.5 * scale < float(a.std()) < 2 * scale


# ----------------------------------------------------------------------------- estimator


@pytest.mark.parametrize("mu", [1e-3, 0.7])
def test_central_difference_is_the_directional_derivative_on_a_quadratic(mu):
    loss, grads = quadratic_losses()
    theta = torch.randn((3, 4), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    z = torch.randn((3, 4), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    fd = finite_differences(loss, theta, z, mu)
    expected = grads(theta) @ z.reshape(-1)
    # exact for quadratics even at a large μ (a forward difference would be off by μ/2·zᵀA_i z)
    torch.testing.assert_close(fd.d, expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(fd.loss_plus, loss(theta + mu * z))


def test_dpzero_step_matches_a_hand_computed_update():
    loss, grads = quadratic_losses(n=6)
    theta = torch.randn((3, 4), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    clip, sigma, b, lr, mu = 2.0, 0.8, 4.0, 0.05, 1e-3
    new, facts = dpzero_step(loss, theta, learning_rate=lr, mu=mu, clip_norm=clip, noise_multiplier=sigma,
                             expected_batch_size=b, direction_generator=torch.Generator().manual_seed(10),
                             noise_generator=torch.Generator().manual_seed(11))
    z = torch.randn((3, 4), generator=torch.Generator().manual_seed(10)).double()  # drawn in float32
    d = grads(theta) @ z.reshape(-1)
    noise = float(torch.randn((), generator=torch.Generator().manual_seed(11), dtype=torch.float64))
    g_hat = (float(d.clamp(-clip, clip).sum()) + sigma * clip * noise) / b
    assert facts.projected_gradient == pytest.approx(g_hat, rel=1e-8)
    assert facts.batch_size == 6
    assert facts.clipped_fraction == pytest.approx(float((d.abs() > clip).double().mean()))
    assert 0 < facts.clipped_fraction < 1  # the case exercises both sides of the clip
    torch.testing.assert_close(new, theta - lr * g_hat * z, rtol=1e-9, atol=1e-9)
    assert not torch.equal(new, theta)


def test_clipping_bounds_each_samples_contribution_to_c():
    clip, b = 1.5, 10.0
    others = torch.tensor([0.3, -0.7, 1.2], dtype=torch.float64)
    for huge in (1e9, -1e9, 7.0):
        with_record = torch.cat([others, torch.tensor([huge], dtype=torch.float64)])
        g_with, frac = privatize_finite_differences(with_record, clip_norm=clip, noise_multiplier=0.0,
                                                    expected_batch_size=b, generator=torch.Generator())
        g_without, _ = privatize_finite_differences(others, clip_norm=clip, noise_multiplier=0.0,
                                                    expected_batch_size=b, generator=torch.Generator())
        # add/remove of one record moves the released sum by exactly ±C here, never more
        assert (g_with - g_without) * b == pytest.approx(math.copysign(clip, huge), abs=1e-12)
        assert frac == pytest.approx(0.25)
    # through a real step: a sample whose loss difference is enormous still contributes exactly C
    base_loss, _ = quadratic_losses(n=3)
    theta = torch.zeros((3, 4), dtype=torch.float64)

    def with_outlier(t):
        return torch.cat([base_loss(t), 1e8 * t.sum().reshape(1)])

    kw = dict(learning_rate=0.1, mu=1e-3, clip_norm=clip, noise_multiplier=0.0, expected_batch_size=b,
              noise_generator=torch.Generator())
    _, f_with = dpzero_step(with_outlier, theta, direction_generator=torch.Generator().manual_seed(5), **kw)
    _, f_without = dpzero_step(base_loss, theta, direction_generator=torch.Generator().manual_seed(5), **kw)
    z_sum = float(torch.randn((3, 4), generator=torch.Generator().manual_seed(5)).sum())
    assert (f_with.projected_gradient - f_without.projected_gradient) * b == pytest.approx(
        math.copysign(clip, z_sum), abs=1e-9)


def test_noise_is_scalar_gaussian_with_std_sigma_c_on_the_sum():
    sigma, clip, b = 1.5, 2.0, 10.0
    d = torch.tensor([0.5, -3.0, 9.0], dtype=torch.float64)  # clipped sum = 0.5 − 2 + 2 = 0.5
    gen = torch.Generator().manual_seed(123)
    draws = torch.tensor([privatize_finite_differences(d, clip_norm=clip, noise_multiplier=sigma,
                                                       expected_batch_size=b, generator=gen)[0]
                          for _ in range(20000)], dtype=torch.float64)
    noise = draws * b - 0.5
    # standard errors: mean σC/√n ≈ 0.021, std ≈ 0.7 % of σC; the bounds are > 5 standard errors wide,
    # and far from the wrong scalings σC/b = 0.3 or σC·b = 30
    assert abs(float(noise.mean())) < 0.12
    assert float(noise.std()) == pytest.approx(sigma * clip, rel=0.04)
    # the noise is one scalar per step: a Gaussian's fourth moment, not a sum of a few draws
    kurtosis = float(((noise - noise.mean()) ** 4).mean() / noise.var() ** 2)
    assert kurtosis == pytest.approx(3.0, abs=0.15)


def test_mezo_path_does_not_clip_or_noise_and_averages_over_the_realised_batch():
    d = torch.tensor([100.0, -2.0, 5.0], dtype=torch.float64)
    g, frac = privatize_finite_differences(d, clip_norm=1.0, noise_multiplier=None, expected_batch_size=50.0,
                                           generator=None)
    assert g == pytest.approx(103.0 / 3) and frac == 0.0
    assert privatize_finite_differences(torch.zeros(0), clip_norm=None, noise_multiplier=None,
                                        expected_batch_size=1.0, generator=None) == (0.0, 0.0)


# ----------------------------------------------------------------------------- training loop


def naive_mezo(model, ids, mask, *, n_prompt, steps, sample_rate, learning_rate, mu, seed):
    """MeZO as published: perturb θ in place (+μz, −2μz, +μz) with the batch-mean loss, then θ −= η·g·z."""
    streams = dpzero_streams(seed)
    theta = init_soft_prompt(model, n_prompt, generator=streams.generator("init"))
    directions = streams.generator(DIRECTION_STREAM)
    sizes = []
    for batch in poisson_batches(ids.shape[0], sample_rate, steps, streams.generator("sampler")):
        z = torch.randn(theta.shape, generator=directions)
        sizes.append(int(batch.numel()))
        if batch.numel() == 0:
            continue
        theta += mu * z
        plus = soft_prompt_losses(model, theta, ids[batch], mask[batch]).double().mean()
        theta -= 2 * mu * z
        minus = soft_prompt_losses(model, theta, ids[batch], mask[batch]).double().mean()
        theta += mu * z
        theta -= learning_rate * float((plus - minus) / (2 * mu)) * z
    return theta, sizes


def test_non_private_path_equals_plain_mezo():
    model = tiny_gpt2(n_positions=16)
    ids, mask = toy_data(20)
    # μ is large enough that the float32 losses resolve the difference (the random model barely reacts)
    kw = dict(n_prompt=3, steps=8, sample_rate=0.3, learning_rate=0.5, mu=0.3, seed=4)
    prompt, result = dpzero_prompt_tuning(model, ids, mask, clip_norm=None, noise_multiplier=None, **kw)
    ref, sizes = naive_mezo(model, ids, mask, **kw)
    assert result.batch_sizes == sizes and not result.private
    assert result.clipped_fractions == [0.0] * 8
    start = init_soft_prompt(model, 3, generator=dpzero_streams(4).generator("init"))
    moved = float((ref - start).abs().max())
    assert moved > 1e-2  # it moved
    assert float((prompt - ref).abs().max()) < 1e-3 * moved


def test_same_seed_same_run_other_seed_other_run():
    model = tiny_gpt2(n_positions=16)
    ids, mask = toy_data(16)
    kw = dict(n_prompt=2, steps=6, sample_rate=0.4, learning_rate=0.1, mu=1e-2, clip_norm=0.5, noise_multiplier=1.0)
    p1, r1 = dpzero_prompt_tuning(model, ids, mask, seed=7, **kw)
    p2, r2 = dpzero_prompt_tuning(model, ids, mask, seed=7, **kw)
    p3, r3 = dpzero_prompt_tuning(model, ids, mask, seed=8, **kw)
    assert torch.equal(p1, p2)
    assert r1.projected_gradients == r2.projected_gradients and r1.batch_sizes == r2.batch_sizes
    assert r1.losses == pytest.approx(r2.losses, nan_ok=True)
    assert not torch.equal(p1, p3) and r1.projected_gradients != r3.projected_gradients
    assert r1.streams["seed"] == 7 and r1.streams["noise"] != r3.streams["noise"]


def test_model_weights_stay_frozen_and_unchanged():
    model = tiny_gpt2(n_positions=16)
    model.train()
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    before = state(model)
    ids, mask = toy_data(16)
    prompt, result = dpzero_prompt_tuning(model, ids, mask, n_prompt=4, steps=5, sample_rate=0.5,
                                          learning_rate=0.1, mu=1e-2, clip_norm=1.0, noise_multiplier=1.0, seed=0)
    after = state(model)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert all(p.grad is None for p in model.parameters())
    assert model.training  # mode restored
    assert result.trainable_parameters == 4 * 16 == prompt.numel()
    assert not prompt.requires_grad


def test_private_run_divides_by_the_expected_batch_size_and_steps_on_empty_batches():
    model = tiny_gpt2(n_positions=16)
    ids, mask = toy_data(10)
    # q·n = 1e-4: every Poisson batch is empty, yet each step adds noise, moves θ and counts
    start = init_soft_prompt(model, 2, generator=dpzero_streams(0).generator("init"))
    prompt, r = dpzero_prompt_tuning(model, ids, mask, n_prompt=2, steps=5, sample_rate=1e-5, learning_rate=0.1,
                                     mu=1e-2, clip_norm=1.0, noise_multiplier=1.0, seed=0)
    assert r.batch_sizes == [0] * 5 and r.empty_batches == 5 and all(math.isnan(x) for x in r.losses)
    assert not torch.equal(prompt, start)
    # the same without privacy: an empty batch leaves θ where it was
    prompt, r = dpzero_prompt_tuning(model, ids, mask, n_prompt=2, steps=5, sample_rate=1e-5, learning_rate=0.1,
                                     mu=1e-2, clip_norm=None, noise_multiplier=None, seed=0)
    assert torch.equal(prompt, start) and r.projected_gradients == [0.0] * 5
    # a large σ makes the clipped sum (at most |B|·C) negligible: ĝ ≈ noise / (q·n), std σC/b, b = 0.5·10 = 5
    sigma, clip = 50.0, 1e-6
    prompt, r = dpzero_prompt_tuning(model, ids, mask, n_prompt=2, steps=300, sample_rate=0.5, learning_rate=1e-3,
                                     mu=1e-2, clip_norm=clip, noise_multiplier=sigma, seed=1)
    assert r.expected_batch_size == 5.0 and sum(r.batch_sizes) > 0
    assert r.clipped_fractions and max(r.clipped_fractions) > 0.5
    std = float(torch.tensor(r.projected_gradients).std())
    assert std == pytest.approx(sigma * clip / 5.0, rel=0.2)  # standard error ≈ 4 %; σC/b² or σC/|B| would fail


@pytest.fixture(scope="module")
def pretrained_tiny():
    """A tiny GPT-2 pre-trained on four repetitive 'tasks', each announced by a task token (200 + t)."""
    torch.manual_seed(0)
    model = tiny_gpt2(n_positions=24)

    def doc(t, s):
        return [10 + 6 * t + (s + j * (t + 1)) % 6 for j in range(10)]

    train_on_sequences(model, [[200 + t] + doc(t, s) for t in range(4) for s in range(6)], EOS, 100)
    return model, [doc(0, s) for s in range(6)] * 4


def test_mezo_prompt_tuning_lowers_the_loss_of_a_tiny_gpt2(pretrained_tiny):
    model, seqs = pretrained_tiny
    ids, mask = encode_fixed(seqs, EOS, 11)  # task 0 without its task token: the prompt must stand in for it
    start = init_soft_prompt(model, 2, generator=dpzero_streams(0).generator("init"))
    before = float(soft_prompt_losses(model, start, ids, mask).mean())
    prompt, r = dpzero_prompt_tuning(model, ids, mask, n_prompt=2, steps=50, sample_rate=0.5, learning_rate=0.3,
                                     mu=1e-2, clip_norm=None, noise_multiplier=None, seed=0)
    after = float(soft_prompt_losses(model, prompt, ids, mask).mean())
    assert after < 0.75 * before, (before, after)  # measured 0.84 → 0.48 nats
    assert len(r.losses) == 50 and r.wall_time_s > 0


# ----------------------------------------------------------------------------- accounting


@pytest.mark.parametrize("accountant", ["prv", "rdp"])
def test_calibration_meets_epsilon_and_equals_dp_sgd(accountant):
    eps, delta, q, steps = 3.0, 1e-5, 0.02, 300
    cal = calibrate_dpzero(eps, delta, q, steps, accountant=accountant)
    assert cal.accountant == accountant and cal.noise_multiplier > 0
    achieved = epsilon_for(cal.noise_multiplier, q, steps, delta, accountant)
    assert achieved <= eps * (1 + 1e-9)
    assert dpzero_epsilon(cal.noise_multiplier, q, steps, delta, accountant) == achieved
    # the smallest such σ: 1 % less noise breaks the target
    assert epsilon_for(cal.noise_multiplier * 0.99, q, steps, delta, accountant) > eps
    sgd = calibrate_noise_multiplier(eps, delta, q, steps, accountant, cache=False)
    assert cal.noise_multiplier == sgd.noise_multiplier


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mu": 0.0}, "mu: out of range (got 0.0; allowed: a finite number > 0)"),
        ({"mu": -1e-3}, "mu: out of range (got -0.001; allowed: a finite number > 0)"),
        ({"clip_norm": 0.0}, "clip_norm: out of range (got 0.0; allowed: a finite number > 0)"),
        ({"clip_norm": -1.0}, "clip_norm: out of range (got -1.0; allowed: a finite number > 0)"),
        ({"n_prompt": 0}, "n_prompt: out of range (got 0; allowed: an integer >= 1)"),
        ({"sample_rate": 0.0}, "sample_rate: out of range (got 0.0; allowed: a finite number in (0, 1])"),
        ({"sample_rate": 1.5}, "sample_rate: out of range (got 1.5; allowed: a finite number in (0, 1])"),
        ({"steps": 0}, "steps: out of range (got 0; allowed: an integer >= 1)"),
        ({"noise_multiplier": -1.0},
         "noise_multiplier (None: non-private MeZO): out of range (got -1.0; allowed: a finite number >= 0)"),
        ({"n_prompt": 7}, "n_prompt + sequence length = 7 + 10 = 17 exceeds the model's 16 positions"),
    ],
)
def test_bad_input_raises_one_line_value_error(change, message):
    model = tiny_gpt2(n_positions=16)
    ids, mask = toy_data(4)
    kw = dict(n_prompt=2, steps=3, sample_rate=0.5, learning_rate=0.1, mu=1e-2, clip_norm=1.0,
              noise_multiplier=1.0, seed=0)
    kw.update(change)
    with pytest.raises(ValueError) as info:
        dpzero_prompt_tuning(model, ids, mask, **kw)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_prompt_inputs():
    model = tiny_gpt2()
    with pytest.raises(ValueError, match=r"token_ids must hold n_prompt=3 ids, got 2"):
        init_soft_prompt(model, 3, token_ids=[1, 2])
    with pytest.raises(ValueError, match=r"token_ids must lie in \[0, 300\)"):
        init_soft_prompt(model, 2, token_ids=[1, 300])
    ids, mask = toy_data(2)
    with pytest.raises(ValueError, match=r"prompt must have shape \[n_prompt >= 1, 16\]"):
        soft_prompt_losses(model, torch.zeros(2, 8), ids, mask)


# ----------------------------------------------------------------------------- checkpoint and resume


class _Crash(RuntimeError):
    pass


@pytest.mark.parametrize("kd", [False, True])
def test_a_crashed_run_resumes_from_its_checkpoint_bit_identical(tmp_path, kd):
    """Crash after step 5 of 9 with a checkpoint every 2 steps, re-run: it resumes at step 4 and ends with the
    uninterrupted run's prompt, curves and released scalars (each step taken once); the checkpoints are gone."""
    from empriv.train.checkpoint import Checkpointer

    model = tiny_gpt2(n_positions=16)
    ids, mask = toy_data(16)
    kw = dict(n_prompt=2, steps=9, sample_rate=0.4, learning_rate=0.1, mu=1e-2, clip_norm=0.5, noise_multiplier=1.0,
              seed=3)
    if kd:
        kw.update(kd_target=torch.full((2, model.get_input_embeddings().weight.shape[1]), 0.01), kd_lambda=0.05)
    ref, ref_r = dpzero_prompt_tuning(model, ids, mask, **kw)
    ck = Checkpointer(tmp_path / "ck", 2, identity={"run": "t"})

    def crash(step, facts):
        if step == 5:
            raise _Crash

    with pytest.raises(_Crash):
        dpzero_prompt_tuning(model, ids, mask, checkpoint=ck, on_step=crash, **kw)
    assert [p.name for p in ck.checkpoints()] == ["step-000000004"]
    steps_seen = []
    prompt, r = dpzero_prompt_tuning(model, ids, mask, checkpoint=ck, on_step=lambda s, f: steps_seen.append(s), **kw)
    assert r.resumed_from_step == 4 and steps_seen == [4, 5, 6, 7, 8]
    assert torch.equal(prompt, ref)
    assert r.projected_gradients == ref_r.projected_gradients and r.batch_sizes == ref_r.batch_sizes
    assert r.clipped_fractions == ref_r.clipped_fractions and len(r.losses) == 9
    assert r.losses == pytest.approx(ref_r.losses, nan_ok=True, rel=0, abs=0)
    assert not (tmp_path / "ck").exists()


def test_a_checkpoint_of_other_settings_is_refused(tmp_path, caplog):
    from empriv.train.checkpoint import Checkpointer

    model = tiny_gpt2(n_positions=16)
    ids, mask = toy_data(16)
    kw = dict(n_prompt=2, steps=6, sample_rate=0.4, learning_rate=0.1, mu=1e-2, clip_norm=0.5, noise_multiplier=1.0,
              seed=3)
    ck = Checkpointer(tmp_path / "ck", 2)

    def crash(step, facts):
        if step == 3:
            raise _Crash

    with pytest.raises(_Crash):
        dpzero_prompt_tuning(model, ids, mask, checkpoint=ck, on_step=crash, **kw)
    fresh, fresh_r = dpzero_prompt_tuning(model, ids, mask, **{**kw, "mu": 2e-2})
    with caplog.at_level("WARNING", logger="empriv.train"):
        prompt, r = dpzero_prompt_tuning(model, ids, mask, checkpoint=ck, **{**kw, "mu": 2e-2})
    assert r.resumed_from_step is None and torch.equal(prompt, fresh)
    assert any("refused: written by a different run (mu: 0.01 != 0.02" in m for m in caplog.messages), caplog.messages
