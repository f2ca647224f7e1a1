"""Shared plumbing for the thin entry scripts in ``stages/``: params, logging, threads, errors."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from empriv.config import ConfigError, Params, load_params

log = logging.getLogger("empriv")


def setup_logging() -> None:
    level = os.environ.get("EMPRIV_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


def set_threads(params: Params) -> None:
    import torch

    torch.set_num_threads(params.runtime.threads)


def run_stage(main: Callable[[Params], None], params_path: str | Path = "params.yaml") -> None:
    """Load and validate params, then run ``main``; invalid input exits 2 with a clear message."""
    setup_logging()
    try:
        params = load_params(params_path)
        main(params)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except FileNotFoundError as err:
        print(f"error: missing input: {err}", file=sys.stderr)
        raise SystemExit(2) from None
