"""Reading ``params.yaml`` (ruamel.yaml, the YAML 1.2 parser DVC uses) and validating it, or one section;
the point of the cube a stage's command line names (:func:`run_from_args`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from empriv.config.errors import ConfigError, ParamError
from empriv.config.params import Params
from empriv.config.rendering import _format_errors, describe
from empriv.config.runs import RunConfig
from empriv.config.values import parse_epsilon


def read_yaml(path: str | Path) -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh)


def parse_section(model: type[BaseModel], raw: Any, key: str, root: str | Path | None = None):
    """Validate ``raw`` as the params section ``key`` (e.g. ``ACRParams`` at ``score.acr``): missing keys get the
    section's documented defaults; raises :class:`ConfigError` with one line per problem."""
    if isinstance(raw, model):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(ParamError("not a mapping", raw, describe(model)).text() if not key else
                          f"{key}: {ParamError('not a mapping', raw, describe(model)).text()}")
    try:
        return model.model_validate(raw, context={"root": root})
    except ValidationError as err:
        raise ConfigError(*_format_errors(err, model, key)) from None


def parse_params(raw: Any, root: str | Path | None = None) -> Params:
    """Validate a params mapping (as read from ``params.yaml``); relative paths in it are relative to ``root``
    (default: the working directory). Raises :class:`ConfigError` with one line per problem."""
    if not isinstance(raw, dict):
        raise ConfigError(f"params: not a mapping of sections (got {type(raw).__name__}; allowed: a mapping with keys "
                          f"{', '.join(Params.model_fields)})")
    return parse_section(Params, raw, "", root)


def load_params(path: str | Path = "params.yaml") -> Params:
    """Load and validate ``params.yaml``; raises :class:`ConfigError` on any invalid value (one line each)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: params file does not exist")
    try:
        raw = read_yaml(path)
    except Exception as err:  # ruamel raises many kinds
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{path}: not valid YAML{where}: {' '.join(str(problem).split())}") from None
    return parse_params(raw, root=path.resolve().parent)


def run_from_args(params: Params, args, *, audit: bool = False) -> RunConfig:
    """The point named on a stage's command line; it must belong to the current ``cube`` (``audit.cube`` for the
    audit stage)."""
    try:
        epsilon = parse_epsilon(args.epsilon, text=True)
    except ParamError as err:
        raise ConfigError(f"--epsilon: {err.text()}") from None
    unit = getattr(args, "unit", None) or "record"
    method = getattr(args, "method", None) or "full"
    wanted = RunConfig(epsilon, int(args.batch_size), int(args.steps), float(args.learning_rate), int(args.seed), unit,
                       method)
    runs = params.audit_runs() if audit else params.runs()
    matches = [r for r in runs if r == wanted]  # 2 == 2.0: compare values, then take the cube's own run
    if not matches:
        given = f"eps{args.epsilon}-b{args.batch_size}-T{args.steps}-lr{args.learning_rate}-s{args.seed}"
        given += ("" if unit == "record" else f" (unit {unit})") + ("" if method == "full" else f" (method {method})")
        raise ConfigError(f"configuration {given} is not in params.yaml's {'audit.cube' if audit else 'cube'}")
    run = matches[0]
    if args.name not in (run.name, run.point_name):
        raise ConfigError(f"--name {args.name!r} does not match the configuration's name {run.name!r}")
    return run
