"""empriv.models.lm: encoding, per-token NLL, conditional NLL, seeded sampling."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from empriv.models.lm import (
    conditional_nll,
    encode_fixed,
    mean_token_nll,
    per_sample_mean_nll,
    position_ids_like,
    sample_continuations,
    token_nll,
)

EOS = 299


@pytest.fixture(scope="module")
def model():
    from tiny_models import tiny_gpt2

    return tiny_gpt2(vocab_size=300, n_embd=16, n_head=2, n_layer=1, n_positions=16, seed=0)


def test_encode_fixed_shapes_and_mask():
    ids, mask = encode_fixed([[5, 6, 7], [], list(range(1, 11))], eos_id=EOS, seq_len=6)
    assert ids.shape == (3, 6) and mask.shape == (3, 6)
    assert ids.dtype == torch.long and mask.dtype == torch.float32
    assert ids.tolist() == [[EOS, 5, 6, 7, EOS, EOS], [EOS] * 6, [EOS, 1, 2, 3, 4, 5]]
    assert mask.tolist() == [[0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1]]


def test_position_ids_like():
    p = position_ids_like(torch.zeros(2, 4, dtype=torch.long))
    assert p.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]


def _manual_token_nll(model, ids):
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    logp = torch.log_softmax(logits.double(), -1)
    return -logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)


def test_token_nll_equals_manual_cross_entropy(model):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 300, (3, 9), generator=g)
    with torch.no_grad():
        got = token_nll(model, ids)
    assert got.shape == (3, 8)
    torch.testing.assert_close(got.double(), _manual_token_nll(model, ids), rtol=1e-5, atol=1e-5)
    # an untrained model is near uniform: ≈ log(300) per token
    assert abs(float(got.mean()) - torch.log(torch.tensor(300.0)).item()) < 0.3


def test_per_sample_and_mean_token_nll(model):
    ids, mask = encode_fixed([[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]], EOS, 8)
    with torch.no_grad():
        nll = token_nll(model, ids)
        per = per_sample_mean_nll(model, ids, mask)
    m = mask[:, 1:]
    expected = [float((nll[i] * m[i]).sum() / m[i].sum()) for i in range(3)]
    assert per.tolist() == pytest.approx(expected, rel=1e-6)
    assert float(per[2]) == pytest.approx(float(nll[2, 0]), rel=1e-6)  # one real token
    overall = float((nll * m).sum() / m.sum())
    for bs in (1, 2, 64):
        assert mean_token_nll(model, ids, mask, batch_size=bs) == pytest.approx(overall, rel=1e-6)


def test_padding_does_not_change_real_tokens(model):
    ids_short, mask_short = encode_fixed([[3, 4, 5]], EOS, 4)
    ids_long, mask_long = encode_fixed([[3, 4, 5]], EOS, 12)
    with torch.no_grad():
        a = per_sample_mean_nll(model, ids_short, mask_short)
        b = per_sample_mean_nll(model, ids_long, mask_long)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_conditional_nll_equals_sum_of_target_token_nlls(model):
    prompts = [[EOS, 11, 12], [EOS], [EOS, 1, 2, 3, 4, 5]]
    targets = [[13, 14], [7, 8, 9, 10], [6]]
    expected = []
    for p, t in zip(prompts, targets):
        nll = _manual_token_nll(model, torch.tensor([p + t]))[0]
        expected.append(float(nll[len(p) - 1 :].sum()))  # entries predicting the target tokens
        assert len(nll[len(p) - 1 :]) == len(t)
    for bs in (1, 2, 64):
        assert conditional_nll(model, prompts, targets, batch_size=bs) == pytest.approx(expected, rel=1e-5)


def _greedy(model, prompt, n):
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
            seq.append(int(logits.argmax()))
    return seq[len(prompt):]


def test_sample_continuations_shape_and_determinism(model):
    prompt = [EOS, 5, 6, 7]
    a = sample_continuations(model, prompt, 6, 5, generator=torch.Generator().manual_seed(1))
    b = sample_continuations(model, prompt, 6, 5, generator=torch.Generator().manual_seed(1))
    c = sample_continuations(model, prompt, 6, 5, generator=torch.Generator().manual_seed(2))
    assert a == b
    assert a != c
    assert len(a) == 6 and all(len(x) == 5 for x in a)
    assert all(0 <= t < 300 for x in a for t in x)
    assert len({tuple(x) for x in a}) > 1  # near-uniform model: samples differ
    assert sample_continuations(model, prompt, 3, 0) == [[], [], []]


def test_top_k_1_and_tiny_top_p_are_greedy(model):
    prompt = [EOS, 40, 41]
    greedy = _greedy(model, prompt, 8)
    for kwargs in ({"top_k": 1}, {"top_k": 0, "top_p": 1e-9}, {"top_k": 1, "temperature": 5.0}):
        outs = sample_continuations(model, prompt, 4, 8, generator=torch.Generator().manual_seed(3), **kwargs)
        assert outs == [greedy] * 4, kwargs


def test_top_k_restricts_the_support(model):
    prompt = [EOS, 9]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    top3 = set(torch.topk(logits, 3).indices.tolist())
    outs = sample_continuations(model, prompt, 200, 1, top_k=3, temperature=10.0, generator=torch.Generator().manual_seed(0))
    firsts = {o[0] for o in outs}
    assert firsts == top3  # all three drawn at high temperature, nothing else
