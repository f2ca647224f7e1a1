"""The analyze stage's code over the union of a one-at-a-time design's parts (:mod:`empriv.study_design`):
``python -m empriv.pipeline.analyze_union <spec.json>``, run by ``empriv study run`` in ``.studies/<name>`` with
that worktree's ``src`` first on the path. Not a DVC stage: no matrix expresses the union; its inputs are the
parts' DVC outputs, each run's records read from the part that ran it (:func:`empriv.study_design.gather`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from empriv.study_design import gather, union_params


def analyze_union(raw: dict, part_raws: list[dict], part_works: list[Path], work: Path) -> dict:
    """The analyze stage's code over the union of the parts' runs, in ``work`` (run as ``python -m
    empriv.pipeline.analyze_union`` with ``work`` as the working directory and its ``src`` first on the path)."""
    import os

    from empriv.config import parse_params
    from empriv.pipeline.analyze import main as analyze

    params = union_params(raw, part_raws)
    gather([(Path(w), parse_params(p)) for w, p in zip(part_works, part_raws)], work)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        return analyze(params)
    finally:
        os.chdir(cwd)


def main(argv: list[str] | None = None) -> int:
    """``python -m empriv.pipeline.analyze_union <spec.json>``: :func:`analyze_union` from a JSON spec (``raw``, ``parts``,
    ``part_works``, ``work``) — what ``empriv study run`` calls in the union's worktree."""
    spec = json.loads(Path((argv or sys.argv[1:])[0]).read_text(encoding="utf-8"))
    analyze_union(spec["raw"], spec["parts"], [Path(p) for p in spec["part_works"]], Path(spec["work"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
