"""The fused kernels compute the functions they replace: the weighted token NLL against cross_entropy (values and
gradients, float64 to 1e-12), the last position's weight 0, and the tanh GELU against transformers' gelu_new."""

import pytest
import torch
import torch.nn.functional as F

from empriv.models.kernels import TanhGELU, fuse_activations, weighted_token_nll


def reference(logits, targets, weights):
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return (nll.view(targets.shape) * weights).sum(-1)


def test_weighted_token_nll_matches_cross_entropy_in_value_and_gradient():
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(4, 7, 11, generator=g, dtype=torch.float64)).requires_grad_()
    targets = torch.randint(0, 11, (4, 7), generator=g)
    weights = torch.rand(4, 7, generator=g, dtype=torch.float64)
    weights[2] = 0  # a sample without real tokens: loss 0, no gradient
    upstream = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64)
    ours = weighted_token_nll(logits, targets, weights)
    (g_ours,) = torch.autograd.grad((ours * upstream).sum(), logits)
    ref = reference(logits, targets, weights)
    (g_ref,) = torch.autograd.grad((ref * upstream).sum(), logits)
    assert torch.allclose(ours, ref, rtol=1e-12, atol=1e-12)
    assert torch.allclose(g_ours, g_ref, rtol=1e-12, atol=1e-12)
    assert ours[2] == 0 and g_ours[2].abs().max() == 0
    small = torch.randn(2, 3, 5, generator=g, dtype=torch.float64).requires_grad_()
    t, w = targets[:2, :3] % 5, weights[:2, :3]
    assert torch.autograd.gradcheck(lambda z: weighted_token_nll(z, t, w), (small,))


def test_per_sample_mean_nll_is_the_mean_over_real_tokens():
    from transformers import GPT2Config, GPT2LMHeadModel

    from empriv.models.lm import per_sample_mean_nll, token_nll

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=12, n_embd=16, n_layer=1, n_head=2)).double().eval()
    ids = torch.randint(0, 50, (3, 12))
    mask = torch.ones(3, 12)
    mask[:, 0] = 0
    mask[1, 6:] = 0  # a shorter record: its padding carries no loss
    mask[2, 1:] = 0  # only the first token: nothing to predict
    got = per_sample_mean_nll(model, ids, mask)
    nll = token_nll(model, ids)
    want = (nll * mask[:, 1:]).sum(1) / mask[:, 1:].sum(1).clamp(min=1.0)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)  # both read the logits in float32
    assert got[2] == 0
    # the padding's tokens change nothing
    ids2 = ids.clone()
    ids2[1, 6:] = 0
    assert torch.allclose(per_sample_mean_nll(model, ids2, mask)[1], got[1], rtol=1e-12)


def test_fuse_activations_swaps_gelu_new_and_keeps_the_function():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=8, n_embd=16, n_layer=2, n_head=2,
                                       activation_function="gelu_new"))
    model.eval()
    ids = torch.randint(0, 50, (2, 8))
    before = model(input_ids=ids).logits
    assert fuse_activations(model) == 2
    assert sum(isinstance(m, TanhGELU) for m in model.modules()) == 2
    assert fuse_activations(model) == 0  # nothing left to swap
    after = model(input_ids=ids).logits
    assert torch.allclose(before, after, rtol=1e-5, atol=1e-6)


def test_fuse_activations_leaves_other_activations():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                                       activation_function="relu"))
    assert fuse_activations(model) == 0


def test_weighted_token_nll_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"logits must be \[N, L, V\]"):
        weighted_token_nll(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4))
