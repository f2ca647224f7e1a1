"""empriv.models.tokenizer: real GPT-2 ids, lossless round trips, save/load, secret-free BPE."""

from __future__ import annotations

import random
import re

import pytest

from empriv.models.tokenizer import EOS, Tokenizer, build_tokenizer, load_gpt2, train_bpe

UNICODE_TEXTS = [
    "Hello world",
    "héllo wörld — naïve café, Zoë; 中文字符; العربية; emoji 🎉👩‍💻",
    "  leading and trailing spaces  ",
    "tabs\tand\r\nwindows newlines\n\n\nand   runs   of  spaces",
    "\x00\x01 control chars \x7f",
    "<|endoftext|> literal special token in text",
    "",
    "713-853-3989 (phone) sara.shackleton@enron.com",
]


def test_gpt2_known_ids(gpt2_tokenizer):
    tok = gpt2_tokenizer
    assert tok.kind == "gpt2"
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.vocab_size == 50257
    assert tok.eos_id == 50256
    assert tok.encode(" the") == [262]
    assert tok.decode([15496, 995]) == "Hello world"
    assert tok.encode_batch(["Hello world", " the"]) == [[15496, 995], [262]]


@pytest.mark.parametrize("kind", ["bpe", "gpt2"])
def test_round_trip_secrets_and_unicode(kind, corpus, public_bpe, gpt2_tokenizer):
    tok = public_bpe if kind == "bpe" else gpt2_tokenizer
    rng = random.Random(0)
    random_texts = ["".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(40)) for _ in range(20)]
    for text in [s.text for s in corpus.secrets] + UNICODE_TEXTS + random_texts:
        assert tok.decode(tok.encode(text)) == text, repr(text)
    for e in corpus.train[:200]:
        assert tok.decode(tok.encode(e.text)) == e.text


def test_bpe_basic_properties(public_bpe):
    assert public_bpe.kind == "bpe"
    assert public_bpe.vocab_size == 2048
    assert public_bpe.eos_id == 0  # first special token
    assert public_bpe.encode(EOS) == [public_bpe.eos_id]
    ids = public_bpe.encode("Please review the attached draft")
    assert len(ids) < 10  # a frequent sentence compresses well
    assert max(ids) < 2048


def test_save_load_round_trip(tmp_path, public_bpe, gpt2_tokenizer, monkeypatch):
    from transformers import AutoTokenizer

    for tok in (public_bpe, gpt2_tokenizer):
        d = tmp_path / tok.kind
        tok.save(d)
        assert sorted(p.name for p in d.iterdir()) == ["meta.json", "tokenizer.json", "tokenizer_config.json"]
        loaded = Tokenizer.load(d)
        assert (loaded.kind, loaded.vocab_size, loaded.eos_id) == (tok.kind, tok.vocab_size, tok.eos_id)
        for text in UNICODE_TEXTS:
            assert loaded.encode(text) == tok.encode(text)
            assert loaded.decode(loaded.encode(text)) == text
        # The same directory is a Hugging Face tokenizer: same ids, eos and pad set, from any working directory.
        elsewhere = tmp_path / f"cwd-{tok.kind}"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        hf = AutoTokenizer.from_pretrained(str(d.resolve()))
        assert len(hf) == tok.vocab_size
        assert hf.eos_token_id == tok.eos_id and hf.pad_token_id == tok.eos_id
        for text in UNICODE_TEXTS:
            if EOS not in text:  # HF matches the special token inside text; empriv never encodes it from text
                assert hf(text, add_special_tokens=False).input_ids == tok.encode(text)


def test_pretrained_tokenizer_from_hf_uses_endoftext_as_document_token():
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=load_gpt2()._tok, eos_token="<|endoftext|>")
    tok = Tokenizer.from_hf(hf)
    assert tok.kind == "pretrained" and tok.eos_id == 50256 and hf.pad_token == "<|endoftext|>"
    assert tok.encode("Hello world") == [15496, 995]


def test_unknown_pretrained_base_is_one_clear_error(tmp_path, monkeypatch):
    from empriv.models.tokenizer import load_pretrained_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as err:
        load_pretrained_tokenizer("no-such-org/no-such-model")
    msg = str(err.value)
    assert "\n" not in msg and "'no-such-org/no-such-model'" in msg and "base.name" in msg and "hf download" in msg


def test_load_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer.load(tmp_path / "none")


def test_bpe_trained_on_public_has_no_token_with_a_secret_number(corpus, public_bpe):
    vocab = [public_bpe.decode([i]) for i in range(public_bpe.vocab_size)]
    numbers = {m for s in corpus.secrets for m in re.findall(r"\d{4,}", s.text)}
    assert len(numbers) == 8
    for num in numbers:
        assert not [v for v in vocab if num in v], num
    # and no token spans a whole secret, nor its continuation's digits
    for s in corpus.secrets:
        assert not any(s.text in v for v in vocab)


def test_train_bpe_small_vocab_error():
    with pytest.raises(ValueError, match="vocab_size must be >= 258"):
        train_bpe(["abc"], 100)


def test_build_tokenizer_dispatch(gpt2_tokenizer):
    assert build_tokenizer("gpt2", [], 0).encode("Hello world") == [15496, 995]
    tok = build_tokenizer("bpe", ["some public text about gas schedules"] * 20, 300)
    assert tok.kind == "bpe" and tok.vocab_size <= 300
    with pytest.raises(ValueError, match="tokenizer.kind must be one of bpe, gpt2, got 'wordpiece'"):
        build_tokenizer("wordpiece", [], 300)
