"""validate: the whole params file (and dvc.yaml's cube matrices) checked before any other stage runs.

    python stages/validate_params.py [--params params.yaml] [--dvc-yaml dvc.yaml] [--fill-defaults] [--debug]

DVC deletes a stage's outputs (git-tracked metrics included) before the stage runs, so a stage that rejects
its own params has already lost them. This stage runs first and every other stage depends on its marker
(``paths.PARAMS_OK``): a bad params file stops ``dvc repro`` here, with one ``error: <key>: …`` line per
problem and exit status 2, before anything else is touched. The marker is written only when the params are
valid and its content never changes ("valid\\n"), so a valid edit re-runs this stage but never, through the
marker, any other (each stage still depends on the params keys it reads).

It also deletes the fingerprints of raw inputs the params no longer name (``data/inputs/<key>/``, see
:mod:`empriv.pipeline.inputs`): their ``input@`` stage is gone and the dependents must not see them.
``--fix-inputs`` first rewrites the params file's ``inputs`` mapping to the raw files its keys name (comments kept).

Reads: params.yaml, dvc.yaml (optional). Writes: ``paths.PARAMS_OK``. Params: all of them (the whole file).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from empriv import paths
from empriv.config import CubeParams, ConfigError, Params, error_lines, format_number, load_params, read_yaml

MARKER_TEXT = "valid\n"
DVC_YAML = Path("dvc.yaml")
NAME_TEMPLATE = "eps${item.epsilon}-b${item.batch_size}-T${item.steps}-lr${item.learning_rate}-s${item.seed}"
_REF = re.compile(r"^\$\{\s*([\w.]+)\s*\}$")


def _dvc_str(value: Any) -> str:
    """A matrix value as DVC interpolates it into a command line and a stage name."""
    from empriv.infra.dvc_adapter import interpolated_str

    return interpolated_str(value)


def format_list(values) -> str:
    return "[" + ", ".join(format_number(v) for v in values) + "]"


def _lookup(raw: dict, dotted: str) -> tuple[bool, Any]:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _cube_of(params: Params, prefix: str) -> CubeParams | None:
    return {"cube": params.cube, "audit.cube": params.audit.cube}.get(prefix)


def dvc_matrix_errors(raw: dict, params: Params, dvc_yaml: str | Path = DVC_YAML) -> list[str]:
    """One line per inconsistency between ``dvc.yaml``'s matrix stages and the params' cubes.

    A matrix stage over ``${cube.…}`` or ``${audit.cube.…}`` must take every cube field under its own name, and
    DVC must spell every value the way empriv names runs (``str`` of the YAML value; ``inf`` for ε = ∞): a
    stage's ``--name`` that empriv does not recognise fails every train@/score@/audit@ run after DVC deleted
    its outputs."""
    dvc_yaml = Path(dvc_yaml)
    if not dvc_yaml.exists():
        return []
    try:
        stages = (read_yaml(dvc_yaml) or {}).get("stages") or {}
    except Exception as err:  # ruamel raises many kinds
        return [f"{dvc_yaml}: not valid YAML: {' '.join(str(err).split())}"]
    fields = tuple(CubeParams.model_fields)
    errors: list[str] = []
    for name, stage in stages.items():
        matrix = stage.get("matrix") if isinstance(stage, dict) else None
        if not isinstance(matrix, dict):
            continue
        where = f"{dvc_yaml}: stages.{name}.matrix"
        refs = {k: _REF.match(v).group(1) for k, v in matrix.items() if isinstance(v, str) and _REF.match(v)}
        prefixes = {ref.rsplit(".", 1)[0] for ref in refs.values() if "." in ref}
        cube_prefixes = [p for p in prefixes if _cube_of(params, p) is not None]
        if not cube_prefixes:
            continue
        for key, ref in refs.items():
            found, _ = _lookup(raw, ref)
            cube_field = ref.rsplit(".", 1)
            if not found and len(cube_field) == 2 and _cube_of(params, cube_field[0]) is not None \
                    and cube_field[1] in CubeParams.model_fields:
                default = getattr(_cube_of(params, cube_field[0]), cube_field[1])
                errors.append(f"{ref}: missing from the params file, and dvc.yaml's stages.{name}.matrix needs it "
                              f"(allowed: a list, e.g. {cube_field[1]}: {format_list(default)} under {cube_field[0]})")
            elif not found:
                errors.append(f"{where}.{key}: names no params key (got ${{{ref}}}; allowed: a params list such as "
                              f"${{cube.{key}}})")
        if len(cube_prefixes) > 1:
            errors.append(f"{where}: mixes cubes (got {', '.join(sorted(cube_prefixes))}; allowed: one of cube, audit.cube)")
            continue
        prefix = cube_prefixes[0]
        wanted = {f: f"{prefix}.{f}" for f in fields}
        if refs != wanted:
            got = ", ".join(f"{k}: ${{{v}}}" for k, v in refs.items())
            allowed = ", ".join(f"{k}: ${{{v}}}" for k, v in wanted.items())
            errors.append(f"{where}: does not take every {prefix} field under its own name (got {got}; allowed: {allowed})")
            continue
        cmd = stage.get("cmd", "")
        cmd = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
        named = re.search(r"--name\s+(\S+)", cmd)
        if named and named.group(1) != NAME_TEMPLATE:
            errors.append(f"{dvc_yaml}: stages.{name}.cmd: --name is not the run name empriv builds "
                          f"(got {named.group(1)}; allowed: {NAME_TEMPLATE})")
        cube = _cube_of(params, prefix)
        for f in fields:
            _, values = _lookup(raw, f"{prefix}.{f}")
            for i, (value, parsed) in enumerate(zip(values or [], getattr(cube, f))):
                ours = format_number(parsed)
                if _dvc_str(value) != ours:
                    errors.append(f"{prefix}.{f}[{i}]: DVC spells it {_dvc_str(value)!r} in run names, empriv {ours!r} "
                                  f"(got {value!r}; allowed: a plain YAML number, or inf / .inf for ε = ∞)")
    return errors


def method_errors(params: Params) -> list[str]:
    """What each cube's training methods refuse, asked of the methods themselves before anything runs: every
    (unit, method) of ``cube`` and of ``audit.cube`` through :meth:`TrainingMethod.check` (the train stage asks the
    same again; here DVC has deleted no output yet). An audit run is checked with its canaries' design (new-token
    canaries or not); a message about ``cube.…`` names ``audit.cube.…`` for the audit cube. One line per problem."""
    from types import SimpleNamespace

    from empriv.train.methods import get_method

    new_tokens = SimpleNamespace(n_new_tokens=int(params.canaries.design == "new_token"))
    errors: list[str] = []
    seen: set[tuple] = set()
    for where, runs, canaries in (("cube", params.runs(), None), ("audit.cube", params.audit_runs(), new_tokens)):
        for run in runs:
            if (where, run.unit, run.method) in seen:
                continue
            seen.add((where, run.unit, run.method))
            p = params.for_method(run.method)
            try:
                get_method(p.train.method).check(p, run, canaries=canaries)
            except ConfigError as e:
                for line in str(e).splitlines():
                    errors.append(f"audit.{line}" if where == "audit.cube" and line.startswith("cube.") else line)
    return errors


def validate_project(params_path: str | Path = paths.PARAMS, dvc_yaml: str | Path = DVC_YAML) -> Params:
    """The params file validated in full, then dvc.yaml's cube matrices against it, then the raw inputs' content
    and the machine (:mod:`empriv.pipeline.input_checks`) and the secret overrides against the corpus
    (:mod:`empriv.pipeline.override_checks`) and W&B's prerequisites (:mod:`empriv.pipeline.wandb_checks`); raises :class:`ConfigError` with one line per problem.
    Touches no output (``input_checks`` caches the corpus facts it computed under ``.empriv/``)."""
    from empriv.infra.tracking.naming import project_root
    from empriv.pipeline.input_checks import input_errors
    from empriv.pipeline.override_checks import override_corpus_errors
    from empriv.pipeline.wandb_checks import wandb_errors

    params = load_params(params_path)
    errors = params.missing_inputs() + dvc_matrix_errors(read_yaml(params_path), params, dvc_yaml)
    errors += method_errors(params)
    errors += input_errors(params, Path(params_path).resolve().parent)
    errors += override_corpus_errors(params, Path(params_path).resolve().parent)  # ids and texts against the corpus
    errors += wandb_errors(params, project_root(Path(params_path).resolve().parent))  # W&B's directories, key, host
    if errors:
        raise ConfigError(*errors)
    return params


def audit_join_warnings(params: Params) -> list[str]:
    """A line when the audit cube cannot meet the main cube in the analysis: analyze joins an audited configuration
    to the main cube's configuration of the same name (the seed aside) and ranks ε̂ against the scores at one ε over
    at least ``MIN_CONFIGS`` such configurations (:mod:`empriv.analysis.audit_spread`). Not an error: an audit of
    its own (a canary design, an adaptation method) is a valid study, its ε̂ stands alone."""
    from empriv.analysis.audit_spread import MIN_CONFIGS

    audited = {r.group: r.epsilon for r in params.audit_runs()}
    if not audited:
        return []
    main = {r.group for r in params.runs()}
    shared: dict[float, int] = {}
    for group, epsilon in audited.items():
        if group in main:
            shared[epsilon] = shared.get(epsilon, 0) + 1
    if not shared:
        example = sorted(audited)[0]
        return [f"audit.cube: none of its {len(audited)} configuration(s) is one of the main cube's (e.g. {example}), "
                f"so its ε̂ stand alone: analyze ranks none against a memorisation score or the utility (audit_spread "
                f"is empty; audit.cube values of cube join them)"]
    if max(shared.values()) < MIN_CONFIGS:
        return [f"audit.cube: at most {max(shared.values())} of its configurations at one ε are the main cube's, so "
                f"analyze ranks no ε̂ against the scores (Spearman needs {MIN_CONFIGS} at one ε)"]
    return []


def fix_inputs(params_path: str | Path = paths.PARAMS) -> dict[str, str] | None:
    """Set the params file's ``inputs`` to the raw files ``data.path``, ``secrets.overrides``, a local ``base.name``
    and ``data.public_path`` name (ruamel round trip: comments and order kept). Returns the new mapping, or None when the file
    already had it (left untouched)."""
    from empriv.config import expected_inputs
    from empriv.io import atomic_path

    yaml = _round_trip_yaml()
    path = Path(params_path)
    raw = yaml.load(path.read_text(encoding="utf-8")) or {}
    section = lambda name: raw.get(name) if isinstance(raw.get(name), dict) else {}  # noqa: E731
    wanted = expected_inputs(section("data").get("path"), section("secrets").get("overrides"),
                             section("base").get("name"), section("data").get("public_path"))
    if dict(raw.get("inputs") or {}) == wanted:
        return None
    raw["inputs"] = wanted
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        yaml.dump(raw, fh)
    return wanted


def _dvc_params_keys(dvc_yaml: Path) -> list[str]:
    """The params.yaml keys dvc.yaml's stages depend on (their ``params:`` lists), in order, each once."""
    if not dvc_yaml.exists():
        return []
    keys: dict[str, None] = {}
    for stage in ((read_yaml(dvc_yaml) or {}).get("stages") or {}).values():
        body = stage.get("do", stage) if isinstance(stage, dict) else {}
        for entry in body.get("params") or []:
            if isinstance(entry, str):
                keys[entry] = None
            elif isinstance(entry, dict):  # {file: [keys]}: only params.yaml's own keys are ours
                for file, names in entry.items():
                    if str(file) == str(paths.PARAMS):
                        keys.update(dict.fromkeys(str(n) for n in names or []))
    return list(keys)


def _plain(value: Any) -> Any:
    """A params value as YAML writes it and DVC reads it back (inf as .inf, tuples as lists)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _round_trip_yaml():
    """ruamel's round trip as params.yaml is written by hand: comments and order kept, ``null`` spelt out (not an
    empty value), lines up to 120 columns before a flow list wraps."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 120
    yaml.representer.add_representer(
        type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    return yaml


def fill_defaults(params_path: str | Path = paths.PARAMS, dvc_yaml: str | Path = DVC_YAML) -> list[str]:
    """Write into the params file (ruamel round trip: comments and order kept) the default of every key a stage of
    ``dvc.yaml`` depends on that the file leaves out. DVC compares the values it reads from params.yaml, and a key
    that is absent differs from any value: deleting a section whose values are the defaults would re-run every stage
    that reads it. Returns the keys filled in ([] and the file untouched when none is missing). The params must be
    valid (call after :func:`validate_project`)."""
    from empriv.io import atomic_path

    path = Path(params_path)
    keys = _dvc_params_keys(Path(dvc_yaml))
    yaml = _round_trip_yaml()
    raw = yaml.load(path.read_text(encoding="utf-8")) or {}
    params = load_params(path).model_dump(mode="python")
    filled = []
    for key in keys:
        *parents, last = key.split(".")
        node, default = raw, params
        for part in parents:
            default = default.get(part) if isinstance(default, dict) else None
            if not isinstance(node.get(part), dict):
                if part in node or default is None:  # a scalar where a section should be: validation's business
                    node = None
                    break
                node[part] = {}
            node = node[part]
        if node is None or last in node or not isinstance(default, dict) or last not in default:
            continue
        node[last] = _plain(default[last])
        filled.append(key)
    if filled:
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            yaml.dump(raw, fh)
    return filled


def report_filled(params_path, filled: list[str]) -> None:
    if filled:
        print(f"{params_path}: wrote the defaults of {', '.join(filled)} (left out of the file; DVC would have seen "
              "them as changed)")


def write_marker(path: str | Path = paths.PARAMS_OK) -> None:
    from empriv.io import atomic_path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(MARKER_TEXT, encoding="utf-8")


def cli(argv: list[str] | None = None) -> int:
    """The stage's command line (``stages/validate_params.py``); returns the exit status."""
    ap = argparse.ArgumentParser(prog="python stages/validate_params.py", description=__doc__.splitlines()[0])
    ap.add_argument("--params", default=str(paths.PARAMS))
    ap.add_argument("--dvc-yaml", default=str(DVC_YAML))
    ap.add_argument("--marker", default=str(paths.PARAMS_OK))
    ap.add_argument("--fix-inputs", action="store_true",
                    help="first set the params file's inputs to the raw files data.path/secrets.overrides/base.name name")
    ap.add_argument("--fill-defaults", action="store_true",
                    help="write the defaults of the params keys dvc.yaml's stages read that the file leaves out (a "
                         "missing key would look changed to DVC)")
    ap.add_argument("--debug", action="store_true", help="show the traceback of an error (also: EMPRIV_DEBUG=1)")
    args = ap.parse_args(argv)
    try:
        if args.fix_inputs:
            fixed = fix_inputs(args.params)
            print(f"{args.params}: inputs " + ("already up to date" if fixed is None else f"set to {fixed}"))
        params = validate_project(args.params, args.dvc_yaml)
        if args.fill_defaults:
            report_filled(args.params, fill_defaults(args.params, args.dvc_yaml))
    except ConfigError as err:
        if args.debug or os.environ.get("EMPRIV_DEBUG") == "1":
            raise
        print(error_lines(err), file=sys.stderr)
        return 2
    from empriv.pipeline.inputs import prune_stale

    for stale in prune_stale(params, Path(args.params).parent / paths.INPUTS_DIR):
        print(f"{stale}: removed (params name no such raw input any more)")
    write_marker(args.marker)
    print(f"{args.params}: valid ({len(params.runs())} configurations in the cube, {len(params.audit_runs())} in the audit cube)")
    for line in audit_join_warnings(params):
        print(f"note: {line}")
    return 0
