"""Utility of a fine-tuned model: mean token NLL on the held-out test split (lower is better).

E-mail corpora score every token of the test texts; TOFU scores the *answer* tokens only (the
research's appendix B.8): a test text ``Question: …\\nAnswer: …`` is split after ``Answer:`` and
the answer is scored given the question, cut to the model's window.
"""

from __future__ import annotations

from collections.abc import Sequence

ANSWER_MARK = "\nAnswer:"


def test_nll(model, tokenizer, texts: Sequence[str], seq_len: int, batch_size: int = 64) -> float:
    from empriv.models.lm import encode_fixed, mean_token_nll

    ids, mask = encode_fixed(tokenizer.encode_batch(list(texts)), tokenizer.eos_id, seq_len)
    return mean_token_nll(model, ids, mask, batch_size)


def answer_nll(model, tokenizer, texts: Sequence[str], seq_len: int, batch_size: int = 64) -> float:
    """Mean NLL per answer token over Q/A texts; answers are cut so question + answer fit ``seq_len``."""
    from empriv.models.lm import conditional_nll

    prompts, answers = [], []
    for text in texts:
        cut = text.find(ANSWER_MARK)
        if cut < 0:
            raise ValueError("a TOFU test text has no '\\nAnswer:' part")
        cut += len(ANSWER_MARK)
        p = [tokenizer.eos_id, *tokenizer.encode(text[:cut])]
        a = tokenizer.encode(text[cut:])[: max(0, seq_len - len(p))]
        if a:
            prompts.append(p)
            answers.append(a)
    if not answers:
        raise ValueError(f"no test answer fits the {seq_len}-token window after its question")
    total = sum(conditional_nll(model, prompts, answers, batch_size))
    return total / sum(len(a) for a in answers)
