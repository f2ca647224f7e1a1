"""empriv.train.flatness: AWP perturbation and step, KD gradient after privatisation (vs. a naive loss term),
the non-private copy, line sharpness on quadratics, greedy elimination (analytic scores and a constructed
prefix case), one-line errors. The DP-Flat loop over them: tests/train/test_dpflat.py."""

from __future__ import annotations

import pytest
import torch

from empriv.models.adaptations import dp_step, per_sample_gradients, prepare_adaptation
from empriv.models.lm import encode_fixed, per_sample_mean_nll
from empriv.train.flatness import (
    ELIMINATION_PRIVATE_CAVEAT,
    KD_PRIVATE_CAVEAT,
    add_kd_gradient,
    awp_perturbation,
    eliminate_prefix_layers,
    greedy_elimination,
    line_sharpness,
    perturbed_dp_step,
    prefix_sharpness,
    restrict_prefix_layers,
    train_nonprivate_copy,
    trainable_state,
    unnoised_batch_gradient,
    weight_blocks,
)

V, D, NL, P = 300, 16, 3, 3
EOS = V - 1
_g = torch.Generator().manual_seed(0)
SEQS = [torch.randint(0, V - 1, (8,), generator=_g).tolist() for _ in range(8)]
IDS, MASK = encode_fixed(SEQS, EOS, 10)
WIDTH = 2 * 2 * (D // 2)  # k and v, 2 heads, head_dim 8: one prefix layer's columns


def base(dtype=torch.float64, sharp_layer=None):
    """Tiny 3-layer GPT-2; ``sharp_layer``: that layer's attention output projection ×100 and ln_f's gain ×50,
    which makes the loss far more curved in that layer's prefix than in the others (the constructed case)."""
    from tiny_models import tiny_gpt2

    model = tiny_gpt2(vocab_size=V, n_embd=D, n_head=2, n_layer=NL, n_positions=24, seed=0).to(dtype)
    if sharp_layer is not None:
        with torch.no_grad():
            model.transformer.h[sharp_layer].attn.c_proj.weight.mul_(100.0)
            model.transformer.ln_f.weight.mul_(50.0)
    return model


def prefix_model(dtype=torch.float64, **kwargs):
    sharp = kwargs.pop("sharp_layer", None)
    return prepare_adaptation(base(dtype, sharp), "prefix", n_virtual=P, init_seed=0, **kwargs)


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


# ----------------------------------------------------------------------------- AWP


def test_weight_blocks_split_a_flat_prefix_per_layer_and_keep_other_tensors_whole():
    flat = prefix_model(layers=[0, 2])
    assert weight_blocks(flat) == [("prefix.table.weight", slice(0, WIDTH)),
                                   ("prefix.table.weight", slice(WIDTH, 2 * WIDTH))]
    reparam = prefix_model(reparameterize=True, hidden=4)
    assert [b for _, b in weight_blocks(reparam)] == [None] * 5  # embedding, 2 × (weight, bias)


def test_awp_perturbation_has_radius_gamma_norm_w_per_layer_along_the_gradient():
    model = prefix_model()
    w = model.prefix.table.weight.detach()
    g = torch.randn(w.shape, generator=torch.Generator().manual_seed(1), dtype=w.dtype)
    g[:, WIDTH:2 * WIDTH] = 0.0  # layer 1's gradient is zero: no perturbation there
    v = awp_perturbation(model, {"prefix.table.weight": g}, gamma=0.05)["prefix.table.weight"]
    for j in (0, 2):
        cols = slice(j * WIDTH, (j + 1) * WIDTH)
        assert float(v[:, cols].norm()) == pytest.approx(0.05 * float(w[:, cols].norm()), rel=1e-12)
        assert torch.allclose(v[:, cols] / v[:, cols].norm(), g[:, cols] / g[:, cols].norm(), atol=1e-12)
    assert torch.count_nonzero(v[:, WIDTH:2 * WIDTH]) == 0


def test_unnoised_batch_gradient_is_the_mean_of_per_sample_gradients_and_leaves_grad_alone():
    model = prefix_model()
    model.prefix.table.weight.grad = torch.full_like(model.prefix.table.weight, 7.0)
    g = unnoised_batch_gradient(model, IDS, MASK)["prefix.table.weight"]
    ref = per_sample_gradients(model, IDS, MASK)["prefix.table.weight"].mean(0)
    assert torch.allclose(g, ref, atol=1e-12)
    assert float(g.norm()) > 0
    assert torch.all(model.prefix.table.weight.grad == 7.0)


def test_perturbed_dp_step_takes_the_gradient_at_w_plus_v_and_restores_w_exactly():
    model = prefix_model()
    w0 = model.prefix.table.weight.detach().clone()
    v = awp_perturbation(model, unnoised_batch_gradient(model, IDS, MASK), gamma=0.5)
    kw = dict(clip_norm=0.01, noise_multiplier=1.0, expected_batch_size=4.0)
    perturbed_dp_step(model, IDS, MASK, v, generator=torch.Generator().manual_seed(3), **kw)
    at_w_plus_v = grads(model)
    assert torch.equal(model.prefix.table.weight.detach(), w0)

    reference = prefix_model()
    with torch.no_grad():
        reference.prefix.table.weight.add_(v["prefix.table.weight"])
    dp_step(reference, IDS, MASK, generator=torch.Generator().manual_seed(3), **kw)
    assert torch.allclose(at_w_plus_v["prefix.table.weight"], reference.prefix.table.weight.grad, atol=1e-12)

    dp_step(model, IDS, MASK, generator=torch.Generator().manual_seed(3), **kw)
    assert not torch.allclose(grads(model)["prefix.table.weight"], at_w_plus_v["prefix.table.weight"], atol=1e-6)


# ----------------------------------------------------------------------------- KD


def _kd_setup():
    model = prefix_model()
    w_nor = {n: t + 0.3 * torch.randn(t.shape, generator=torch.Generator().manual_seed(5), dtype=t.dtype)
             for n, t in trainable_state(model).items()}
    return model, w_nor


def test_kd_term_is_added_after_privatisation_exactly():
    model, w_nor = _kd_setup()
    kw = dict(clip_norm=0.01, noise_multiplier=0.7, expected_batch_size=4.0)
    dp_step(model, IDS, MASK, generator=torch.Generator().manual_seed(2), **kw)
    plain = grads(model)["prefix.table.weight"]
    dp_step(model, IDS, MASK, generator=torch.Generator().manual_seed(2), **kw)
    lam = 0.25
    dist = add_kd_gradient(model, w_nor, lam)
    with_kd = grads(model)["prefix.table.weight"]
    diff = model.prefix.table.weight.detach() - w_nor["prefix.table.weight"]
    assert dist == pytest.approx(float(diff.norm()), rel=1e-12)
    assert torch.allclose(with_kd - plain, lam * diff / diff.norm(), atol=1e-12)
    assert float((with_kd - plain).norm()) == pytest.approx(lam, rel=1e-9)  # ‖∇λ‖w − w_nor‖₂‖ = λ

    dp_step(model, IDS, MASK, generator=torch.Generator().manual_seed(2), **kw)
    add_kd_gradient(model, w_nor, 0.0)
    assert torch.equal(grads(model)["prefix.table.weight"], plain)


def test_kd_term_added_to_the_loss_is_clipped_and_diluted_by_the_dp_step():
    """The naive alternative: each sample's loss ℓ_i + λ‖w − w_nor‖₂, then clip, sum, /b (σ = 0)."""
    model, w_nor = _kd_setup()
    lam, clip, b = 0.25, 0.01, 4.0
    param = model.prefix.table.weight
    naive = torch.zeros_like(param)
    for i in range(IDS.shape[0]):
        loss = per_sample_mean_nll(model, IDS[i:i + 1], MASK[i:i + 1]).sum() \
            + lam * (param - w_nor["prefix.table.weight"]).norm()
        (g,) = torch.autograd.grad(loss, [param])
        naive += g * min(1.0, clip / (float(g.norm()) + 1e-6))
    naive /= b
    dp_step(model, IDS, MASK, clip_norm=clip, noise_multiplier=0.0, generator=None, expected_batch_size=b)
    plain = param.grad.detach().clone()
    add_kd_gradient(model, w_nor, lam)
    after = param.grad.detach()
    naive_term, applied_term = naive - plain, after - plain
    assert float(applied_term.norm()) == pytest.approx(lam, rel=1e-9)
    # every sample's gradient (norm ≈ λ) is clipped to C: the naive version carries at most n·C/b of the term
    assert float(naive_term.norm()) <= 2 * IDS.shape[0] * clip / b < lam / 2
    assert not torch.allclose(naive, after, atol=1e-3)


def test_nonprivate_copy_is_sgd_from_w_and_leaves_w_alone():
    model = prefix_model()
    w0 = model.prefix.table.weight.detach().clone()
    g = unnoised_batch_gradient(model, IDS, MASK)["prefix.table.weight"]
    one = train_nonprivate_copy(model, IDS, MASK, steps=1, lr=0.5)
    assert torch.allclose(one.weights["prefix.table.weight"], w0 - 0.5 * g, atol=1e-12)
    assert torch.equal(model.prefix.table.weight.detach(), w0)
    assert one.caveat == KD_PRIVATE_CAVEAT
    many = train_nonprivate_copy(model, IDS, MASK, steps=15, lr=50.0, data_source="public")
    assert many.caveat is None and many.data_source == "public"
    assert many.losses[-1] < many.losses[0] - 0.01


# ----------------------------------------------------------------------------- sharpness, elimination


def test_line_sharpness_on_a_quadratic_matches_the_closed_form():
    # L(w) = ½ a ‖w‖², ∇L = a w, L(w − η a w) = ½ a (1 − η a)² ‖w‖², max over η ∈ {0, .1, …, 1}
    w = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    for a, ascent in [(3.0, False), (0.5, False), (0.5, True), (3.0, True)]:
        l0 = 0.5 * a * 5.0
        worst = max(0.5 * a * (1 + (1 if ascent else -1) * (i / 10) * a) ** 2 * 5.0 - l0 for i in range(11))
        got = line_sharpness(lambda: 0.5 * a * (w ** 2).sum(), [w], ascent=ascent)
        assert got == pytest.approx(worst / (1 + l0), rel=1e-12)
        assert torch.equal(w.detach(), torch.tensor([1.0, -2.0], dtype=torch.float64))
    assert line_sharpness(lambda: 0.25 * (w ** 2).sum(), [w]) == 0.0  # gentle curvature: descent never overshoots
    assert line_sharpness(lambda: 1.5 * (w ** 2).sum(), [w]) == pytest.approx((0.5 * 3 * 4 * 5 - 7.5) / 8.5)


def test_greedy_elimination_with_analytic_scores():
    curvature = {0: 1.0, 1: 5.0, 2: 2.0, 3: 3.0}
    calls = []

    def score(layers):
        calls.append(layers)
        return sum(curvature[i] for i in layers)

    r = greedy_elimination([0, 1, 2, 3], score, target_layers=1)
    assert r.removed == [1, 3, 2] and r.kept == (0,)
    assert r.initial_sharpness == 11.0 and r.final_sharpness == 1.0
    assert r.rounds[0]["scores"] == {0: 10.0, 1: 6.0, 2: 9.0, 3: 8.0}
    assert len(calls) == 1 + 4 + 3 + 2
    # ties: the first layer in order (Algorithm 1's strict "<")
    assert greedy_elimination([0, 1, 2], lambda s: 0.0, target_layers=2).removed == [0]
    # stop when the best removal does not lower the sharpness: removing layer 2 helps, then nothing does
    bumpy = {(0, 1, 2): 3.0, (0, 1): 1.0, (1, 2): 4.0, (0, 2): 5.0, (0,): 2.0, (1,): 1.5}
    r = greedy_elimination([0, 1, 2], bumpy.__getitem__, target_layers=1, stop_when_not_decreasing=True)
    assert r.kept == (0, 1) and r.removed == [2] and r.rounds[-1]["removed"] is None
    assert greedy_elimination([0, 1, 2], bumpy.__getitem__, target_layers=1).kept == (1,)


def test_restricting_the_prefix_keeps_the_kept_layers_values():
    for kwargs in ({}, {"reparameterize": True, "hidden": 4}):
        model = prefix_model(**kwargs)
        sub = restrict_prefix_layers(model, [0, 2])
        assert sub.prefix.layers == (0, 2) and sub.base is model.base
        full_kv, sub_kv = model.prefix(IDS[:2]), sub.prefix(IDS[:2])
        assert set(sub_kv) == {0, 2}
        for layer in (0, 2):
            for a, b in zip(full_kv[layer], sub_kv[layer]):
                # the same values; the reparameterised prefix computes them with a narrower matmul, whose float
                # summation order the BLAS kernel may choose differently
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
        same = restrict_prefix_layers(model, [0, 1, 2])
        with torch.no_grad():
            assert torch.equal(same(IDS).logits, model(IDS).logits)
            assert not torch.allclose(sub(IDS).logits, model(IDS).logits)


@pytest.mark.parametrize("sharp", [0, 1, 2])
def test_elimination_removes_the_layer_made_sharp_by_construction_first(sharp):
    model = prefix_model(sharp_layer=sharp)
    r = eliminate_prefix_layers(model, IDS, MASK, target_layers=2, ascent=True)
    assert r.removed == [sharp] and r.kept == tuple(i for i in range(NL) if i != sharp)
    assert r.final_sharpness < 0.2 * min(v for i, v in r.rounds[0]["scores"].items() if i != sharp)
    assert r.model.prefix.layers == r.kept and r.caveat == ELIMINATION_PRIVATE_CAVEAT
    assert [n for n, p in r.model.named_parameters() if p.requires_grad] == ["prefix.table.weight"]


def test_descent_sharpness_as_published_also_finds_the_sharp_last_layer():
    model = prefix_model(sharp_layer=2)
    scores = {k: prefix_sharpness(restrict_prefix_layers(model, k), IDS, MASK) for k in [(0, 1, 2), (0, 1)]}
    assert scores[(0, 1, 2)] > 0.01 and scores[(0, 1)] == 0.0
    r = eliminate_prefix_layers(model, IDS, MASK, target_layers=2, data_source="public")
    assert r.removed == [2] and r.caveat is None


# ----------------------------------------------------------------------------- errors


def test_bad_component_input_is_a_one_line_value_error():
    model = prefix_model(dtype=torch.float32)
    prompt = prepare_adaptation(base(torch.float32), "prompt", n_virtual=P, init_seed=0)
    with pytest.raises(ValueError, match="DP-Flat layer elimination needs a prefix-tuned model"):
        eliminate_prefix_layers(prompt, IDS, MASK, target_layers=1)
    with pytest.raises(ValueError, match=r"kd_lambda: out of range \(got -1; allowed: a finite number >= 0\)"):
        add_kd_gradient(model, trainable_state(model), -1)
    with pytest.raises(ValueError, match=r"gamma: out of range \(got -0.5; allowed: a finite number > 0\)"):
        awp_perturbation(model, trainable_state(model), -0.5)
