"""Typed, validated view of ``params.yaml`` — the one place every stage loads its parameters from.

A bad value fails here, before any work starts, with a :class:`ConfigError` (a ``ValueError``) whose
message has one self-contained line per problem: ``<key>: <what is wrong> (got <value>; allowed: …)``.
Validation is strict: an integer field rejects ``64.0`` and ``true``, a float field accepts an integer,
numbers must be finite (ε may be ``inf``: non-private), unknown keys are rejected at every level with a
"did you mean" suggestion, and files the params name must exist. ``params.yaml`` is read with
ruamel.yaml, the YAML 1.2 parser DVC itself uses, so ``1e-2`` means the same number to DVC and to empriv.

The package holds one module per concern (``errors``, ``values``, ``rendering``, ``data``, ``methods``, ``training``, ``cube``, ``scoring``,
``auditing``, ``infra``, ``params``, ``runs``, ``loading``); every name is importable from ``empriv.config`` as before.
"""

from __future__ import annotations

from empriv.config.errors import (  # noqa: F401
    ConfigError, error_lines, _NOTHING, _short, ParamError, _did_you_mean,
)
from empriv.config.values import (  # noqa: F401
    KNOWN_BASES, DATA_SOURCES, REAL_SOURCES, _HUB_ID, EPSILON_MAX, INF_SPELLINGS, EPSILON_ALLOWED, AIR_TEMPLATE, VARIANTS, PRIVACY_SCORES, UTILITY_SCORES, OTHER_SCORES, SCORE_NAMES, SCORE_COUNTS, parse_epsilon, _epsilon_list, _existing_path, RAW_INPUTS, is_local_base, expected_inputs, Epsilon, _Section, _known_names,
)
from empriv.config.rendering import (  # noqa: F401
    _model_of, _unwrap, _list_item, _bounds, _PLURAL, describe, _WHAT, _error_line, _format_errors,
)
from empriv.config.data import (  # noqa: F401
    RuntimeParams, DataParams, TokenizerParams, BaseParams, SecretsParams,
)
from empriv.config.methods import (  # noqa: F401
    BUILTIN, MethodTraits, UnknownMethodError, declare, forget, method_names, method_traits,
)
from empriv.config.training import (  # noqa: F401
    PrivacyParams, LoraParams, ADAPTATION_METHODS, PrefixParams, PromptParams, HeadParams, DPFlatParams, DPZeroParams, VariantParams, TrainParams,
)
from empriv.config.cube import (  # noqa: F401
    _CubeAxes, CubeParams,
)
from empriv.config.scoring import (  # noqa: F401
    ACRSearchParams, ACRParams, ScoreParams, AnalyzeParams,
)
from empriv.config.auditing import (  # noqa: F401
    CanariesParams, _default_audit_cube, AuditParams, AdaptationAuditCube, AdaptationAuditParams,
)
from empriv.config.infra import (  # noqa: F401
    SlurmParams, SweepParams,
)
from empriv.config.params import (  # noqa: F401
    Params,
)
from empriv.config.runs import (  # noqa: F401
    format_number, RunConfig, config_name,
)
from empriv.config.loading import (  # noqa: F401
    read_yaml, parse_section, parse_params, load_params, run_from_args,
)
