"""How big a cube is, before anything runs (issue 43): ``empriv validate`` prints the number of runs and an estimate of
the wall time on this machine when a cube is large, and refuses one above ``sweep.max_runs`` unless ``--yes``.

A 100,000-run cube used to pass validation ("valid (100000 configurations)") and then sit for a minute in DVC,
building its index of some 200,000 stages, before anything said it would take months. Here:

- **large** means more than :data:`LARGE_RUNS` runs (cube and audit cube together; the default has 64 + 8): the
  runs and the estimate are printed on one line, and validation goes on;
- **above** ``sweep.max_runs`` (default 2,000: more than any preset, whose largest, research-tofu-llama, has 1,081)
  validation stops with one line, before DVC reads dvc.yaml, unless ``empriv validate --yes`` (``make repro
  YES=1``) or a larger ``sweep.max_runs`` says the cube is meant.

**The estimate** is ``empriv study plan``'s FLOP model (:func:`empriv.study_plan.plan`: training, scoring with ACR
and auditing FLOPs of every run) at the CPU rate measured on this machine (``CPU_STEP``: a DP step of the tiny
GPT-2 on one thread), divided by the runs the local sweep runs at once (``sweep.jobs``, at most the cores). It counts
no process start or DVC bookkeeping, and it over-estimates the default's measured cold run about 1.7-fold (11,600
CPU-s estimated, 6,900 measured at 287db45: docs/timing.md): read it as an order of magnitude. A base whose size is unknown
(a hub id not in ``study_plan.MODEL_SIZES``) gets no estimate, only the count.
"""

from __future__ import annotations

import logging
import math
import os

from empriv.config import ConfigError, Params

#: more runs than this (cube + audit cube) is a large cube: its runs and wall-time estimate are printed
LARGE_RUNS = 256
#: above this many runs the cost model itself takes seconds: the refusal gives the count only
PLAN_LIMIT = 200_000


def run_counts(params: Params) -> tuple[int, int]:
    """(runs of ``cube``, runs of ``audit.cube``): products of the axes' lengths, without listing the runs."""
    def size(cube) -> int:
        return math.prod(len(getattr(cube, f)) for f in ("epsilon", "batch_size", "steps", "learning_rate", "seed",
                                                          "unit", "method"))
    return size(params.cube), size(params.audit.cube)


def wall_time_estimate(params: Params) -> tuple[float, int] | None:
    """(seconds of wall time on this machine, runs at once) by the module doc's model, or None without one."""
    from empriv.study_plan import plan

    if sum(run_counts(params)) > PLAN_LIMIT:
        return None
    quiet = logging.getLogger("empriv.study_plan")  # a missing benchmark file is the plan's warning, not validate's:
    level = quiet.level                              # validate's size line stays one line (its fallback is fine here)
    quiet.setLevel(logging.ERROR)
    try:
        cpu_seconds = plan(params)["cpu"]["study_cpu_years"] * 365 * 24 * 3600
    except ConfigError:  # no parameter count for this base
        return None
    finally:
        quiet.setLevel(level)
    slots = max(1, min(params.sweep.jobs, os.cpu_count() or 1))
    return cpu_seconds / slots, slots


def format_duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:.0f} s"


def describe(params: Params) -> str:
    """``N runs (+ M audit runs): about <time> on this machine (...)``."""
    runs, audits = run_counts(params)
    what = f"{runs:,} runs (+ {audits:,} audit runs)"
    estimate = wall_time_estimate(params)
    if estimate is None:
        return f"{what}: no wall-time estimate (base size unknown, or too many runs to model quickly)"
    seconds, slots = estimate
    return (f"{what}: about {format_duration(seconds)} on this machine ({slots} at once; empriv study plan's FLOPs "
            "at this machine's measured DP-step rate, an over-estimate)")


def size_lines(params: Params, *, yes: bool = False) -> list[str]:
    """What validation says about the cube's size: [] for a cube of at most :data:`LARGE_RUNS` runs, one line for
    a large one; above ``sweep.max_runs`` without ``yes`` a one-line :class:`ConfigError`."""
    runs, audits = run_counts(params)
    limit = params.sweep.max_runs
    if runs + audits > limit and not yes:
        raise ConfigError(f"cube: {describe(params)}, above sweep.max_runs {limit:,}, so nothing was run (allowed: a "
                          f"smaller cube; or `empriv validate --yes` / `make repro YES=1`, or sweep.max_runs >= "
                          f"{runs + audits} in params.yaml, if the cube is meant)")
    if runs + audits <= LARGE_RUNS:
        return []
    return [f"warning: large cube: {describe(params)}"]
