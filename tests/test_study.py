"""empriv.study: presets are params overlays, validated before anything is touched; cost summaries."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from empriv.config import ConfigError, parse_params, read_yaml
from empriv.study_design import parts, union_params
from empriv.study import merge, resolve_preset, summarise_cost

ROOT = Path(__file__).resolve().parents[1]


def test_merge_replaces_values_and_lists_and_merges_mappings():
    base = {"a": {"x": 1, "y": [1, 2], "z": {"k": 1, "l": 2}}, "b": 3}
    overlay = {"a": {"y": [9], "z": {"l": 5}}, "c": 4}
    assert merge(base, overlay) == {"a": {"x": 1, "y": [9], "z": {"k": 1, "l": 5}}, "b": 3, "c": 4}
    assert base["a"]["y"] == [1, 2]  # the inputs are not modified


@pytest.mark.parametrize("name", ["user-level-synthetic", "user-level-enron"])
def test_the_user_level_presets_cover_the_studys_units_and_epsilons(name):
    """Issue 16's study: ε ∈ {1, 3, 8, ∞}, k ∈ {2, 5, 10} for Group (random, longest) and User-wise (random, chunk),
    beside record-level; the audit stays record-level (the audit stage has no user-level audit yet)."""
    params = parse_params(resolve_preset(name, ROOT))
    c = params.cube
    assert sorted(c.epsilon) == [1, 3, 8, float("inf")]
    want = {"record"} | {f"{m}-k{k}-{s}" for k in (2, 5, 10)
                         for m, strategies in (("group", ("random", "longest")), ("userwise", ("random", "chunk")))
                         for s in strategies}
    assert set(c.unit) == want and len(params.runs()) == 4 * 13
    assert params.audit.cube.unit == ["record"] and not params.score.acr.enabled
    if name == "user-level-enron":
        assert params.data.source == "enron" and Path(params.data.path).is_absolute()
        assert params.secrets.ngram == 16  # the 50-token default mined no secret inside the tiny BPE's window


@pytest.mark.parametrize("name", ["enron-smollm2", "tofu-smollm2"])
def test_the_shipped_presets_are_valid_overlays_of_params_yaml(name):
    raw = resolve_preset(name, ROOT)
    params = parse_params(raw)
    assert params.base.name == "smollm2-135m" and params.cube.method == ["lora"] == params.audit.cube.method
    assert Path(params.data.path).is_absolute()
    assert Path(params.data.path).resolve() == (ROOT / ".." / "shared" / "data").resolve() / Path(params.data.path).parent.name / Path(params.data.path).name
    # The research's cube axes: a finite ε and ∞, two values each of b, T and η, two seeds.
    c = params.cube
    assert any(e == float("inf") for e in c.epsilon) and any(e != float("inf") for e in c.epsilon)
    assert min(len(c.batch_size), len(c.steps), len(c.learning_rate), len(c.seed)) >= 2
    # Keys the preset does not set come from params.yaml (e.g. the analysis settings).
    assert params.analyze.retention_fraction == parse_params(resolve_preset(name, ROOT)).analyze.retention_fraction


def test_the_enron_tiny_preset_is_the_research_cube_on_filtered_mined_secrets():
    """Issue 26: tiny GPT-2 fully fine-tuned on the real Enron sample, mined secrets through the research's filter (one
    non-private fine-tune: the most-compute configuration's first seed), ACR searched
    on both ε with prompts up to the published 30 tokens, and a one-run audit at the finite ε."""
    raw = resolve_preset("enron-tiny", ROOT)
    params = parse_params(raw)
    assert params.base.name == "tiny-gpt2" and params.cube.method == ["full"] == params.audit.cube.method
    assert params.data.source == "enron" and Path(params.data.path).is_absolute()
    assert raw["inputs"] == {"corpus": params.data.path}
    assert params.secrets.ngram + 1 <= params.base.seq_len  # a mined n-gram fits the window
    assert params.secrets.filter and params.secrets.filter_runs == "most_compute_first_seed"
    c = params.cube
    assert sorted(c.epsilon) == [8, float("inf")]
    assert min(len(c.batch_size), len(c.steps), len(c.learning_rate), len(c.seed)) >= 2 and len(params.runs()) == 32
    acr = params.score.acr
    assert acr.enabled and acr.epsilons is None and acr.training_seeds is None and acr.max_length == 30 and acr.max_secrets is None
    assert len(params.audit_runs()) == 1 and params.audit.cube.epsilon == [8]


def test_a_preset_that_does_not_exist_names_the_known_ones(tmp_path):
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "mine.yaml").write_text("cube: {seed: [0]}\n")
    with pytest.raises(ConfigError, match=r"preset 'nope' does not exist .*known presets: mine"):
        resolve_preset("nope", tmp_path)


def test_a_bad_preset_fails_validation_before_any_worktree_exists(tmp_path):
    from empriv.study import run_study

    (tmp_path / "presets").mkdir()
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (tmp_path / "presets" / "bad.yaml").write_text("cube:\n  epsilon: [-1]\n")
    with pytest.raises(ConfigError, match=r"cube.epsilon\[0\]: must be > 0 \(got -1"):
        run_study("bad", tmp_path)
    assert not (tmp_path / ".studies").exists() and not (tmp_path / "results").exists()


def test_data_path_override_is_resolved_against_the_project_root(tmp_path):
    (tmp_path / "presets").mkdir()
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "emails.csv").write_text('"file","message"\n')
    (tmp_path / "presets" / "p.yaml").write_text("data:\n  source: enron\n  path: corpus/emails.csv\n")
    raw = resolve_preset("p", tmp_path)
    assert raw["data"]["path"] == str((corpus / "emails.csv").resolve())
    other = tmp_path / "other.csv"
    other.write_text("x")
    assert resolve_preset("p", tmp_path, data_path=str(other))["data"]["path"] == str(other)


def test_summarise_cost_groups_matrix_stages():
    records = [{"stage": "base", "wall_s": 40.0, "cpu_s": 39.0, "peak_rss_mb": 1500.0},
               {"stage": "train@a", "wall_s": 20.0, "cpu_s": 30.0, "peak_rss_mb": 2700.0},
               {"stage": "train@b", "wall_s": 50.0, "cpu_s": 80.0, "peak_rss_mb": 2900.0}]
    rows = {r["stage"]: r for r in summarise_cost(records)}
    assert rows["train"] == {"stage": "train", "processes": 2, "wall_s_total": 70.0, "wall_s_max": 50.0,
                             "cpu_s_total": 110.0, "peak_rss_mb_max": 2900.0}
    assert rows["base"]["processes"] == 1


def test_cube_files_name_the_study_runs_only():
    from empriv.study import cube_files

    files = cube_files(parse_params(resolve_preset("enron-smollm2", ROOT)))
    assert len(files) == 2 * 32 + 2  # train + score per run, one audit per audit-cube point
    assert "records/score/record/lora/eps8-b16-T16-lr0.01-s1.json" in files and "records/audit/record/lora/epsinf-b16-T16-lr0.01-s0.json" in files
    assert "records/score/record/full/eps2-b64-T16-lr0.005-s0.json" not in files  # the default cube's


def test_study_written_files_are_the_changed_untracked_and_ignored_ones(tmp_path):
    import subprocess

    from empriv.study import study_written_files

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "metrics").mkdir()
    for name in ("kept.json", "rewritten.json"):
        (tmp_path / "metrics" / name).write_text("{}")
    (tmp_path / ".gitignore").write_text("reports/\n")
    subprocess.run(git + ["add", "-A"], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-qm", "x"], cwd=tmp_path, check=True)
    (tmp_path / "metrics" / "rewritten.json").write_text('{"a": 1}')
    (tmp_path / "metrics" / "new.json").write_text("{}")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "report.html").write_text("<html>")
    assert study_written_files(tmp_path) == {"metrics/rewritten.json", "metrics/new.json", "reports/report.html"}


def test_a_study_runs_the_code_of_its_own_commit_not_the_live_tree(tmp_path):
    import subprocess
    import sys

    from empriv.study import study_env

    work = tmp_path / "work"
    (work / "src" / "empriv").mkdir(parents=True)
    (work / "src" / "empriv" / "__init__.py").write_text("WHERE = 'worktree'\n")
    env = study_env(work, tmp_path / "cost.jsonl")
    out = subprocess.run([sys.executable, "-c", "import empriv; print(empriv.__file__)"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(work / "src" / "empriv" / "__init__.py")
    assert env["EMPRIV_TIMING_LOG"] == str(tmp_path / "cost.jsonl")


def test_summarise_cost_counts_only_the_last_execution_of_each_stage():
    records = [{"stage": "train@a", "wall_s": 100.0, "cpu_s": 1.0, "peak_rss_mb": 10.0},
               {"stage": "train@a", "wall_s": 2.0, "cpu_s": 1.0, "peak_rss_mb": 5.0},  # re-run after a code change
               {"stage": "train@b", "wall_s": 3.0, "cpu_s": 1.0, "peak_rss_mb": 7.0}]
    (row,) = summarise_cost(records)
    assert row["processes"] == 2 and row["wall_s_total"] == 5.0 and row["wall_s_max"] == 3.0 and row["peak_rss_mb_max"] == 7.0


def test_each_stage_process_of_a_unit_cube_is_counted_once(tmp_path, monkeypatch):
    """The timing log names a stage process by its run (point and unit): the runs of one point under 13 units are
    13 processes in the study's cost summary, not one (user-level studies counted 17 of 110 before)."""
    import json
    import time

    from empriv.stage import record_cost
    from empriv.study import summarise_cost

    log = tmp_path / "cost.jsonl"
    units = ["record", "group-k2-random", "userwise-k5-chunk"]
    for unit in units:
        monkeypatch.setattr("sys.argv", ["/x/empriv/pipeline/train.py", "--name", "eps8-b32-T4-lr0.01-s0", "--epsilon", "8",
                                         "--unit", unit])
        record_cost(time.time(), str(log))
    names = [json.loads(line)["stage"] for line in log.read_text().splitlines()]
    assert names == ["train@eps8-b32-T4-lr0.01-s0", "train@eps8-b32-T4-lr0.01-s0-group-k2-random",
                     "train@eps8-b32-T4-lr0.01-s0-userwise-k5-chunk"]
    assert summarise_cost([json.loads(line) for line in log.read_text().splitlines()])[0]["processes"] == 3


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "presets").glob("*.yaml")))
def test_every_shipped_preset_validates(name, tmp_path):
    """Every preset merges over params.yaml and validates (a preset broken by a params change fails here, not on a
    user's machine). A preset on the real samples needs ../shared/data beside the project (CI has it); a preset on
    the user's own text (own-data: a placeholder path; debian-copyright: a corpus its tool builds) is validated
    against a stand-in JSONL with its fields and enough records."""
    data = read_yaml(ROOT / "presets" / f"{name}.yaml").get("data") or {}
    path = data.get("path")
    if data.get("source") == "text" and path and not (ROOT / path).exists():
        import json

        d = merge(read_yaml(ROOT / "params.yaml")["data"], data)
        n = 2 * (d["n_train"] + d["n_validation"] + d["n_test"])
        rows = [{d.get("text_field") or "text": f"record {i} of a stand-in corpus, a few words long",
                 **({d["user_field"]: f"user{i % 13}"} if d.get("user_field") else {})} for i in range(n)]
        stand_in = tmp_path / "corpus.jsonl"
        stand_in.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        raw = resolve_preset(name, ROOT, data_path=str(stand_in))
        assert raw["data"]["path"] == str(stand_in)
        parse_params(raw)
        return
    if path and not (ROOT / path).exists():
        pytest.skip(f"{name}: its corpus {path} is not beside this checkout (../shared/data)")
    raw = resolve_preset(name, ROOT)  # validates every part of a one-at-a-time design (tests/test_study_design.py)
    union_params(raw, [p for _, p in parts(raw)])


def test_a_study_trains_and_scores_its_cube_one_epsilon_at_a_time_each_pattern_matching_exactly_its_items():
    """A study's sweep commits at its end: training, then scoring, one ε at a time (each chunk committed) bounds
    what a killed study loses. Each chunk's --items pattern selects, among the items' keys as dvc.yaml builds them,
    those of its ε and no other (1 does not take 16)."""
    import fnmatch
    import itertools

    from empriv.config.runs import format_number
    from empriv.study import chunks

    cube = {"epsilon": [1, 16, 0.5, float("inf")], "batch_size": [128, 256], "steps": [50], "learning_rate": [0.01],
            "seed": [0, 1]}
    parts = chunks({"cube": cube})
    patterns = ["1-*", "16-*", "0.5-*", "inf-*"]
    assert parts == [("train", p) for p in patterns] + [("score", p) for p in patterns]
    keys = {e: [f"{format_number(e)}-{b}-{t}-{format_number(lr)}-{s}-record-full"
                for b, t, lr, s in itertools.product(cube["batch_size"], cube["steps"], cube["learning_rate"],
                                                     cube["seed"])] for e in cube["epsilon"]}
    every = [k for ks in keys.values() for k in ks]
    for e, pattern in zip(cube["epsilon"], patterns):
        assert [k for k in every if fnmatch.fnmatchcase(k, pattern)] == keys[e]
    assert chunks({"cube": {**cube, "epsilon": [8]}}) == []  # one ε: the --all sweep runs it
    assert [p for s, p in chunks(resolve_preset("research-cpu", ROOT)) if s == "train"] == \
        ["1-*", "2-*", "4-*", "8-*", "inf-*"]


def test_ctrl_c_during_a_study_waits_for_its_sweep_to_stop_in_order(tmp_path):
    """Ctrl-C reaches the study and its sweep together (the terminal's process group). The study waits for the
    sweep's orderly stop — its commit takes a while — however often Ctrl-C comes, instead of killing it 0.25 s
    later as subprocess.run does; `empriv study run` then says so in one line (exit 130)."""
    import signal
    import subprocess
    import sys
    import time

    child = ("import signal, sys, time, pathlib\n"
             "d = pathlib.Path(sys.argv[1])\n"
             "stop = []\n"
             "signal.signal(signal.SIGINT, lambda *a: stop.append(1))\n"
             "(d / 'ready').touch()\n"
             "while not stop: time.sleep(0.02)\n"
             "time.sleep(1.0)  # the commit of what finished\n"
             "(d / 'committed').touch()\n"
             "sys.exit(130)\n")
    (tmp_path / "child.py").write_text(child)
    parent = subprocess.Popen([sys.executable, "-c", "import sys\nfrom empriv.study import run_waiting\n"
                               "print(*run_waiting([sys.executable, sys.argv[1], sys.argv[2]]))",
                               str(tmp_path / "child.py"), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists():
            assert time.monotonic() < deadline and parent.poll() is None, parent.communicate()
            time.sleep(0.02)
        os.killpg(parent.pid, signal.SIGINT)
        time.sleep(0.4)
        os.killpg(parent.pid, signal.SIGINT)  # pressed again
        out, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert out.split() == ["130", "True"], out + err
    assert (tmp_path / "committed").exists()  # the child was not killed before its commit


def test_a_sweep_stopped_by_a_signal_interrupts_the_study_even_when_the_study_never_saw_it():
    """`empriv study run` started in the background of a script ignores SIGINT (the shell's rule for background
    jobs), so its sweep alone gets a kill -INT: the sweep's exit 130 (or 143 for SIGTERM) still means "interrupted,
    run again to resume", not a failed study."""
    import signal

    from empriv.study import stopped_by_signal

    assert stopped_by_signal(130) and stopped_by_signal(143)
    assert stopped_by_signal(-signal.SIGINT) and stopped_by_signal(-signal.SIGTERM)
    assert not any(stopped_by_signal(code) for code in (0, 1, 2, 137, -signal.SIGKILL))
