"""What validation reads besides the params: the raw inputs' content and the machine, checked before DVC deletes
any output.

``empriv validate``, ``make repro`` (which runs it first) and the validate stage call :func:`input_errors` after the
params themselves passed; the ``input@<key>`` stage runs the check of its own file again (plain ``dvc repro``
after an edit to the file in place, which re-runs only that stage and its dependents). Every problem is one line
naming the params key, the file, the line or record, and what is allowed; never a decoder's message or the file's
bytes.

- ``data.path`` (``text``: :mod:`empriv.pipeline.text_checks`; ``enron``, ``tofu``): the file's format (binary, compressed, the other source's format), then it is
  parsed and its usable records counted exactly as prepare will (Enron: load, de-duplicate, top senders and
  receivers, boilerplate, tabs, < 30 GPT-2 tokens, the 90/5/5 split; TOFU: 20 records per author, author split),
  and the training split compared with ``data.n_train``.
- ``data.public_path`` (``text`` with ``data.public: file``: :func:`empriv.pipeline.text_checks.public_file_errors`):
  the public file read as the corpus is, and against the corpus.
- ``secrets.overrides``: every line a JSON object with non-empty string ``id``, ``prompt``, ``continuation``,
  each id once. (Each override against the corpus, an id the secrets stage will have and a text the training data
  holds, is :mod:`empriv.pipeline.override_checks`, run by validation after these checks.)
- ``base.name``: a local directory must hold a model (``config.json``); a hub id must be in the local Hugging
  Face cache, or the hub reachable (a 3 s probe; ``HF_HUB_OFFLINE=1`` means unreachable).
- ``runtime.device``: ``cuda``/``cuda:N`` needs a CUDA GPU here, ``mps`` an Apple GPU (skipped when
  ``sweep.engine`` is ``slurm``: the jobs run on the cluster's nodes, not where validation runs).

Cost: corpus facts (formats, counts) are cached in ``.empriv/input_checks.json`` under the file's identity (path,
size, modification time, inode; a directory: those of every file) and the params they depend on, so a no-op
``make repro`` parses nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

from empriv.config import KNOWN_BASES, Params, is_local_base
from empriv.data.prepare import MIN_N_TRAIN  # DataParams.n_train's lower bound
from empriv.pipeline.file_facts import SNIFF_BYTES, _what, identity, sniff  # noqa: F401 (SNIFF_BYTES: tests)

CACHE = Path(".empriv/input_checks.json")
ENRON_ALLOWED = "the Kaggle emails.csv (a CSV with header file,message) or a CMU maildir directory"
TOFU_ALLOWED = "a TOFU .json (a list of {question, answer} records, or a Hugging Face export) or .jsonl file"




def _text_head(path: Path, n: int = 4096) -> str:
    with open(path, "rb") as fh:
        return fh.read(n).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")


def _looks_like_json(head: str) -> bool:
    return head[:1] in ("{", "[")


def _looks_like_enron_csv(head: str) -> bool:
    first = head.splitlines()[0].lower() if head else ""
    return "file" in first and "message" in first and "," in first


# --------------------------------------------------------------------------------------------- corpus facts
def enron_facts(path: Path, top_n: int, seed: int) -> dict:
    """What prepare would find in an Enron corpus: ``error`` (a format problem, one phrase) or the counts
    (``rows``, ``parsed``, ``malformed`` with the first reason, the cleaning counts, ``train``)."""
    import csv

    from empriv.data.enron import clean_enron, load_enron

    if path.is_file():
        kind = sniff(path)
        if kind is not None:
            hint = "" if kind == "binary" else "; decompress or extract it first"
            return {"error": f"{_what(kind)}, not an Enron corpus (allowed: {ENRON_ALLOWED}{hint})"}
        head = _text_head(path)
        if not head.strip():
            return {"error": f"empty file (allowed: {ENRON_ALLOWED})"}
        if _looks_like_json(head):
            return {"error": f"a JSON file (a TOFU corpus?), not an Enron CSV (allowed: {ENRON_ALLOWED}; for TOFU "
                             "set data.source: tofu)"}
    try:
        emails, report = load_enron(path)
    except csv.Error:  # quoting the csv module cannot read past (its message is not for users)
        return {"error": f"a CSV whose quoting the csv reader cannot read (allowed: {ENRON_ALLOWED}, fields quoted "
                         "as Python's csv module writes them)"}
    except ValueError as err:  # the header check
        if "header" in str(err):
            return {"error": f"the CSV header has no columns file and message (allowed: {ENRON_ALLOWED})"}
        raise
    facts: dict = {"rows": report.n_rows, "parsed": report.n_parsed, "malformed": report.n_malformed}
    if report.malformed:
        where, reason = report.malformed[0]
        facts["first_malformed"] = f"{where}: {reason}"[:120]
    if path.is_file():
        quoting = csv_quoting_problem(path)
        if quoting:
            facts["quoting"] = quoting
    if not emails:
        facts["train"] = 0
        facts["cleaning"] = {}
        return facts
    cleaned = clean_enron(emails, _bounded_token_counter(), top_n=top_n, seed=seed)
    facts["cleaning"] = dict(cleaned.counts)
    facts["train"] = cleaned.counts["train"]
    return facts


_MESSAGE_ID = re.compile(r'(?m)^(?:[^\n",]*,"?)?Message-ID:')  # a header, or the start of a row glued into a field


def csv_quoting_problem(path: Path) -> str | None:
    """Where an Enron CSV's quoting first breaks, as ``line N: …`` (the physical line the row starts on), or None.

    A quote not closed (or an unescaped one) glues the next rows into one field: the row then has the wrong number
    of fields, or one message field holds several ``Message-ID:`` headers."""
    import csv

    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return None
        width = len(header)
        names = [h.strip().lower() for h in header]
        i_msg = names.index("message") if "message" in names else -1
        start = reader.line_num + 1
        for row in reader:
            if len(row) != width:
                return (f"line {start}: a row of {len(row)} fields, not {width}: a quoted field is not closed "
                        "(or holds an unescaped quote)")
            if i_msg >= 0 and len(_MESSAGE_ID.findall(row[i_msg])) > 1:
                return (f"line {start}: one field holds {len(_MESSAGE_ID.findall(row[i_msg]))} messages: a quoted "
                        "field is not closed (or holds an unescaped quote)")
            start = reader.line_num + 1
    return None


def _bounded_token_counter():
    """GPT-2 token counts as far as the ``< 30 tokens`` rule needs them: a text of >= 30 words has >= 30 tokens
    (every word is at least one), one of < 30 bytes has < 30 (byte-level BPE); only the rest is tokenized."""
    gpt2 = []

    def count(text: str) -> int:
        words = len(text.split())
        if words >= 30:
            return words
        size = len(text.encode("utf-8", errors="surrogateescape"))
        if size < 30:
            return size
        if not gpt2:
            from empriv.models.tokenizer import load_gpt2

            gpt2.append(load_gpt2())
        return len(gpt2[0].encode(text))

    return count


def tofu_facts(path: Path) -> dict:
    """What prepare would find in a TOFU file: ``error`` or ``records``, ``authors``, ``train`` (records of the
    training authors)."""
    from empriv.data.prepare import TOFU_TRAIN_FRACTION
    from empriv.data.tofu import RECORDS_PER_AUTHOR, load_tofu, split_by_author

    if path.is_dir():
        return {"error": f"a directory, not a TOFU file (allowed: {TOFU_ALLOWED})"}
    kind = sniff(path)
    if kind is not None:
        return {"error": f"{_what(kind)}, not a TOFU corpus (allowed: {TOFU_ALLOWED})"}
    head = _text_head(path)
    if not head.strip():
        return {"error": f"empty file (allowed: {TOFU_ALLOWED})"}
    if not _looks_like_json(head):
        hint = "; an Enron CSV? set data.source: enron" if _looks_like_enron_csv(head) else ""
        return {"error": f"not JSON (allowed: {TOFU_ALLOWED}{hint})"}
    try:
        records = load_tofu(path)
    except ValueError as err:
        return {"error": _tofu_problem(str(err), path)}
    facts = {"records": len(records)}
    if not records or len(records) % RECORDS_PER_AUTHOR:
        facts["error"] = (f"{len(records)} records, not a positive multiple of {RECORDS_PER_AUTHOR} (TOFU: author i "
                          f"owns records [{RECORDS_PER_AUTHOR}i, {RECORDS_PER_AUTHOR}(i+1)); allowed: "
                          f"{RECORDS_PER_AUTHOR} records per author)")
        return facts
    facts["authors"] = len(records) // RECORDS_PER_AUTHOR
    try:
        split = split_by_author(records, TOFU_TRAIN_FRACTION)
    except ValueError:
        facts["error"] = (f"{facts['authors']} authors: the author split (first {TOFU_TRAIN_FRACTION:.0%} train) "
                          f"leaves no test author (allowed: at least 5 authors, {5 * RECORDS_PER_AUTHOR} records)")
        return facts
    facts["train"] = len(split.train)
    return facts


def _tofu_problem(message: str, path: Path) -> str:
    """load_tofu's error as one phrase of ours (its JSON-lines errors say ``<path>:<line>: not valid JSON (…)``)."""
    text = message.replace(str(path), "").lstrip(": ")
    if "not valid JSON" in text:
        where = text.split(":")[0]
        return f"line {where}: not valid JSON (allowed: {TOFU_ALLOWED}, one record per line)"
    return " ".join(text.split())[:200] + f" (allowed: {TOFU_ALLOWED})"


# --------------------------------------------------------------------------------------------- the cache


class FactCache:
    """Corpus facts by (kind, file identity, the params they depend on), in one small JSON file."""

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict = {}
        self.dirty = False
        if path is not None and path.exists():
            try:
                self.entries = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, OSError):
                self.entries = {}

    def get(self, key: list, compute):
        k = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        if k not in self.entries:
            self.entries[k] = compute()
            self.dirty = True
            while len(self.entries) > 32:  # the oldest first: a bounded file
                self.entries.pop(next(iter(self.entries)))
        return self.entries[k]

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        from empriv.io import atomic_path

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(self.path) as tmp:
                Path(tmp).write_text(json.dumps(self.entries), encoding="utf-8")
        except OSError:
            pass  # a cache: never a reason to fail


# --------------------------------------------------------------------------------------------- the checks
def corpus_errors(params: Params, root: Path, cache: FactCache) -> list[str]:
    d = params.data
    if d.source not in ("enron", "tofu", "text") or not d.path:
        return []
    path = (root / Path(d.path).expanduser()) if not Path(d.path).expanduser().is_absolute() else Path(d.path).expanduser()
    if not path.exists():
        return []  # the params' own check says so
    if d.source == "text":
        from empriv.pipeline.text_checks import text_corpus_errors

        return text_corpus_errors(params, root, path, cache)
    where = f"data.path: {d.path}"
    if d.source == "enron":
        facts = cache.get(["enron", identity(path), d.top_n_people],  # the counts do not depend on data.seed
                          lambda: enron_facts(path, d.top_n_people, d.seed))
        what = "cleaned training e-mails"
    else:
        facts = cache.get(["tofu", identity(path)], lambda: tofu_facts(path))
        what = "training records (the training authors')"
    if "error" in facts:
        return [f"{where}: {facts['error']}"]
    train = facts["train"]
    if d.source == "tofu" and d.variant is not None:
        return []  # a variant changes the number of training records; prepare counts them
    if train >= d.n_train:
        return []
    detail = _enron_detail(facts) if d.source == "enron" else f"{facts['records']} records, {facts['authors']} authors"
    if train >= MIN_N_TRAIN:
        return [f"{where}: the corpus gives {train} {what} ({detail}), fewer than data.n_train = {d.n_train} "
                f"(allowed: data.n_train <= {train})"]
    return [f"{where}: the corpus gives {train} {what} ({detail}), fewer than data.n_train's minimum {MIN_N_TRAIN} "
            f"(allowed: a corpus with at least {MIN_N_TRAIN} {what})"]


def _enron_detail(facts: dict) -> str:
    parts = [f"{facts['rows']} rows read", f"{facts['parsed']} e-mails parsed"]
    if facts.get("quoting"):
        parts.append(f"broken CSV quoting at {facts['quoting']}")
    elif facts.get("malformed"):
        parts.append(f"{facts['malformed']} malformed, first {facts['first_malformed']}")
    cleaning = facts.get("cleaning") or {}
    if cleaning:
        parts.append(f"{cleaning.get('min_tokens', 0)} kept by cleaning")
    return "; ".join(parts)


def overrides_errors(params: Params, root: Path) -> list[str]:
    from empriv.secrets.records import override_problems

    o = params.secrets.overrides
    if o is None:
        return []
    path = Path(o).expanduser()
    path = path if path.is_absolute() else root / path
    if not path.is_file():
        return [] if not path.exists() else [f"secrets.overrides: {o}: a directory (allowed: a JSONL file of "
                                             "{id, prompt, continuation} objects)"]
    if sniff(path) is not None:
        return [f"secrets.overrides: {o}: a binary file (allowed: a JSONL file of {{id, prompt, continuation}} objects)"]
    return [f"secrets.overrides: {o} {problem}" for problem in override_problems(path)]


def base_errors(params: Params, root: Path) -> list[str]:
    name = params.base.name
    allowed = f"{', '.join(KNOWN_BASES)}, a local model directory, or a hub id in the Hugging Face cache"
    if name in KNOWN_BASES:
        return []
    if is_local_base(name):
        path = Path(name).expanduser()
        path = path if path.is_absolute() else root / path
        if path.is_dir() and not (path / "config.json").is_file():
            return [f"base.name: {name}: no config.json there, not a saved model directory (allowed: {allowed})"]
        if path.is_file():
            return [f"base.name: {name}: a file, not a model directory (allowed: {allowed})"]
        return []
    if hub_model_cached(name):
        return []
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if _offline():
        why = "HF_HUB_OFFLINE is set"
    elif not hub_reachable(endpoint):
        why = f"the hub ({endpoint}) is unreachable"
    else:
        return []
    return [f"base.name: {name!r} is not in the local Hugging Face cache and {why}; fix: `hf download {name}` where "
            f"there is network, or set base.name to a local model directory (allowed: {allowed})"]


def _offline() -> bool:
    return any(os.environ.get(v, "0").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_model_cached(name: str) -> bool:
    """Whether the Hugging Face cache holds ``name``'s config.json (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 — an id the hub library rejects is simply not cached
        return False
    return isinstance(found, str)


def hub_reachable(endpoint: str, timeout: float = 3.0) -> bool:
    """A TCP connection to the hub's host within ``timeout`` seconds (name resolution included)."""
    import socket
    import threading
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    ok: list[bool] = []

    def probe():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


def cuda_devices() -> int:
    """CUDA GPUs on this machine: 0 at once when there is no NVIDIA driver (torch is not imported), else torch's count."""
    if not (Path("/proc/driver/nvidia").exists() or Path("/dev/nvidia0").exists() or os.environ.get("CUDA_VISIBLE_DEVICES")):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_errors(params: Params) -> list[str]:
    device = params.runtime.device
    if params.sweep.engine == "slurm" or device in ("auto", "cpu"):
        return []
    if device.startswith("cuda"):
        n = cuda_devices()
        index = int(device.split(":")[1]) if ":" in device else 0
        if n == 0:
            return [f"runtime.device: {device!r} but this machine has no CUDA GPU (allowed here: auto or cpu)"]
        if index >= n:
            return [f"runtime.device: {device!r} but this machine has {n} CUDA GPU(s) (allowed here: auto, cpu, "
                    f"cuda:0 … cuda:{n - 1})"]
        return []
    if device == "mps":
        available = False
        if sys.platform == "darwin":
            import torch

            available = torch.backends.mps.is_available()
        if not available:
            return ["runtime.device: 'mps' but this machine has no Apple GPU (allowed here: auto or cpu)"]
    return []


def input_errors(params: Params, root: str | Path = ".", cache_path: str | Path | None = CACHE,
                 keys: tuple[str, ...] = ("corpus", "public", "overrides", "base", "device")) -> list[str]:
    """One line per problem of the raw inputs the params name (and of the machine), ``root`` the params file's
    directory; ``keys`` selects the checks (the ``input@<key>`` stage runs its own)."""
    root = Path(root)
    cache = FactCache(None if cache_path is None else root / cache_path)
    errors: list[str] = []
    if "corpus" in keys:
        errors += corpus_errors(params, root, cache)
    if "public" in keys:
        from empriv.pipeline.text_checks import public_file_errors

        errors += public_file_errors(params, root, cache)
    if "overrides" in keys:
        errors += overrides_errors(params, root)
    if "base" in keys:
        errors += base_errors(params, root)
    if "device" in keys:
        errors += device_errors(params)
    cache.save()
    return errors
