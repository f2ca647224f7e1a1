"""Reading and writing prepared splits (``data/prepared/<split>.jsonl``: one ``{"id", "text"}`` per line)."""

from __future__ import annotations

from pathlib import Path

from empriv.config import ConfigError
from empriv.io import read_jsonl, write_jsonl

SPLITS = ("train", "validation", "test", "public")
PREPARED_DIR = Path("data/prepared")


def split_path(split: str, root: str | Path = PREPARED_DIR) -> Path:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return Path(root) / f"{split}.jsonl"


def load_texts(split: str, root: str | Path = PREPARED_DIR) -> list[str]:
    path = split_path(split, root)
    if not path.exists():
        raise ConfigError(f"prepared split {str(path)!r} does not exist: run the prepare stage first (dvc repro prepare)")
    return [row["text"] for row in read_jsonl(path)]


def write_split(split: str, rows: list[dict], root: str | Path = PREPARED_DIR) -> None:
    write_jsonl(split_path(split, root), rows)
