"""Tiny models shared by the tests (importable as `tiny_models`: pytest puts tests/ on sys.path)."""

import torch


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
