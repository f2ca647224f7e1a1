"""The domain's names and values every section shares: known bases and sources, ε (``parse_epsilon``: the one
place ``inf`` is parsed), score names, the raw inputs a params file names, and the strict base of every section."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import AllowInfNan, BaseModel, ConfigDict, ValidationInfo

from empriv.config.errors import ParamError, _did_you_mean

KNOWN_BASES = ("tiny-gpt2", "smollm2-135m")


DATA_SOURCES = ("synthetic-enron", "enron", "synthetic-tofu", "tofu", "text")


REAL_SOURCES = ("enron", "tofu", "text")


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


EPSILON_MAX = 100


INF_SPELLINGS = ("inf", "+inf", ".inf", "infinity", "+infinity")  # any case; YAML's .inf is already a float


EPSILON_ALLOWED = f"a number > 0 and <= EPSILON_MAX = {EPSILON_MAX}, or inf for non-private"


AIR_TEMPLATE = "What genre does {x} write in?"


# data.variant: the TOFU variants (built by empriv.data.variants; named here so that config imports no library package)
VARIANTS = ("tofu-1", "tofu-2", "tofu-4", "tofu-1:7", "tofu-2:6", "tofu-3:5", "tofu-2*")


# Score columns of the run table (empriv.analysis.table builds it from every top-level numeric scalar of
# records/score/<config>.json, which empriv.score.run writes from empriv.score.memorization.aggregate);
# tests/test_validate.py checks these names against what that code produces.
# ACR: acr_* over the frequent secrets, acr_rare_* over those in ≤ score.acr.rare_frequency of the training records.
PRIVACY_SCORES = ("acr_success_rate", "acr_mean", "acr_max", "acr_bound_max", "acr_rare_success_rate", "acr_rare_mean",
                  "air_mean", "air_max",
                  "exposure_gap_mean", "exposure_gap_worst", "exposure_gap_vs_base_mean", "exposure_gap_vs_base_worst",
                  "vmr_mean", "vmr_worst", "vmr_max", "vmr_greedy_mean", "vmr_greedy_max")  # higher = more memorised


UTILITY_SCORES = ("test_nll",)  # lower = better


OTHER_SCORES = ("continuation_nll_mean", "continuation_nll_worst")  # lower = more memorised


SCORE_NAMES = PRIVACY_SCORES + UTILITY_SCORES + OTHER_SCORES


SCORE_COUNTS = ("acr_n_searched", "acr_n_success", "acr_rare_n_searched", "acr_rare_n_success", "n_secrets",
                "n_controls")  # numeric columns that are not scores


def parse_epsilon(value: Any, *, text: bool = False) -> int | float:
    """ε of a params file or command line: a number in (0, EPSILON_MAX], or ``math.inf`` (non-private) spelled
    ``inf``, ``.inf``, ``Infinity`` (any case). The one place ``inf`` is parsed: every reader of an ε uses it.

    Numbers keep their type (2 stays int, 2.0 float: run names are built from them as DVC builds them);
    ``text=True`` also accepts numeric strings (command-line arguments). Raises :class:`ParamError`."""
    if isinstance(value, str):
        t = value.strip().lower()
        if t in INF_SPELLINGS:
            return math.inf
        if not text:
            raise ParamError("not a number", value, EPSILON_ALLOWED)
        try:
            value = float(t)
        except ValueError:
            raise ParamError("not a number", value, EPSILON_ALLOWED) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        raise ParamError("not a number", value, EPSILON_ALLOWED)
    if math.isinf(value) and value > 0:
        return math.inf
    if not value > 0:
        raise ParamError("must be > 0", value, EPSILON_ALLOWED)
    if value > EPSILON_MAX:
        raise ParamError(f"above EPSILON_MAX = {EPSILON_MAX}: σ → 0 and the accountants lose precision; "
                         "write inf for a non-private run", value, EPSILON_ALLOWED)
    return value


def _epsilon_list(v: Any) -> list:
    if not isinstance(v, list):
        raise ParamError("not a list", v, f"a list of ε values, each {EPSILON_ALLOWED}")
    out = []
    for i, e in enumerate(v):
        try:
            out.append(parse_epsilon(e))
        except ParamError as err:
            err.index = i
            raise
    return out


def _existing_path(value: str, info: ValidationInfo) -> Path:
    """``value`` as a path, relative to the params file's directory when loaded from a file (else the cwd)."""
    path = Path(value).expanduser()
    root = (info.context or {}).get("root") if info is not None else None
    return path if path.is_absolute() or root is None else Path(root) / path


# the raw inputs a params file can name (Params.inputs keys) and the params key naming each
RAW_INPUTS = {"corpus": "data.path", "overrides": "secrets.overrides", "base": "base.name", "public": "data.public_path"}


def is_local_base(name: str) -> bool:
    """``base.name`` names a local model directory (rather than a built-in base or a hub id)."""
    return name.startswith(("/", ".", "~"))


def expected_inputs(data_path: str | None, overrides: str | None, base_name: str | None,
                    public_path: str | None = None) -> dict[str, str]:
    """The ``inputs`` mapping of params with these values: each raw file a params key names (``~`` expanded)."""
    named = {"corpus": data_path, "overrides": overrides,
             "base": base_name if isinstance(base_name, str) and is_local_base(base_name) else None,
             "public": public_path}
    return {k: os.path.expanduser(v) for k, v in named.items() if isinstance(v, str)}


Epsilon = Union[int, Annotated[float, AllowInfNan(True)]]


class _Section(BaseModel):
    # strict: 64.0 is not an int, true is not a number, "3" is not a number; a float field accepts an int.
    # allow_inf_nan False: every float must be finite (ε fields opt in to inf).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _known_names(v: list[str], known: tuple[str, ...], what: str = "unknown score") -> list[str]:
    for i, name in enumerate(v):
        if name not in known:
            raise ParamError(what + _did_you_mean(name, known), name, ", ".join(known), index=i)
    return v
