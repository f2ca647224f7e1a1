"""Which steps of a training curve record the ε spent so far."""

from __future__ import annotations

#: the ε points of a training curve that get an accounting call (evenly spread, the last always included)
MAX_EPSILON_POINTS = 20


def epsilon_checkpoints(steps: int, log_every: int, max_points: int = MAX_EPSILON_POINTS) -> list[int]:
    """Steps t (1..T, steps done) at which a training curve records the ε spent so far: the logged steps,
    thinned evenly to at most ``max_points``, the last step always included."""
    if steps < 1:
        return []
    logged = sorted({s + 1 for s in range(steps) if s % max(1, log_every) == 0} | {steps})
    if len(logged) <= max_points:
        return logged
    picks = {logged[round(i * (len(logged) - 1) / (max_points - 1))] for i in range(max_points)}
    return sorted(picks | {steps})
