"""A run's W&B transaction log (the ``.wandb`` file of a run directory): read it strictly, tell a finished log from
one W&B is still writing, and wait for it to finish.

**Why wait.** Offline, ``run.finish()`` returns before the log is written (W&B 0.31, issue 45): it waits for W&B's
service (``wandb-core``) to handle the run's exit record, then tells the service the run is done with a message it
does not wait for (``inform_finish``); only on that message does the service write its buffered records and close
the file. When ``finish`` returned the file held its 7-byte header alone, and was whole 25-80 ms later (longer on a
busy machine). A process killed in that window, or a service that dies in it, leaves a log that is no copy of the
run. So an older local copy of a run is deleted only once the new copy's log is *finished*: its exit record (the
record whose absence makes ``wandb sync`` call a log incomplete) is there and the file ends on a record boundary
(:func:`finished_records`, :func:`wait_for_finished_log`).

**The format** (read as wandb-core's own reader reads it, ``core/pkg/leveldb/record.go``; W&B 0.31 ships no Python
reader): the header ``:W&B``, magic 0xBEE1, version 0 at the start of the first 32 KiB block, then chunks that never
cross a block boundary, each a 7-byte header — CRC-32 (IEEE) of the chunk type and the payload, payload length
(little-endian), type FULL / FIRST / MIDDLE / LAST — and its payload; fewer than 7 bytes left in a block are zero
padding, and a zero chunk header between records skips the rest of its block. Each record (one FULL chunk, or FIRST,
MIDDLE…, LAST) is a ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

#: the log's header: ident ``:W&B``, magic 0xBEE1, version 0
LOG_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
#: bytes per block; a chunk never crosses a block boundary
LOG_BLOCK = 32 * 1024
#: bytes of a chunk's header: CRC-32, payload length, type
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
#: seconds to wait for a new copy's log to finish before older copies may go (it takes well under a second)
FINISH_TIMEOUT_S = 30.0
#: seconds between two looks at a log being written
POLL_S = 0.01


class LogEndsMidRecord(Exception):
    """The log ends inside a chunk, or between the first and the last chunk of a record: it is still being written
    (wandb-core appends whole chunks, but a reader may see a write half done), or its writer died."""


class CorruptTransactionLog(ValueError):
    """The file is not a W&B transaction log, or a chunk of it is wrong (checksum, order, padding, a record that
    does not parse): no amount of waiting makes it a finished log."""


class LogNotFinished(TimeoutError):
    """The log did not finish within the time allowed."""


def read_transaction_log(path: str | Path) -> list:
    """The records of the transaction log at ``path`` (module doc), every chunk checked. A wrong checksum, a chunk
    out of order, non-zero padding or a record that does not parse raises :class:`CorruptTransactionLog` naming the
    offset; a file that ends inside a chunk or a record raises :class:`LogEndsMidRecord`."""
    from wandb.proto import wandb_internal_pb2

    path = Path(path)
    data = path.read_bytes()
    if len(data) < len(LOG_HEADER):
        raise LogEndsMidRecord(f"{path}: {len(data)} bytes, not even the header")
    if data[: len(LOG_HEADER)] != LOG_HEADER:
        raise CorruptTransactionLog(f"{path}: not a W&B transaction log (header {data[:7]!r})")

    def check(ok: bool, what: str) -> None:
        if not ok:
            raise CorruptTransactionLog(f"{path}: {what}")

    records, pending, first_at, pos = [], None, None, len(LOG_HEADER)
    while pos < len(data):
        block_end = (pos // LOG_BLOCK + 1) * LOG_BLOCK
        if block_end - pos < CHUNK_HEADER:  # no room for a chunk header: padding up to the next block
            check(not data[pos:block_end].strip(b"\0"), f"non-zero padding at offset {pos}")
            pos = block_end
            continue
        if pos + CHUNK_HEADER > len(data):
            raise LogEndsMidRecord(f"{path}: ends inside a chunk header at offset {pos} ({len(data)} bytes)")
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if crc == length == kind == 0:  # a zeroed rest of a block: W&B's reader skips it between records
            check(pending is None, f"a zero chunk header inside the record at offset {first_at}")
            check(not data[pos:block_end].strip(b"\0"), f"a zero chunk header before data at offset {pos}")
            pos = block_end
            continue
        end = pos + CHUNK_HEADER + length
        check(end <= block_end, f"the chunk at offset {pos} ({length} bytes) crosses a block boundary")
        if end > len(data):
            raise LogEndsMidRecord(f"{path}: ends inside the chunk at offset {pos}: {len(data) - pos - CHUNK_HEADER} "
                                   f"of its {length} payload bytes")
        payload = data[pos + CHUNK_HEADER : end]
        check(zlib.crc32(payload, zlib.crc32(bytes([kind]))) == crc, f"checksum mismatch at offset {pos}")
        if kind in (FULL, FIRST):
            check(pending is None, f"a new record at offset {pos} before the record at {first_at} ended")
            pending, first_at = b"", pos
        else:
            check(kind in (MIDDLE, LAST), f"unknown chunk type {kind} at offset {pos}")
            check(pending is not None, f"a continuation chunk at offset {pos} without a first chunk")
        pending += payload
        if kind in (FULL, LAST):
            rec = wandb_internal_pb2.Record()
            try:
                rec.ParseFromString(pending)
            except Exception as err:  # the checksums were right: W&B wrote what does not parse
                raise CorruptTransactionLog(f"{path}: the record at offset {first_at} does not parse: {err}") from err
            records.append(rec)
            pending = None
        pos = end
    if pending is not None:
        raise LogEndsMidRecord(f"{path}: ends inside the record at offset {first_at} (its last chunk is missing)")
    return records


def transaction_log_of(run_dir: str | Path) -> Path | None:
    """The transaction log of a local run directory (``run-<id>.wandb``), or None while there is none."""
    logs = sorted(Path(run_dir).glob("*.wandb"))
    return logs[0] if len(logs) == 1 else None


def finished_records(path: str | Path | None) -> list | None:
    """The records of the log at ``path`` if it is finished — its exit record is there and the file ends on a record
    boundary — else None (no file yet, or still being written). A corrupt log raises
    :class:`CorruptTransactionLog`."""
    if path is None:
        return None
    try:
        records = read_transaction_log(path)
    except (LogEndsMidRecord, FileNotFoundError):
        return None
    return records if any(r.WhichOneof("record_type") == "exit" for r in records) else None


def wait_for_finished_log(path: str | Path, *, timeout: float = FINISH_TIMEOUT_S, poll: float = POLL_S) -> list:
    """The records of the log at ``path`` (a ``.wandb`` file, or a run directory holding one) once it is finished
    (:func:`finished_records`), looking every ``poll`` seconds; :class:`LogNotFinished` after ``timeout`` seconds, and
    a corrupt log (:class:`CorruptTransactionLog`) at once."""
    path = Path(path)
    deadline = time.monotonic() + timeout
    while True:
        log = transaction_log_of(path) if path.is_dir() else path
        records = finished_records(log)
        if records is not None:
            return records
        if time.monotonic() >= deadline:
            try:
                size = f"{log.stat().st_size} bytes" if log is not None else "no log file"
            except FileNotFoundError:
                size = "no log file"
            raise LogNotFinished(f"{log or path}: no exit record on a record boundary after {timeout:g} s ({size}): "
                                 "the run was not finished, or W&B's service died before it wrote the log")
        time.sleep(poll)
