"""empriv.config: validation of params, run names, derived values."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
from empriv.config import (
    ConfigError,
    Params,
    RunConfig,
    config_name,
    format_number,
    load_params,
    parse_params,
)

REPO = Path(__file__).resolve().parents[1]

MINIMAL = {
    "data": {"n_train": 1000},
    "cube": {"epsilon": [2, 64], "batch_size": [64], "steps": [16], "learning_rate": [0.01], "seed": [0, 1]},
}


def with_(path: str, value, base=MINIMAL) -> dict:
    """A copy of ``base`` with the dotted ``path`` set to ``value``."""
    raw = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return raw


def without(path: str, base=MINIMAL) -> dict:
    raw = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = raw
    for key in parents:
        node = node[key]
    del node[last]
    return raw


def test_minimal_params_are_valid():
    p = parse_params(MINIMAL)
    assert isinstance(p, Params)
    assert p.cube.epsilon == [2.0, 64.0]
    assert len(p.runs()) == 2 * 1 * 1 * 1 * 2


# (raw params, field named in the message, bad value shown in the message)
INVALID = [
    pytest.param(with_("cube.epsilon", [-1]), "cube.epsilon", "-1", id="eps-negative"),
    pytest.param(with_("cube.epsilon", [0]), "cube.epsilon", "0", id="eps-zero"),
    pytest.param(with_("cube.epsilon", [2, 0.0]), "cube.epsilon", "0", id="eps-zero-float-second"),
    pytest.param(with_("cube.epsilon", ["abc"]), "cube.epsilon", "'abc'", id="eps-non-numeric"),
    pytest.param(with_("cube.epsilon", [True]), "cube.epsilon", "True", id="eps-bool"),
    pytest.param(with_("privacy.delta", 0), "privacy.delta", "0", id="delta-zero"),
    pytest.param(with_("privacy.delta", 1.5), "privacy.delta", "1.5", id="delta-above-one"),
    pytest.param(with_("cube.batch_size", [64, 5000]), "cube.batch_size", "5000", id="b-above-n"),
    pytest.param(with_("cube.steps", [0]), "cube.steps", "0", id="T-zero"),
    pytest.param(with_("cube.steps", [16, -3]), "cube.steps", "-3", id="T-negative"),
    pytest.param(with_("cube.learning_rate", [0]), "cube.learning_rate", "0", id="lr-zero"),
    pytest.param(with_("cube.learning_rate", [-0.5]), "cube.learning_rate", "-0.5", id="lr-negative"),
    pytest.param(with_("base.name", "gpt-foo"), "base.name", "'gpt-foo'", id="unknown-base"),
    pytest.param(with_("data.source", "enron"), "data.path", "'enron'", id="enron-without-path"),
    pytest.param(
        with_("data.path", "/nonexistent/corpus.csv", with_("data.source", "enron")),
        "data.path",
        "'/nonexistent/corpus.csv'",
        id="path-missing-on-disk",
    ),
    pytest.param(with_("data.source", "reddit"), "data.source", "'reddit'", id="unknown-source"),
    pytest.param(with_("foo", 1), "foo", "unknown key", id="unknown-top-level-key"),
    pytest.param(with_("train.foo", 3), "train.foo", "unknown key", id="unknown-nested-key"),
    pytest.param(with_("runtime.device", "gpu"), "runtime.device", "'gpu'", id="bad-device"),
    pytest.param(with_("cube.seed", [0, 0]), "cube.seed", "[0, 0]", id="duplicate-seeds"),
    pytest.param(with_("cube.epsilon", ["inf", ".inf"]), "cube.epsilon", "duplicate", id="duplicate-inf"),
    pytest.param(with_("cube.batch_size", []), "cube.batch_size", "at least one", id="empty-cube-list"),
    pytest.param(with_("base.n_embd", 30, with_("base.n_head", 4)), "base.n_embd", "30", id="embd-not-div-heads"),
    pytest.param(without("cube"), "cube", "is required", id="missing-cube"),
    pytest.param(with_("train.optimizer", "rmsprop"), "train.optimizer", "'rmsprop'", id="bad-optimizer"),
    pytest.param(with_("data.secret_frequencies", [0.5, 0.6]), "data.secret_frequencies", "must sum to < 1", id="freq-sum"),
    pytest.param(with_("runtime.precision", "fp16"), "runtime.precision", "'fp16'", id="bad-precision"),
    pytest.param(with_("runtime.precision", "bfloat16"), "runtime.precision", "'bf16'", id="precision-says-allowed"),
    pytest.param(with_("train.micro_batch_size", 0), "train.micro_batch_size", "(got 0; allowed: an integer >= 1, or 'auto')", id="micro-batch-zero"),
    pytest.param(with_("train.micro_batch_size", -8), "train.micro_batch_size", "(got -8;", id="micro-batch-negative"),
    pytest.param(with_("train.micro_batch_size", "max"), "train.micro_batch_size", "(got 'max';", id="micro-batch-bad-word"),
    pytest.param(with_("train.micro_batch_size", "64"), "train.micro_batch_size", "(got '64';", id="micro-batch-quoted-int"),
    pytest.param(with_("train.micro_batch_size", 2.5), "train.micro_batch_size", "(got 2.5;", id="micro-batch-float"),
    pytest.param(with_("train.micro_batch_size", True), "train.micro_batch_size", "(got True;", id="micro-batch-bool"),
]


@pytest.mark.parametrize("raw, field, shown", INVALID)
def test_invalid_params_raise_config_error_naming_field_and_value(raw, field, shown):
    with pytest.raises(ConfigError) as info:
        parse_params(raw)
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert field in msg, msg
    assert shown in msg, msg


def test_precision_and_micro_batch_size_defaults_and_accepted_values():
    p = parse_params(MINIMAL)
    assert p.runtime.precision == "fp32"
    assert p.train.micro_batch_size == 64
    assert parse_params(with_("runtime.precision", "bf16")).runtime.precision == "bf16"
    for value in ("auto", 1, 3, 256):
        assert parse_params(with_("train.micro_batch_size", value)).train.micro_batch_size == value


def test_n_embd_message_names_both_values():
    with pytest.raises(ConfigError, match=r"^base\.n_embd: must be divisible by base\.n_head = 4 \(got 30; allowed: a multiple of 4\)$"):
        parse_params(with_("base.n_embd", 30, with_("base.n_head", 4)))


def test_eps_zero_message_says_what_is_allowed():
    with pytest.raises(ConfigError, match=r"cube\.epsilon.*must be > 0.*got 0"):
        parse_params(with_("cube.epsilon", [0]))


def test_params_that_are_not_a_mapping():
    with pytest.raises(ConfigError, match="mapping"):
        parse_params(["cube"])


@pytest.mark.parametrize("value", ["inf", ".inf", "Infinity", math.inf])
def test_epsilon_inf_spellings_parse_to_math_inf(value):
    p = parse_params(with_("cube.epsilon", [8, value]))
    assert p.cube.epsilon[1] == math.inf
    runs = p.runs()
    assert {r.private for r in runs} == {True, False}


def test_yaml_inf_and_dot_inf_parse_to_math_inf(tmp_path):
    text = (
        "cube:\n  epsilon: [2, inf]\n  batch_size: [8]\n  steps: [1]\n  learning_rate: [0.01]\n  seed: [0]\n"
        "data:\n  n_train: 100\n"
    )
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / "b.yaml").write_text(text.replace("[2, inf]", "[2, .inf]"))
    for name in ("a.yaml", "b.yaml"):
        assert load_params(tmp_path / name).cube.epsilon == [2.0, math.inf]


def test_repo_params_yaml_loads_with_64_runs():
    p = load_params(REPO / "params.yaml")
    runs = p.runs()
    assert len(runs) == 64
    assert len({r.name for r in runs}) == 64
    assert sorted({r.epsilon for r in runs}) == [2.0, 4.0, 8.0, math.inf]
    # 32 groups of 2 seeds
    assert len({r.group for r in runs}) == 32


def test_config_name_examples():
    assert config_name(64, 128, 32, 0.01, 0) == "eps64-b128-T32-lr0.01-s0"
    assert config_name(math.inf, 64, 16, 0.005, 1) == "epsinf-b64-T16-lr0.005-s1"
    assert RunConfig(2, 64, 16, 0.005, 1).name == "eps2-b64-T16-lr0.005-s1-full"
    assert RunConfig(2.0, 64, 16, 0.005, 1).name == "eps2.0-b64-T16-lr0.005-s1-full"  # as DVC: str(2.0)
    assert RunConfig(2, 64, 16, 0.005, 1, method="prefix").file_stem == "record/prefix/eps2-b64-T16-lr0.005-s1"
    assert config_name(0.5, 8, 1, 1e-05, 3) == "eps0.5-b8-T1-lr1e-05-s3"


@pytest.mark.parametrize(
    "value, expected",
    [(0.01, "0.01"), (2, "2"), (2.0, "2.0"), (math.inf, "inf"), (0.005, "0.005"), (1e-05, "1e-05"), (64, "64"), (0.5, "0.5")],
)
def test_format_number(value, expected):
    assert format_number(value) == expected


def _dvc_names(yaml_cube: str) -> tuple[list[str], list[str]]:
    """(names DVC's interpolation builds from the YAML values, names empriv builds from params)."""
    from dvc.parsing.interpolate import to_str

    from dvc.utils.serialize import parse_yaml  # how DVC itself reads params.yaml

    cube = parse_yaml(yaml_cube, "params.yaml")["cube"]
    dvc = [
        f"eps{to_str(e)}-b{to_str(b)}-T{to_str(t)}-lr{to_str(lr)}-s{to_str(s)}"
        for e in cube["epsilon"] for b in cube["batch_size"] for t in cube["steps"]
        for lr in cube["learning_rate"] for s in cube["seed"]
    ]
    params = parse_params({"cube": cube, "data": {"n_train": 1000}})
    return dvc, [r.point_name for r in params.runs()]


def test_run_names_match_dvc_interpolation_of_repo_params():
    from dvc.parsing.interpolate import to_str
    from dvc.utils.serialize import parse_yaml

    cube = parse_yaml((REPO / "params.yaml").read_text(), "params.yaml")["cube"]
    dvc = {
        f"eps{to_str(e)}-b{to_str(b)}-T{to_str(t)}-lr{to_str(lr)}-s{to_str(s)}"
        for e in cube["epsilon"] for b in cube["batch_size"] for t in cube["steps"]
        for lr in cube["learning_rate"] for s in cube["seed"]
    }
    assert {r.point_name for r in load_params(REPO / "params.yaml").runs()} == dvc
    assert "eps8-b512-T100-lr0.01-s0" in dvc and "epsinf-b256-T50-lr0.005-s1" in dvc


def test_run_names_match_dvc_for_yaml_ints_and_decimals():
    dvc, ours = _dvc_names(
        "cube:\n  epsilon: [2, 8, .inf]\n  batch_size: [64]\n  steps: [16]\n  learning_rate: [0.01, 1e-3, 0.0005]\n  seed: [0]\n"
    )
    assert ours == dvc


def test_run_names_match_dvc_for_integral_yaml_floats():
    dvc, ours = _dvc_names(
        "cube:\n  epsilon: [2.0, 1e2]\n  batch_size: [64]\n  steps: [16]\n  learning_rate: [1.0]\n  seed: [0]\n"
    )
    assert ours == dvc


def test_group_drops_the_seed_only():
    a = RunConfig(64, 128, 32, 0.01, 0)
    b = RunConfig(64, 128, 32, 0.01, 7)
    c = RunConfig(64, 128, 32, 0.005, 0)
    assert a.group == "eps64-b128-T32-lr0.01-full"
    assert a.group == b.group
    assert a.group != c.group
    assert RunConfig(math.inf, 64, 16, 0.005, 12).group == "epsinf-b64-T16-lr0.005-full"
    assert RunConfig(64, 128, 32, 0.01, 0, method="lora").group == "eps64-b128-T32-lr0.01-lora"


def test_delta_for_defaults_to_n_to_the_minus_1_1():
    p = parse_params(MINIMAL)
    assert p.delta_for(3000) == pytest.approx(3000 ** -1.1, rel=1e-12)
    assert p.delta_for(1000) == pytest.approx(1e-3 ** 1.1, rel=1e-12)
    assert parse_params(with_("privacy.delta", 1e-5)).delta_for(3000) == 1e-5
    assert parse_params(with_("privacy.delta_exponent", 2.0)).delta_for(100) == pytest.approx(1e-4)


def test_load_params_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_params(tmp_path / "nope.yaml")


def test_load_params_invalid_yaml(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("cube: [unclosed\n  epsilon: {\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(path)


def test_load_params_validates_content(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("cube:\n  epsilon: [-3]\n  batch_size: [8]\n  steps: [1]\n  learning_rate: [0.1]\n  seed: [0]\n")
    with pytest.raises(ConfigError, match=r"cube\.epsilon.*-3"):
        load_params(path)


def test_params_are_frozen():
    p = parse_params(MINIMAL)
    with pytest.raises(Exception):
        p.data.n_train = 5  # type: ignore[misc]


def test_as_dict_marks_inf_as_string():
    assert RunConfig(math.inf, 8, 1, 0.1, 0).as_dict()["epsilon"] == "inf"
    assert RunConfig(8.0, 8, 1, 0.1, 0).as_dict() == {
        "epsilon": 8.0, "batch_size": 8, "steps": 1, "learning_rate": 0.1, "seed": 0, "method": "full",
    }


def _args(**kw):
    from types import SimpleNamespace

    base = dict(epsilon="64", batch_size="128", steps="32", learning_rate="0.01", seed="0", name="eps64-b128-T32-lr0.01-s0")
    base.update(kw)
    return SimpleNamespace(**base)


# a cube built here (tests do not depend on the repository's params.yaml)
CLI_CUBE = {"epsilon": [2, 64, "inf"], "batch_size": [64, 128], "steps": [16, 32], "learning_rate": [0.005, 0.01], "seed": [0, 1]}


def test_run_from_args_accepts_cube_points():
    from empriv.config import run_from_args

    p = parse_params({"cube": CLI_CUBE})
    assert run_from_args(p, _args()) == RunConfig(64.0, 128, 32, 0.01, 0)
    run = run_from_args(p, _args(epsilon="inf", batch_size="64", steps="16", learning_rate="0.005", seed="1",
                                 name="epsinf-b64-T16-lr0.005-s1"))
    assert run.epsilon == math.inf and not run.private


def test_run_from_args_rejects_points_outside_cube_and_wrong_names():
    from empriv.config import run_from_args

    p = parse_params({"cube": CLI_CUBE})
    with pytest.raises(ConfigError, match="eps3-b128-T32-lr0.01-s0 is not in params.yaml's cube"):
        run_from_args(p, _args(epsilon="3", name="eps3-b128-T32-lr0.01-s0"))
    with pytest.raises(ConfigError, match="--name 'eps64-b128-T32-lr0.01-s9' does not match"):
        run_from_args(p, _args(name="eps64-b128-T32-lr0.01-s9"))
    with pytest.raises(ConfigError, match="--epsilon"):
        run_from_args(p, _args(epsilon="abc"))
    with pytest.raises(ConfigError, match="not in params.yaml's audit.cube"):  # the audit stage's points
        run_from_args(p, _args(batch_size="64", name="eps64-b64-T32-lr0.01-s0"), audit=True)
    assert run_from_args(p, _args(), audit=True) == RunConfig(64, 128, 32, 0.01, 0)  # the default audit cube


def test_run_from_args_accepts_dvc_command_line_for_integral_float_epsilon():
    from dvc.parsing.interpolate import to_str
    from dvc.utils.serialize import parse_yaml

    from empriv.config import run_from_args

    raw = parse_yaml(
        "data:\n  n_train: 1000\ncube:\n  epsilon: [2.0]\n  batch_size: [64]\n  steps: [16]\n  learning_rate: [0.01]\n  seed: [0]\n",
        "params.yaml",
    )
    p = parse_params(raw)
    e = raw["cube"]["epsilon"][0]
    name = f"eps{to_str(e)}-b64-T16-lr0.01-s0"  # what dvc.yaml's train cmd interpolates
    assert run_from_args(p, _args(epsilon=to_str(e), batch_size="64", steps="16", name=name)).epsilon == 2.0


def test_a_user_level_audit_unit_is_accepted_with_its_own_rules():
    """audit.cube.unit may name user-level units: the canaries stage draws one canary-unit set per distinct k; the
    rules a unit audit cannot follow (split_half, another score than the loss, test prefixes) are one-line errors."""
    audit = {"cube": {"epsilon": [8], "batch_size": [16], "steps": [4], "learning_rate": [0.01], "seed": [0],
                      "unit": ["record", "userwise-k5-random", "group-k5-longest", "group-k2-random"]}}
    p = parse_params(with_("audit", audit))
    assert [r.unit for r in p.audit_runs()] == audit["cube"]["unit"] and p.user_audit_ks() == [2, 5]
    assert p.audit_runs()[1].name == "eps8-b16-T4-lr0.01-s0-userwise-k5-random-full"
    assert p.audit_runs()[1].file_stem == "userwise-k5-random/full/eps8-b16-T4-lr0.01-s0"
    assert parse_params(MINIMAL).user_audit_ks() == []
    cases = [({**audit, "rule": "split_half"}, "audit.rule: a user-level audit (audit.cube.unit 'userwise-k5-random') "
                                                 "guesses top_r only (got 'split_half'; allowed: top_r)"),
             ({**audit, "score": "rmia"}, "audit.score: a user-level audit (audit.cube.unit 'userwise-k5-random') "
                                          "scores units by the loss score only (got 'rmia'; allowed: loss)")]
    for raw, line in cases:
        with pytest.raises(ConfigError) as info:
            parse_params(with_("audit", raw))
        assert info.value.lines == [line]
    with pytest.raises(ConfigError, match="canaries.prefix: a user-level audit"):
        parse_params({**with_("audit", audit), "canaries": {"prefix": "test"}})


# --------------------------------------------------------------------------- adaptation methods (issue 17)
def test_cube_method_axis_defaults_to_full_and_multiplies_the_cube():
    assert {r.method for r in parse_params(MINIMAL).runs()} == {"full"}
    p = parse_params(with_("cube.method", ["full", "lora", "prefix", "prompt", "head", "dpzero"],
                           with_("base.n_positions", 80)))
    assert len(p.runs()) == 4 * 6
    names = {r.name for r in p.runs()}
    assert "eps2-b64-T16-lr0.01-s0-prefix" in names and "eps64-b64-T16-lr0.01-s1-dpzero" in names


def test_for_method_sets_the_adaptation_and_a_variant_replaces_its_sections():
    raw = with_("train.variants", {"flat": {"method": "prefix", "prefix": {"n_virtual": 4},
                                            "dpflat": {"kd": True, "kd_lambda": 0.5}}},
                with_("cube.method", ["prefix", "flat"]))
    p = parse_params(raw)
    plain, flat = p.for_method("prefix").train, p.for_method("flat").train
    assert (plain.method, plain.variant, plain.run_method, plain.prefix.n_virtual, plain.dpflat.kd) == \
        ("prefix", None, "prefix", 10, False)
    assert (flat.method, flat.variant, flat.run_method, flat.prefix.n_virtual, flat.dpflat.kd, flat.dpflat.kd_lambda) == \
        ("prefix", "flat", "flat", 4, True, 0.5)
    assert p.train.method == "full"  # the params themselves are untouched (frozen)


METHOD_ERRORS = [
    pytest.param(with_("cube.method", ["prefx"]), "cube.method[0]", "did you mean 'prefix'", id="unknown-method"),
    pytest.param(with_("train.method", "lora"), "train.method", "moved to cube.method", id="train-method-moved"),
    pytest.param(with_("audit.method", "lora"), "audit.method", "moved to audit.cube.method", id="audit-method-moved"),
    pytest.param(with_("train.dpflat", {"awp": True, "awp_steps": 2}), "train.dpflat",
                 "need prefix tuning", id="dpflat-without-prefix"),
    pytest.param(with_("train.dpflat", {"awp": True, "awp_steps": 17}, with_("cube.method", ["prefix"])),
                 "train.dpflat.awp_steps", "must be <= T = 16", id="E-above-T"),
    pytest.param(with_("train.dpflat", {"kd": True, "kd_lambda": -0.1}, with_("cube.method", ["prefix"])),
                 "train.dpflat.kd_lambda", "-0.1", id="negative-lambda"),
    pytest.param(with_("train.dpzero", {"kd_lambda": -1.0}), "train.dpzero.kd_lambda", "-1.0", id="dpzero-lambda"),
    pytest.param(with_("train.dpflat", {"layer_elimination": True}, with_("cube.method", ["prefix"])),
                 "train.dpflat.target_layers", "must be set", id="elimination-without-target"),
    pytest.param(with_("train.variants", {"full": {"method": "lora"}}), "train.variants", "built-in", id="variant-name"),
    pytest.param(with_("train.prefix", {"layers": [0, 0]}), "train.prefix.layers", "distinct", id="prefix-layers"),
    pytest.param(with_("train.head", {"target": "ln_f"}), "train.head.target", "ln_f", id="head-target"),
    pytest.param(with_("cube.method", ["prompt"]), "base.n_positions", "an integer >= 74", id="prompt-positions"),
    pytest.param(with_("audit.cube", {"epsilon": [8], "batch_size": [64], "steps": [4], "learning_rate": [0.01],
                                      "seed": [0], "method": ["dpzero"]}), "base.n_positions", "more than the tiny-gpt2 base's 64",
                 id="dpzero-positions"),
]


@pytest.mark.parametrize("raw, field, shown", METHOD_ERRORS)
def test_bad_method_settings_are_one_line_errors_naming_the_key(raw, field, shown):
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    lines = str(err.value).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(field) and shown in lines[0], lines[0]


def test_dpflat_switch_in_a_variant_is_fine_next_to_other_methods():
    raw = with_("train.variants", {"dpflat": {"method": "prefix", "dpflat": {"awp": True, "awp_steps": 4}}},
                with_("cube.method", ["full", "lora", "dpflat"]))
    assert len(parse_params(raw).runs()) == 12
