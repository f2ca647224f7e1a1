"""Shared plumbing of the stage processes: params, logging, threads, cost records, errors.

Each ``dvc.yaml`` stage runs a thin script, ``stages/<stage>.py``, that passes its command line to
``empriv.pipeline.<stage>.cli``; ``cli`` parses the arguments and runs the stage's ``main`` through
:func:`run_stage` (load and validate params, log, record the cost, turn a user error into exit status 2). The model
stages' scripts run in a warm worker (``python -m empriv.infra.warm stages/<stage>.py …``; same results)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from empriv.config import ConfigError, Params, error_lines, load_params

log = logging.getLogger("empriv")


def setup_logging() -> None:
    level = os.environ.get("EMPRIV_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


def set_threads(params: Params) -> None:
    import torch

    torch.set_num_threads(params.runtime.threads)


def peak_memory() -> dict:
    """This process's peak memory so far, for a run's metadata: resident set (MB; under the warm worker it includes
    the pages shared with the server) and, on CUDA, the most torch allocated on each device."""
    import resource

    out = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["peak_cuda_mb"] = {str(i): round(torch.cuda.max_memory_allocated(i) / 2**20, 1)
                               for i in range(torch.cuda.device_count())}
    return out


def record_cost(started: float, log_path: str | None = None, stage: str | None = None) -> dict:
    """Wall time, CPU time and peak memory (RSS) of this stage process; appended as one JSON line to
    ``$EMPRIV_TIMING_LOG`` when that is set (the preset studies use it), never into DVC outputs. The record's name is
    ``stage`` (default: the script's name) and the cube point of the command line."""
    import json
    import resource
    import time

    usage = resource.getrusage(resource.RUSAGE_SELF)
    name = stage or Path(sys.argv[0]).stem
    if "--name" in sys.argv[1:-1]:
        name += "@" + sys.argv[sys.argv.index("--name") + 1]
    if "--unit" in sys.argv[1:-1] and sys.argv[sys.argv.index("--unit") + 1] != "record":
        name += "-" + sys.argv[sys.argv.index("--unit") + 1]  # the run's name: one record per stage process
    if "--dataset" in sys.argv[1:-1]:  # adaptation_data@ / adaptation_audit@: the dataset and the point
        args = sys.argv[1:]
        name += "@" + args[args.index("--dataset") + 1] + "".join(
            f"-{short}{args[args.index(flag) + 1]}" for flag, short in
            (("--epsilon", "eps"), ("--batch-size", "b"), ("--steps", "T"), ("--learning-rate", "lr"), ("--seed", "s"))
            if flag in args[:-1])
    if "--method" in sys.argv[1:-1]:
        name += "-" + sys.argv[sys.argv.index("--method") + 1]
    record = {"stage": name, "wall_s": round(time.time() - started, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
              "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    log_path = log_path or os.environ.get("EMPRIV_TIMING_LOG")
    if log_path:
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    return record


def debug_enabled() -> bool:
    """``EMPRIV_DEBUG=1``: user errors show their traceback too (else one ``error: …`` line each)."""
    return os.environ.get("EMPRIV_DEBUG", "") not in ("", "0")


def run_without_arguments(main: Callable[[Params], None], description: str | None,
                          argv: list[str] | None = None) -> None:
    """The command line of a stage that takes no arguments: ``--help`` prints ``description``, anything else is a
    usage error (status 2); then :func:`run_stage`."""
    import argparse

    argparse.ArgumentParser(description=description).parse_args(argv)
    run_stage(main, stage=main.__module__.rsplit(".", 1)[-1])  # the stage's name (stages/mine_secrets.py: secrets)


def run_stage(main: Callable[[Params], None], params_path: str | Path = "params.yaml", *,
              stage: str | None = None) -> None:
    """Load and validate params, then run ``main``. A user error — invalid params or inputs (:class:`ConfigError`),
    a missing input file, a file or directory it may not write, a library's ``ValueError`` naming a bad value —
    exits 2 with one ``error: …`` line per problem and no traceback (``EMPRIV_DEBUG=1`` shows it); anything else is
    a bug and keeps its traceback."""
    import time

    from empriv.infra.allocator import tune_malloc

    started = time.time()
    setup_logging()
    try:
        tune_malloc()  # large tensors stay in the heap between steps (same results; docs/timing.md, "The allocator")
        params = load_params(params_path)
        main(params)
        record_cost(started, stage=stage)
    except (ConfigError, FileNotFoundError, PermissionError, ValueError) as err:
        if debug_enabled():
            raise
        print(error_lines(err), file=sys.stderr)
        raise SystemExit(2) from None
