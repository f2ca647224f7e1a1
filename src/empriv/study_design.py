"""A study's design: the full product of its cube (DVC's matrix), or the research's one-at-a-time design.

The research's GPT-2 sweeps on Enron are partial (its Appendix B.9): a central configuration (b*, T*, η*), then each
hyperparameter varied with the other two held there, plus a few further configurations for coverage. DVC's matrix
stages are products, so a study with ``study.design: one-at-a-time`` runs that design as a union of product cubes,
each a complete DVC pipeline in a worktree of its own (a *part*):

- one part per hyperparameter axis (b, T, η) with more than one value in the preset's cube: that axis' values, the
  other two at their **centre** — the middle of the values as the preset lists them (an odd count is required, so
  the centre is the one the preset names in the middle);
- one part per ``study.extra`` configuration ``[b, T, η]`` (e.g. pairs of equal compute b·T for Fig. 5 (d));
- every part keeps the preset's ε, seeds, units and methods; its audit cube is the preset's with each of b, T, η
  narrowed to the part's values — or, where they do not meet, to the centre (an audit cube cannot be empty; the
  centre's audit is another part's, restored from the run-cache).

The central configuration belongs to every axis part; its runs are trained once — the parts share the project's DVC
cache, and DVC's run-cache restores a stage whose command, dependencies and params were seen before.

Then :func:`empriv.pipeline.analyze_union.analyze_union` runs the analyze stage's own code over the union of the parts' runs (each configuration
once) in ``.studies/<name>`` with :class:`UnionParams`: the research's Fig. 2, Table 8, Table 2 and Fig. 5 over the
whole design, the same outputs as the analyze stage (records/analysis.json, metrics, plots/analysis, the report).
That step is not a DVC stage of its own (no matrix expresses the union); its inputs are the parts' DVC outputs.

A preset without ``study`` (or ``study.design: product``) is one product cube, as before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from empriv.config import ConfigError

DESIGNS = ("product", "one-at-a-time")
AXES = ("batch_size", "steps", "learning_rate")
STUDY_KEYS = {"design", "extra"}


def study_section(raw: dict) -> dict:
    """The preset's ``study`` section, checked: ``design`` (product | one-at-a-time) and ``extra`` (a list of
    ``[b, T, η]``, one-at-a-time only)."""
    section = raw.get("study")
    if section is None:
        return {"design": "product", "extra": []}
    if not isinstance(section, dict):
        raise ConfigError(f"study: must be a mapping with keys {', '.join(sorted(STUDY_KEYS))}, got {section!r}")
    unknown = sorted(set(section) - STUDY_KEYS)
    if unknown:
        raise ConfigError(f"study.{unknown[0]}: unknown key; allowed: {', '.join(sorted(STUDY_KEYS))}")
    design = section.get("design", "product")
    if design not in DESIGNS:
        raise ConfigError(f"study.design: {design!r} is not a design; allowed: {', '.join(DESIGNS)}")
    extra = section.get("extra") or []
    if not isinstance(extra, list):
        raise ConfigError(f"study.extra: must be a list of [b, T, η], got {extra!r}")
    for i, point in enumerate(extra):
        if (not isinstance(point, (list, tuple)) or len(point) != 3
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in point)
                or not all(isinstance(v, int) for v in point[:2])):
            raise ConfigError(f"study.extra[{i}]: {point!r} is not [b, T, η] (two positive integers, a positive "
                              "number)")
    if extra and design == "product":
        raise ConfigError("study.extra: further configurations need study.design: one-at-a-time (a product cube "
                          "already has every combination)")
    return {"design": design, "extra": [list(p) for p in extra]}


def centre(raw: dict) -> dict:
    """Per axis, the middle of the cube's values as listed (an odd count is required)."""
    cube = raw.get("cube") or {}
    out = {}
    for axis in AXES:
        values = list(cube.get(axis) or [])
        if len(values) % 2 == 0:
            raise ConfigError(f"cube.{axis}: {values!r} has {len(values)} values; study.design: one-at-a-time needs "
                              "an odd count (the middle one is the centre the other axes vary around)")
        out[axis] = values[len(values) // 2]
    return out


def part_name(axis_or_point) -> str:
    """A part's name: the varied axis, or ``b<b>-T<T>-lr<η>`` of an extra configuration."""
    if isinstance(axis_or_point, str):
        return axis_or_point
    from empriv.config.runs import format_number

    b, t, lr = axis_or_point
    return f"b{b}-T{t}-lr{format_number(lr)}"


def _narrow(audit_cube: dict, values: dict) -> dict:
    out = dict(audit_cube)
    for axis, allowed in values.items():
        out[axis] = [v for v in (audit_cube.get(axis) or []) if v in allowed]
    return out


def parts(raw: dict) -> list[tuple[str, dict]]:
    """``(part name, params)`` of every part of the design (the ``study`` section left out of each); a product
    design is one part named ``""``."""
    section = study_section(raw)
    base = {k: v for k, v in raw.items() if k != "study"}
    if section["design"] == "product":
        return [("", base)]
    from empriv.config import parse_params

    parse_params(base)  # the preset's own keys first: a bad value is named as in params.yaml
    mid = centre(raw)
    cube = raw.get("cube") or {}
    out = []
    points: list[tuple[str, dict]] = []
    for axis in AXES:
        if len(cube.get(axis) or []) > 1:
            points.append((part_name(axis), {a: (list(cube[a]) if a == axis else [mid[a]]) for a in AXES}))
    for point in section["extra"]:
        points.append((part_name(point), {a: [v] for a, v in zip(AXES, point)}))
    seen = set()
    for name, values in points:
        if name in seen:
            raise ConfigError(f"study.extra: {name} is listed twice")
        seen.add(name)
        part = json.loads(json.dumps(base))  # a deep copy
        part["cube"] = {**cube, **values}
        audit = part.setdefault("audit", {})
        if isinstance(audit.get("cube"), dict):
            narrowed = _narrow(audit["cube"], values)
            if not all(narrowed[a] for a in AXES):  # an audit cube cannot be empty: the centre's audit (another
                narrowed = _narrow(audit["cube"], {a: [mid[a]] for a in AXES})  # part's, restored from the run-cache)
            if not all(narrowed[a] for a in AXES):
                raise ConfigError(f"audit.cube: holds none of the part {name}'s configurations nor the centre "
                                  f"(b {mid['batch_size']}, T {mid['steps']}, η {mid['learning_rate']}); a "
                                  "one-at-a-time design's audit cube must include the centre")
            audit["cube"] = narrowed
        out.append((name, part))
    if not out:
        raise ConfigError("study.design: one-at-a-time needs at least one of cube.batch_size, cube.steps, "
                      "cube.learning_rate with more than one value, or a study.extra configuration")
    return out


def union(runs_of_parts: list[list]) -> list:
    """The parts' runs, each once, in the parts' order."""
    return list(dict.fromkeys(r for runs in runs_of_parts for r in runs))


def union_params(raw: dict, part_raws: list[dict]):
    """:class:`UnionParams` of the preset (the ``study`` section dropped) over the parts' runs."""
    from empriv.config import parse_params
    from empriv.config.loading import parse_section

    params = parse_section(__getattr__("UnionParams"), {k: v for k, v in raw.items() if k != "study"}, "")
    parsed = [parse_params(p) for p in part_raws]
    params.set_union(union([p.runs() for p in parsed]), union([p.audit_runs() for p in parsed]))
    return params


def _union_class():
    from pydantic import PrivateAttr

    from empriv.config import Params

    class UnionParams(Params):
        """Params whose runs are a union of product cubes (the analysis reads runs() and audit_runs() only)."""

        _runs: list = PrivateAttr(default_factory=list)
        _audit_runs: list = PrivateAttr(default_factory=list)

        def set_union(self, runs: list, audit_runs: list) -> None:
            self._runs, self._audit_runs = list(runs), list(audit_runs)

        def runs(self) -> list:
            return list(self._runs)

        def audit_runs(self) -> list:
            return list(self._audit_runs)

    return UnionParams


def __getattr__(name: str):
    if name == "UnionParams":  # built on first use: pydantic and the config are not imported by `empriv --help`
        if "_UnionParams" not in globals():
            globals()["_UnionParams"] = _union_class()
        return globals()["_UnionParams"]
    raise AttributeError(name)


def gather(parts: list[tuple[Path, object]], work: Path) -> list[str]:
    """Copy into ``work`` (its records, metrics, analysis plots and report removed first) each run's train, score
    and audit record and the base's record from the part that ran it — ``parts``: (worktree, its Params), in order;
    a run shared by parts (the centre) comes from the first. A part's worktree also holds the records committed for
    the default run, so a record is only ever read from a part whose own cube has that run. Returns the relative
    paths copied."""
    from empriv import paths

    for d in ("records", "metrics", "plots/analysis", "plots/profiles", "reports"):
        shutil.rmtree(work / d, ignore_errors=True)
    copied: dict[str, None] = {}
    for part_work, params in parts:
        wanted = ([Path(d) / f"{r.file_stem}.json" for r in params.runs()
                   for d in (paths.TRAIN_METRICS_DIR, paths.SCORE_METRICS_DIR)]
                  + [Path(paths.AUDIT_METRICS_DIR) / f"{r.file_stem}.json" for r in params.audit_runs()]
                  + [Path(paths.BASE_METRICS)])
        for rel in wanted:
            if rel.as_posix() in copied:
                continue
            if not (part_work / rel).is_file():
                raise RuntimeError(f"{part_work / rel}: missing; the part {part_work.name} has not finished "
                                   "(run the study again)")
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(part_work / rel, work / rel)
            copied[rel.as_posix()] = None
    return list(copied)
