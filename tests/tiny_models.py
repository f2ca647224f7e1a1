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


def train_to_memorise(model, tokenizer, text: str, steps: int = 150, lr: float = 1e-2, max_offset: int = 0):
    """Train ``model`` non-privately on ``text`` (4 copies, Adam) until it has memorised it; returns the final loss.

    ``max_offset`` > 0 puts 0…max_offset random tokens before the text in each copy (16 copies), so the
    text is memorised wherever it starts — as a secret inside longer documents is.
    """
    if max_offset:
        g = torch.Generator().manual_seed(0)
        vocab = model.config.vocab_size
        seqs = [torch.randint(0, vocab, (i % (max_offset + 1),), generator=g).tolist() + tokenizer.encode(text)
                for i in range(16)]
    else:
        seqs = [tokenizer.encode(text)] * 4
    return train_on_sequences(model, seqs, tokenizer.eos_id, steps, lr)


def train_on_sequences(model, seqs: list[list[int]], eos_id: int, steps: int, lr: float = 1e-2) -> float:
    """Full-batch non-private Adam on token sequences (padded to the model's window); returns the final loss."""
    from empriv.models.lm import encode_fixed, per_sample_mean_nll

    ids, mask = encode_fixed(seqs, eos_id, model.config.n_positions)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = per_sample_mean_nll(model, ids, mask).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())
