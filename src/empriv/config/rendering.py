"""pydantic's findings rendered as :class:`~empriv.config.errors.ConfigError` lines: the key, what is wrong,
the value, and what the field allows (:func:`describe` reads it off the annotation and its bounds)."""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from empriv.checks import interval_text
from empriv.config.errors import _NOTHING, ParamError, _did_you_mean, _short
from empriv.config.params import Params
from empriv.config.values import EPSILON_ALLOWED, Epsilon


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        for a in get_args(annotation):
            if isinstance(a, type) and issubclass(a, BaseModel):
                return a
    return None


def _unwrap(annotation: Any, metadata: list) -> tuple[Any, list]:
    while get_origin(annotation) is Annotated:
        annotation, *more = get_args(annotation)
        metadata = [*metadata, *more]
    return annotation, metadata


def _list_item(annotation: Any) -> Any:
    annotation, _ = _unwrap(annotation, [])
    if get_origin(annotation) in (Union, types.UnionType):
        for a in get_args(annotation):
            if get_origin(a) is list:
                return get_args(a)[0]
    return get_args(annotation)[0] if get_origin(annotation) is list else annotation


def _bounds(metadata: list) -> str:
    lo = hi = None
    for m in metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(m, attr, None)
            if value is not None:
                if attr in ("ge", "gt"):
                    lo = (sym, value)
                else:
                    hi = (sym, value)
    return interval_text(lo, hi)


_PLURAL = {int: "integers", float: "numbers", str: "strings", bool: "true/false values"}


def describe(annotation: Any, metadata: list | tuple = ()) -> str:
    """What a field with this annotation (and Field constraints) accepts, in words."""
    annotation, metadata = _unwrap(annotation, list(metadata))
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        parts = [describe(a, metadata) for a in args if a is not type(None)]
        parts = list(dict.fromkeys(p for p in parts if p))
        if annotation == Epsilon or set(parts) == {"an integer", "a finite number"}:
            parts = [EPSILON_ALLOWED] if annotation == Epsilon else ["a finite number" + _bounds(metadata)]
        return " or ".join(parts) + (", or null" if type(None) in args else "")
    if origin is Literal:
        return ("one of " if len(args) > 1 else "") + ", ".join(repr(a) for a in args)
    if origin is list:
        item, _ = _unwrap(args[0], [])
        if item == Epsilon:
            return f"a list of ε values ({EPSILON_ALLOWED})"
        if get_origin(item) in (Union, types.UnionType) and set(get_args(item)) <= {int, float}:
            return "a list of numbers"
        return "a list of " + _PLURAL.get(item, "values")
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer" + _bounds(metadata)
    if annotation is float:
        return "a finite number" + _bounds(metadata)
    if annotation is str:
        return "a string"
    model = _model_of(annotation)
    if model is not None:
        return "a mapping with keys " + ", ".join(model.model_fields)
    return ""


_WHAT = {"int_type": "not an integer", "int_from_float": "not an integer", "int_parsing": "not an integer",
         "float_type": "not a number", "float_parsing": "not a number", "finite_number": "not a finite number",
         "bool_type": "not true or false", "string_type": "not a string", "list_type": "not a list",
         "literal_error": "not an allowed value", "model_type": "not a mapping", "dict_type": "not a mapping",
         "model_attributes_type": "not a mapping", "too_short": "too few values", "too_long": "too many values",
         "greater_than": "out of range", "greater_than_equal": "out of range", "less_than": "out of range",
         "less_than_equal": "out of range", "missing": "is required", "none_required": "must be null"}


def _error_line(e: dict, root: type[BaseModel], prefix: str) -> tuple[str, str, bool]:
    """(key, line, from a union branch) of one pydantic error, its location walked along the models' fields.

    A union (``int | float``) reports one error per branch: ``branch`` is then True and the caller keeps one."""
    model: type[BaseModel] | None = root
    annotation: Any = root
    metadata: list = []
    key = prefix
    branch = False
    unknown = None
    for part in e["loc"]:
        if isinstance(part, int):
            key += f"[{part}]"
            annotation, metadata = _list_item(annotation), []
        elif get_origin(annotation) is dict and isinstance(part, str):  # a key of a dict[str, X] field
            key = f"{key}.{part}"
            annotation, metadata = get_args(annotation)[1], []
            model = _model_of(annotation)
        elif model is not None and part in model.model_fields:
            field = model.model_fields[part]
            key = f"{key}.{part}" if key else part
            annotation, metadata = field.annotation, list(field.metadata)
            model = _model_of(annotation)
        elif model is not None and e["type"] == "extra_forbidden":
            key = f"{key}.{part}" if key else str(part)
            unknown = (part, model)
        else:  # the branch of a union (int | 'auto', int | float …): not part of the key
            branch = True
    err = (e.get("ctx") or {}).get("error")
    if isinstance(err, ParamError):
        if err.key:
            key = f"{key}.{err.key}" if key else err.key
        if err.index is not None:
            key += f"[{err.index}]"
        return key, f"{key}: {err.text()}", branch
    got = e.get("input", _NOTHING)
    if unknown is not None:
        name, section = unknown
        allowed = ", ".join(section.model_fields)
        what = "unknown key" + _did_you_mean(name, section.model_fields)
        return key, f"{key}: {ParamError(what, allowed=allowed).text()}", branch
    if e["type"] == "missing":
        return key, f"{key}: {ParamError('is required', allowed=describe(annotation, metadata)).text()}", branch
    if isinstance(err, ValueError):  # a validator's own message
        text = " ".join(str(err).split()) + (f" (got {_short(got)})" if got is not _NOTHING and not isinstance(got, dict) else "")
        return key, f"{key}: {text}" if key else text, branch
    what = _WHAT.get(e["type"], e["msg"].removeprefix("Value error, "))
    if isinstance(got, dict):
        got = _NOTHING
    return key, f"{key}: {ParamError(what, got, describe(annotation, metadata) or None).text()}", branch


def _format_errors(err: ValidationError, root: type[BaseModel] = None, prefix: str = "") -> list[str]:
    """One self-contained line per problem; a union's several branch errors for one key become one line."""
    lines: dict[str, str] = {}
    kinds: dict[str, str] = {}
    for e in err.errors():
        key, line, branch = _error_line(e, root or Params, prefix)
        slot = key if branch else f"{key}#{len(lines)}"
        # of a union's branch errors, keep the most telling: "not a finite number" beats "not an integer"
        if slot not in lines or kinds.get(slot) == "int_type":
            lines[slot], kinds[slot] = line, e["type"]
    return list(lines.values())
