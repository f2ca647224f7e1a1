"""Shared fixtures of the unit suite (tests/privacy has its own conftest)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """One torch thread: the suite shares a 2-core machine with timing experiments."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def corpus():
    """The default-sized synthetic corpus (seed 0), generated once."""
    from empriv.data.synthetic import generate_corpus

    return generate_corpus(3000, 200, 300, 6000, seed=0)


@pytest.fixture(scope="session")
def public_bpe(corpus):
    """A 2,048-token byte-level BPE trained on the public split only (as the tokenizer stage does)."""
    from empriv.models.tokenizer import train_bpe

    return train_bpe([e.text for e in corpus.public], 2048)


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    from empriv.models.tokenizer import load_gpt2

    return load_gpt2()


def tiny_gpt2(vocab_size: int = 300, n_embd: int = 16, n_head: int = 2, n_layer: int = 1, n_positions: int = 16, seed: int = 0):
    """A tiny GPT-2 without dropout (so train() and eval() compute the same function)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=vocab_size - 1,
        eos_token_id=vocab_size - 1,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    model.eval()
    return model


@pytest.fixture
def make_tiny_gpt2():
    return tiny_gpt2
