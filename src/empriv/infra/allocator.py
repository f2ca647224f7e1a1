"""glibc's allocator, set for training on a CPU: large tensors stay in the heap between steps.

By default glibc serves an allocation above its mmap threshold (128 KiB, raised dynamically up to 32 MiB) with a
fresh ``mmap`` and returns it to the kernel when it is freed, and it trims free memory at the top of the heap. A
training step allocates and frees the same large tensors every step (the logits and their gradient, activations,
per-example gradients), so every step faults them in again page by page: on the default model (a [32, 64, 2,048]
logits tensor is 16 MiB) that was about a fifth of a CPU training step (docs/timing.md, "The allocator").

:func:`tune_malloc` sets glibc's mmap threshold to its largest allowed value (32 MiB on 64-bit systems, which also
turns off the dynamic threshold) and its trim threshold to 1 GiB, so freed blocks are reused from the heap instead.
It changes where memory comes from, not what is computed: results are the same bits. The cost is memory the process
keeps after freeing it (its peak resident set stays reserved until it exits), which stage processes do anyway.

``EMPRIV_MALLOC=default`` keeps glibc's settings. Elsewhere than Linux with glibc (macOS, musl) nothing is changed
and :func:`tune_malloc` says why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

ENV = "EMPRIV_MALLOC"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 * 2**20  # glibc's ceiling for it on 64-bit: HEAP_MAX_SIZE / 2
TRIM_THRESHOLD = 2**30

_applied: str | None = None


def tune_malloc() -> str:
    """Apply the settings above once per process; returns what was done, for the log (``tuned: …``, or why not)."""
    global _applied
    if _applied is not None:
        return _applied
    choice = os.environ.get(ENV, "tuned").strip().lower()
    if choice not in ("tuned", "default"):
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: must be 'tuned' or 'default'")
    if choice == "default":
        _applied = f"glibc defaults ({ENV}=default)"
    elif not sys.platform.startswith("linux"):
        _applied = f"allocator left as is: {sys.platform} is not Linux"
    else:
        _applied = _mallopt()
    log.debug("malloc: %s", _applied)
    return _applied


def _mallopt() -> str:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        gnu_get_libc_version = libc.gnu_get_libc_version
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "allocator left as is: not glibc"
    gnu_get_libc_version.restype = ctypes.c_char_p
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "allocator left as is: glibc refused mallopt"
    version = gnu_get_libc_version().decode()
    return f"tuned: glibc {version} mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold {TRIM_THRESHOLD >> 20} MiB"
