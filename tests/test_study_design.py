"""A study's one-at-a-time design (empriv.study_design): its parts, their checks, the union the analysis reads."""

import json
from pathlib import Path

import pytest

from empriv.config import ConfigError, parse_params, read_yaml
from empriv.study import resolve_preset
from empriv.pipeline.analyze_union import analyze_union
from empriv.study_design import centre, gather, part_name, parts, study_section, union_params

ROOT = Path(__file__).resolve().parents[1]


def small(**study) -> dict:
    raw = read_yaml(ROOT / "params.yaml")
    raw["cube"].update(epsilon=[8, float("inf")], batch_size=[8, 16, 32], steps=[2, 4, 6],
                       learning_rate=[0.01, 0.02, 0.04], seed=[0, 1])
    raw["audit"]["cube"].update(epsilon=[8], batch_size=[8, 16, 32], steps=[4], learning_rate=[0.02], seed=[0])
    if study:
        raw["study"] = study
    return raw


def test_a_preset_without_a_study_section_is_one_product_part():
    raw = small()
    assert study_section(raw) == {"design": "product", "extra": []}
    assert parts(raw) == [("", raw)]


def test_one_at_a_time_varies_each_axis_around_the_middle_value_and_adds_the_extra_configurations():
    raw = small(design="one-at-a-time", extra=[[8, 6, 0.02]])
    got = dict(parts(raw))
    assert list(got) == ["batch_size", "steps", "learning_rate", "b8-T6-lr0.02"]
    assert centre(raw) == {"batch_size": 16, "steps": 4, "learning_rate": 0.02}
    assert [got["batch_size"]["cube"][a] for a in ("batch_size", "steps", "learning_rate")] == [[8, 16, 32], [4], [0.02]]
    assert [got["steps"]["cube"][a] for a in ("batch_size", "steps", "learning_rate")] == [[16], [2, 4, 6], [0.02]]
    assert [got["learning_rate"]["cube"][a] for a in ("batch_size", "steps", "learning_rate")] == [[16], [4],
                                                                                                 [0.01, 0.02, 0.04]]
    assert [got["b8-T6-lr0.02"]["cube"][a] for a in ("batch_size", "steps", "learning_rate")] == [[8], [6], [0.02]]
    for part in got.values():  # ε, seeds, units and methods as the preset says; no `study` key in a part's params
        assert part["cube"]["epsilon"] == [8, float("inf")] and part["cube"]["seed"] == [0, 1] and "study" not in part
        parse_params(part)
    # audits: the preset's audit cube narrowed to each part's b, T, η (the T line at b 16, η 0.02 holds T 4 only)
    assert got["batch_size"]["audit"]["cube"]["batch_size"] == [8, 16, 32]
    assert got["steps"]["audit"]["cube"]["batch_size"] == [16] and got["steps"]["audit"]["cube"]["steps"] == [4]
    extra = got["b8-T6-lr0.02"]["audit"]["cube"]  # T 6 is not in the audit cube: that part audits the centre
    assert (extra["batch_size"], extra["steps"], extra["learning_rate"]) == ([16], [4], [0.02])
    params = union_params(raw, list(got.values()))
    configs = {(r.batch_size, r.steps, r.learning_rate) for r in params.runs()}
    assert configs == {(8, 4, 0.02), (16, 4, 0.02), (32, 4, 0.02), (16, 2, 0.02), (16, 6, 0.02), (16, 4, 0.01),
                       (16, 4, 0.04), (8, 6, 0.02)}  # the centre once: 3 + 2 + 2 + 1
    assert len(params.runs()) == len(set(params.runs())) == 8 * 2 * 2
    assert {(r.batch_size, r.steps) for r in params.audit_runs()} == {(8, 4), (16, 4), (32, 4)}


@pytest.mark.parametrize("study, message", [
    ({"design": "latin-square"}, "study.design: 'latin-square' is not a design; allowed: product, one-at-a-time"),
    ({"design": "one-at-a-time", "extra": [[8, 6]]}, "study.extra[0]: [8, 6] is not [b, T, η]"),
    ({"design": "one-at-a-time", "extra": [[8.5, 6, 0.1]]}, "study.extra[0]: [8.5, 6, 0.1] is not [b, T, η]"),
    ({"design": "product", "extra": [[8, 6, 0.1]]}, "study.extra: further configurations need study.design"),
    ({"design": "one-at-a-time", "extra": [[16, 2, 0.02], [16, 2, 0.02]]}, "study.extra: b16-T2-lr0.02 is listed twice"),
    ({"design": "one-at-a-time", "seeds": 3}, "study.seeds: unknown key; allowed: design, extra"),
])
def test_a_bad_study_section_is_one_line_naming_the_key(study, message):
    with pytest.raises(ConfigError) as err:
        parts(small(**study))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_one_at_a_time_needs_an_odd_count_of_values_on_each_axis():
    raw = small(design="one-at-a-time")
    raw["cube"]["steps"] = [2, 4]
    with pytest.raises(ConfigError, match=r"cube.steps: \[2, 4\] has 2 values; study.design: one-at-a-time needs an "
                                          "odd count"):
        parts(raw)


def test_a_bad_part_fails_validation_of_the_preset_before_anything_runs(tmp_path):
    (tmp_path / "presets").mkdir()
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (tmp_path / "presets" / "x.yaml").write_text(
        "study: {design: one-at-a-time, extra: [[16, 4, -0.5]]}\ncube: {batch_size: [8, 16, 32]}\n")
    with pytest.raises(ConfigError, match=r"study.extra\[0\]"):
        resolve_preset("x", tmp_path)
    (tmp_path / "presets" / "x.yaml").write_text(
        "study: {design: one-at-a-time}\ncube: {batch_size: [8, 0, 32], steps: [4], learning_rate: [0.01]}\n")
    with pytest.raises(ConfigError, match="cube.batch_size"):
        resolve_preset("x", tmp_path)
    (tmp_path / "presets" / "x.yaml").write_text(
        "study: {design: one-at-a-time, extra: [[32, 6, 0.01]]}\n"
        "cube: {batch_size: [8, 16, 32], steps: [4], learning_rate: [0.01]}\n"
        "audit: {cube: {batch_size: [8], steps: [4], learning_rate: [0.01]}}\n")
    with pytest.raises(ConfigError, match="audit.cube: holds none of the part b32-T6-lr0.01's configurations nor the "
                                          "centre"):
        resolve_preset("x", tmp_path)
    assert not (tmp_path / ".studies").exists()


def test_part_names():
    assert part_name("steps") == "steps" and part_name([128, 100, 0.005]) == "b128-T100-lr0.005"


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_gather_reads_each_run_from_the_part_that_ran_it_never_a_stale_file_of_another(tmp_path):
    """A part's worktree also holds the records committed for the default run; a run of the T line that the b
    line's worktree holds as such a stale file must come from the T line's worktree."""
    raw = small(design="one-at-a-time")
    plan = parts(raw)
    works = {name: tmp_path / name for name, _ in plan}
    parsed = {name: parse_params(p) for name, p in plan}
    for name, params in parsed.items():
        for r in params.runs():
            for d in ("records/train", "records/score"):
                _write(works[name] / d / f"{r.file_stem}.json", {"part": name})
        for r in params.audit_runs():
            _write(works[name] / "records/audit" / f"{r.file_stem}.json", {"part": name})
        _write(works[name] / "records/base.json", {"part": name})
    stale = next(r for r in parsed["steps"].runs() if r.steps == 6)
    _write(works["batch_size"] / "records/score" / f"{stale.file_stem}.json", {"part": "stale"})
    union = tmp_path / "union"
    _write(union / "records/score/old.json", {"part": "previous analysis"})
    copied = gather([(works[n], parsed[n]) for n, _ in plan], union)
    assert not (union / "records/score/old.json").exists()
    assert json.loads((union / "records/score" / f"{stale.file_stem}.json").read_text()) == {"part": "steps"}
    centre_run = next(r for r in parsed["steps"].runs() if (r.batch_size, r.steps, r.learning_rate) == (16, 4, 0.02))
    assert json.loads((union / "records/train" / f"{centre_run.file_stem}.json").read_text()) == {"part": "batch_size"}
    params = union_params(raw, [p for _, p in plan])
    assert len(copied) == 2 * len(params.runs()) + len(params.audit_runs()) + 1


def test_a_part_that_has_not_finished_stops_the_union_with_the_missing_file(tmp_path):
    raw = small(design="one-at-a-time")
    plan = parts(raw)
    works = [tmp_path / name for name, _ in plan]
    with pytest.raises(RuntimeError, match="missing; the part batch_size has not finished"):
        analyze_union(raw, [p for _, p in plan], works, tmp_path / "union")


def test_the_research_cpu_preset_is_the_research_one_at_a_time_design_at_cpu_scale():
    """ε ∈ {1, 2, 4, 8, ∞}, b, T and η at three values each around a centre (b 256, T 75, η 0.005) one at a time,
    a configuration of equal compute at another b (Fig. 5 d), ≥ 3 seeds, ACR on every run and every string
    secret, on the default corpus (issue 41)."""
    raw = resolve_preset("research-cpu", ROOT)
    plan = parts(raw)
    params = union_params(raw, [p for _, p in plan])
    c = params.cube
    assert c.epsilon == [1, 2, 4, 8, float("inf")] and len(c.seed) >= 3
    assert centre(raw) == {"batch_size": 256, "steps": 75, "learning_rate": 0.005}
    configs = {(r.batch_size, r.steps, r.learning_rate) for r in params.runs()}
    assert len(configs) == 8 and len(params.runs()) == 8 * 5 * len(c.seed)
    for axis in ("batch_size", "steps", "learning_rate"):
        assert len({getattr(r, axis) for r in params.runs()}) == 3
    computes = {}
    for b, t, lr in configs:  # Fig. 5 (d): equal compute b·T and η, different b
        computes.setdefault((b * t, lr), set()).add(b)
    assert sum(len(bs) >= 2 for bs in computes.values()) >= 1
    acr = params.score.acr
    assert acr.enabled and acr.training_seeds is None and acr.epsilons is None and acr.max_secrets is None
    assert params.data == parse_params(read_yaml(ROOT / "params.yaml")).data  # the default corpus
    default = parse_params(read_yaml(ROOT / "params.yaml")).cube
    assert min(c.batch_size) <= min(default.batch_size) and max(default.batch_size) <= max(c.batch_size)


def test_study_collect_copies_every_part_then_the_union_keeping_the_design(tmp_path):
    """``empriv study collect`` of a one-at-a-time preset: each part's results into results/<name>/parts/<part>/
    (only what that part wrote: its worktree also holds the default's committed files), the union's outputs into
    results/<name>/, study.json keeping the parts and summing their cost."""
    import subprocess

    from empriv.study import collect_study

    (tmp_path / "presets").mkdir()
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (tmp_path / "presets" / "x.yaml").write_text(
        "study: {design: one-at-a-time}\ncube: {batch_size: [8, 16, 32], steps: [4], learning_rate: [0.01]}\n"
        "audit: {cube: {batch_size: [16], steps: [4], learning_rate: [0.01]}}\n")
    work = tmp_path / ".studies" / "x.batch_size"
    _write(work / "records/score/committed.json", {"default": True})
    _write(work / "params.yaml", {})
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "x", "--allow-empty"],
                   cwd=work, check=True)
    subprocess.run(["git", "add", "-A"], cwd=work, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "default"], cwd=work,
                   check=True)
    _write(work / "records/score/ran.json", {"part": "batch_size"})
    out = tmp_path / "results" / "x"
    _write(out / "parts/batch_size/cost.jsonl", {})
    (out / "parts/batch_size/cost.jsonl").write_text(
        json.dumps({"stage": "train@a", "wall_s": 2.0, "cpu_s": 1.5, "peak_rss_mb": 10.0}) + "\n")
    union = tmp_path / ".studies" / "x"
    _write(union / "params.yaml", {})
    _write(union / "records/score/union.json", {"union": True})
    _write(out / "study.json", {"design": "one-at-a-time", "parts": [{"part": "batch_size"}]})
    study = collect_study("x", tmp_path)
    assert sorted(p.name for p in (out / "parts/batch_size/records/score").iterdir()) == ["ran.json"]
    assert (out / "records/score/union.json").is_file()
    assert study["design"] == "one-at-a-time" and study["parts"] == [{"part": "batch_size"}]
    assert study["stage_cpu_s_total"] == 1.5 and study["preset"] == "x"
