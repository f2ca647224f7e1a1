"""tools/pr_report.py, the pull-request report: on a temporary git + DVC repository with a tiny cube.

The repository's dvc.yaml has a 2 × 2 matrix stage writing per-run metrics (and a cached model file), a summary
stage writing a metrics file and two plots, and a wide stage whose metrics file has ``train.width`` keys (to outgrow
a PR comment). The base commit has ``train.scale: 1.0``, the head ``2.0``: losses, the summary's mean and one plot
change, counts and the other plot do not. Everything runs the real git and dvc (no project pipeline: it takes
minutes). The cube path (worktree, preset, run-cache restore, remote fetch) is tested too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import pr_report  # noqa: E402

VENV_BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow  # ~1 min: dozens of real dvc calls

DVC_YAML = """\
stages:
  train:
    matrix:
      lr: ${cube.lr}
      seed: ${cube.seed}
    cmd: python train.py ${item.lr} ${item.seed}
    deps: [train.py]
    params: [train.scale, train.steps]
    outs:
      - models/run-${item.lr}-${item.seed}.bin
    metrics:
      - runs/run-${item.lr}-${item.seed}.json:
          cache: false
  summarise:
    cmd: python summarise.py
    deps: [summarise.py, runs]
    params: [train.steps]
    metrics:
      - summary.json:
          cache: false
    plots:  # uncached outputs that are metrics or plots keep a stage in DVC's run-cache (a plain out does not)
      - plots/curve.csv:
          cache: false
          x: step
          y: loss
      - plots/static.csv:
          cache: false
          x: k
          y: v
      - plots/fig.png:
          cache: false
      - plots/logo.png:
          cache: false
  wide:
    cmd: python wide.py
    deps: [wide.py]
    params: [train.scale, train.width]
    metrics:
      - wide.json:
          cache: false
"""

TRAIN_PY = """\
import json, sys, pathlib, yaml
lr, seed = float(sys.argv[1]), int(sys.argv[2])
p = yaml.safe_load(open("params.yaml"))["train"]
name = f"run-{sys.argv[1]}-{sys.argv[2]}"
pathlib.Path("runs").mkdir(exist_ok=True)
pathlib.Path("models").mkdir(exist_ok=True)
loss = round(p["scale"] * lr + 0.01 * seed, 6)
json.dump({"loss": loss, "steps": p["steps"], "count": 7}, open(f"runs/{name}.json", "w"))
pathlib.Path(f"models/{name}.bin").write_bytes(bytes(range(256)) * 4 + str(loss).encode())
"""

SUMMARISE_PY = """\
import json, pathlib, yaml
params = yaml.safe_load(open("params.yaml"))
steps, cube = params["train"]["steps"], params["cube"]
# the cube's runs by name (as empriv's analyze does): runs/ may hold other cubes' files
losses = [json.load(open(f"runs/run-{lr}-{seed}.json"))["loss"] for lr in cube["lr"] for seed in cube["seed"]]
mean = sum(losses) / len(losses)
json.dump({"loss_mean": round(mean, 6), "n_runs": len(losses)}, open("summary.json", "w"))
pathlib.Path("plots").mkdir(exist_ok=True)
rows = "".join(f"{t},{round(mean / (t + 1), 6)}\\n" for t in range(steps))
pathlib.Path("plots/curve.csv").write_text("step,loss\\n" + rows)
pathlib.Path("plots/static.csv").write_text("k,v\\na,1\\nb,2\\n")
png = bytes.fromhex("89504e470d0a1a0a")
pathlib.Path("plots/fig.png").write_bytes(png + str(mean).encode())
pathlib.Path("plots/logo.png").write_bytes(png + b"logo")
"""

WIDE_PY = """\
import json, yaml
p = yaml.safe_load(open("params.yaml"))["train"]
json.dump({f"metric_with_a_rather_long_descriptive_name_{i:04d}": round(p["scale"] * i, 3) for i in range(p["width"])},
          open("wide.json", "w"))
"""

PARAMS = {"train": {"scale": 1.0, "steps": 3, "width": 3}, "cube": {"lr": [0.1, 0.2], "seed": [0, 1]},
          "misc": {"label": "unchanged"}}
PRESET = {"train": {"steps": 2}, "cube": {"seed": [0]}}
GIT = ["git", "-c", "user.name=empriv-test", "-c", "user.email=test@example.invalid"]


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
    return e


def sh(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def write_params(repo: Path, params: dict) -> None:
    import yaml

    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def commit_run(repo: Path, params: dict, message: str) -> str:
    """params written, ``dvc repro``, everything committed; returns the commit."""
    write_params(repo, params)
    sh(["dvc", "repro", "-q"], repo)
    sh(["git", "add", "-A"], repo)
    sh(GIT + ["commit", "-qm", message], repo)
    return sh(["git", "rev-parse", "HEAD"], repo).strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The tiny repository with commits base (scale 1), head (scale 2) and wide (scale 3, 1,500 wide metrics)."""
    repo = tmp_path_factory.mktemp("prr") / "repo"
    repo.mkdir()
    sh(["git", "init", "-q", "-b", "main"], repo)
    sh(["dvc", "init", "-q"], repo)
    sh(["dvc", "config", "core.analytics", "false"], repo)
    for name, text in {"dvc.yaml": DVC_YAML, "train.py": TRAIN_PY, "summarise.py": SUMMARISE_PY, "wide.py": WIDE_PY,
                       "presets/ci.yaml": json.dumps(PRESET)}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    revs = {"base": commit_run(repo, PARAMS, "base")}
    revs["head"] = commit_run(repo, {**PARAMS, "train": {**PARAMS["train"], "scale": 2.0}}, "head")
    revs["wide"] = commit_run(repo, {**PARAMS, "train": {**PARAMS["train"], "scale": 3.0, "width": 1500}}, "wide")
    sh(["git", "checkout", "-q", revs["head"]], repo)
    sh(["dvc", "checkout", "-q"], repo)
    return repo, revs


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]


def section(comment: str, title: str) -> str:
    m = re.search(rf"^### {title}\n(.*?)(?=^### |\Z)", comment, flags=re.S | re.M)
    assert m, f"no section {title!r} in:\n{comment}"
    return m.group(1)


def verdict_tables(text: str) -> tuple[dict, dict]:
    """A metrics section as (changed, new and gone rows, rows within noise), each {(path, metric): the other cells}."""
    loud, _, quiet = text.partition("<details>")
    return ({(r[0], r[1]): r[2:] for r in table_rows(loud)[2:]}, {(r[0], r[1]): r[2:] for r in table_rows(quiet)[2:]})


# ----------------------------------------------------------------------------- pure helpers
def test_allocate_gives_small_parts_whole_and_splits_the_rest_evenly():
    assert pr_report.allocate([100, 5000, 20000], 10000) == [100, 4950, 4950]
    assert pr_report.allocate([10, 20], 1000) == [10, 20]
    assert sum(pr_report.allocate([7000, 7000, 7000], 10000)) <= 10000


def _big_table(n: int) -> str:
    head = "| Path | Metric | HEAD | workspace | Change |\n|------|--------|------|-----------|--------|\n"
    return head + "".join(f"| {'a.json' if i < n // 2 else 'b.json'} | m{i:05d} | {i} | {i + 1} | 1 |\n" for i in range(n))


def test_trim_table_drops_whole_rows_and_says_how_many_and_where():
    table = _big_table(1000)
    out = pr_report.trim_table(table, 5000, "See the artifact.")
    assert pr_report.size(out) <= 5000
    rows = table_rows(out)
    assert rows[0] == ["Path", "Metric", "HEAD", "workspace", "Change"]
    assert all(len(r) == 5 for r in rows)  # no row cut in the middle
    kept = len(rows) - 2
    assert table.splitlines()[: kept + 2] == [line for line in out.splitlines() if line.startswith("|")]
    m = re.search(r"_(\d+) of 1000 rows not shown .*: (\d+) of a\.json, 500 of b\.json\. See the artifact\._", out)
    assert m and int(m[1]) == 1000 - kept and int(m[2]) == 500 - kept
    assert pr_report.trim_table(table, len(table) + 1, "x") == table  # fits: unchanged


def test_trim_table_refuses_a_budget_below_its_header():
    with pytest.raises(pr_report.ReportError, match="cannot hold"):
        pr_report.trim_table(_big_table(50), 120, "x")


# ----------------------------------------------------------------------------- the comment on committed results
def test_comment_holds_the_changed_param_and_metrics_and_not_the_unchanged(repo, tmp_path):
    work, revs = repo
    out = tmp_path / "report"
    comment = pr_report.build_report(work, revs["base"], revs["head"], base_name="main", out=out,
                                     link="https://example.invalid/run/1")
    assert comment.startswith(pr_report.MARKER + "\n")
    assert pr_report.size(comment) < pr_report.GITHUB_COMMENT_LIMIT
    assert (out / "comment.md").read_text() == comment
    params = {r[1]: r[2:] for r in table_rows(section(comment, "Params"))[2:]}
    assert params == {"train.scale": ["1.0", "2.0"]}  # misc.label, steps, width: unchanged, absent
    b, h = revs["base"][:8], revs["head"][:8]
    assert table_rows(section(comment, "Params"))[0] == ["Path", "Param", f"base {b}", f"PR {h}"]
    metrics = section(comment, "Committed metrics")
    changed, quiet = verdict_tables(metrics)
    assert table_rows(metrics)[0] == ["Path", "Metric", f"base {b}", f"PR {h}", "Δ", "Δ/σ", "verdict"]
    # no uncertainty in these toy metrics: changed above the relative tolerance, sorted by |Δ| over it
    assert changed[("summary.json", "loss_mean")] == ["0.155", "0.305", "+0.15", "-", "changed"]  # scale ×2
    assert changed[("runs/run-0.2-1.json", "loss")] == ["0.21", "0.41", "+0.2", "-", "changed"]
    assert {m for _, m in changed} == {"loss", "loss_mean", "metric_with_a_rather_long_descriptive_name_0001",
                                       "metric_with_a_rather_long_descriptive_name_0002"}
    assert {v[-1] for v in changed.values()} == {"changed"}
    # counts, steps and the unchanged wide metric are equal on both sides: unchanged, counted in the summary only
    assert quiet == {} and "<details>" not in metrics
    assert f"**{len(changed)} changed, 0 new, 0 gone, 0 within noise, 10 unchanged (changed: |Δ| > 3σ" in metrics
    for metric in ("count", "steps", "n_runs", "metric_with_a_rather_long_descriptive_name_0000"):
        assert f"| {metric} |" not in metrics
    # the verdicts lead: cube or committed metrics before the params, the plots last
    assert comment.index("### Committed metrics") < comment.index("### Params")
    assert "not shown" not in comment  # small enough: nothing trimmed
    assert "Metrics of the CI cube" not in comment  # no cube records given


def test_comment_without_changes_says_so(repo, tmp_path):
    work, revs = repo
    comment = pr_report.build_report(work, revs["head"], revs["head"], out=tmp_path / "r")
    assert "No param changed." in comment
    assert "Committed metrics" not in comment
    assert not table_rows(comment)


def test_an_oversize_diff_is_trimmed_by_rows_under_githubs_limit(repo, tmp_path):
    work, revs = repo
    out = tmp_path / "wide"
    comment = pr_report.build_report(work, revs["head"], revs["wide"], out=out, link="https://example.invalid/run/2")
    full = (out / "committed_metrics_diff.md").read_text()
    assert pr_report.size(full) > pr_report.GITHUB_COMMENT_LIMIT  # the untrimmed diff does not fit ...
    assert pr_report.size(comment) <= pr_report.GITHUB_COMMENT_LIMIT  # ... the comment does
    shown = table_rows(section(comment, "Committed metrics").partition("<details>")[0])  # the changed rows
    full_rows = table_rows(full.partition("<details>")[0])
    assert len(full_rows) - 2 >= 1500 and len(shown) < len(full_rows)
    assert shown == full_rows[: len(shown)]  # a prefix of whole rows, none cut
    m = re.search(r"_(\d+) of (\d+) rows not shown", comment)
    assert m and int(m[1]) == len(full_rows) - len(shown) and int(m[2]) == len(full_rows) - 2
    assert "https://example.invalid/run/2" in comment.split("not shown", 1)[1]
    # the params table is small: it is kept whole beside the trimmed one
    assert {r[1] for r in table_rows(section(comment, "Params"))[2:]} == {"train.scale", "train.width"}
    small = pr_report.build_report(work, revs["head"], revs["wide"], limit=3000)
    assert pr_report.size(small) <= 3000 and "rows not shown" in small


def test_command_line_writes_the_comment_and_rejects_bad_input(repo, tmp_path, capsys):
    work, revs = repo
    out = tmp_path / "cli"
    assert pr_report.main(["report", "--root", str(work), "--base", revs["base"], "--head", revs["head"],
                           "--out", str(out)]) == 0
    assert "train.scale" in (out / "comment.md").read_text()
    assert pr_report.main(["report", "--root", str(work), "--base", revs["base"], "--out", str(out),
                           "--limit", "10"]) == 2
    assert capsys.readouterr().err.strip() == "error: --limit must be >= 1000 bytes, got 10"
    assert pr_report.main(["report", "--root", str(work), "--base", "no-such-rev", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: `git rev-parse") and "no-such-rev" in err and "\n" not in err


# ----------------------------------------------------------------------------- the cube: worktree, preset, run-cache
@pytest.fixture(scope="module")
def cubes(repo, tmp_path_factory):
    work, revs = repo
    tmp = tmp_path_factory.mktemp("cubes")
    preset = work / "presets/ci.yaml"
    base = pr_report.run_cube(work, revs["base"], preset, tmp / "base")
    head = pr_report.run_cube(work, revs["head"], preset, tmp / "head")
    return work, revs, base, head, tmp


def test_cube_runs_the_preset_over_each_revisions_params_and_commits_the_result(cubes):
    work, revs, base, head, tmp = cubes
    import yaml

    assert base["sha"] == revs["base"] and head["sha"] == revs["head"]
    for record, scale in ((base, 1.0), (head, 2.0)):
        params = yaml.safe_load(pr_report.git(["show", f"{record['commit']}:params.yaml"], work))
        assert params["train"] == {"scale": scale, "steps": 2, "width": 3}  # the preset's keys win, the rest is the rev's
        assert params["cube"] == {"lr": [0.1, 0.2], "seed": [0]}
        assert pr_report.git(["rev-parse", f"{record['commit']}^"], work) == record["sha"]
    # the preset changes steps and seeds: train and summarise run, wide (params untouched) stays as committed
    stages = ["summarise", "train@0.1-0", "train@0.2-0"]
    assert sorted(base["ran"]) == stages and base["restored"] == []
    assert sorted(head["ran"]) == stages and head["restored"] == []
    summary = json.loads(pr_report.git(["show", f"{head['commit']}:summary.json"], work))
    assert summary == {"loss_mean": 0.3, "n_runs": 2}  # lr 0.1 and 0.2 at seed 0, scale 2


def test_cube_comment_diffs_the_cube_results_and_lists_the_changed_plot(cubes, tmp_path):
    work, revs, base, head, _ = cubes
    out = tmp_path / "report"
    comment = pr_report.build_report(work, revs["base"], revs["head"], cube_base=base, cube_head=head, out=out,
                                     link="https://example.invalid/run/3")
    cube = section(comment, "Metrics of the CI cube")
    rows, quiet = verdict_tables(cube)
    assert rows[("summary.json", "loss_mean")] == ["0.15", "0.3", "+0.15", "-", "changed"]
    assert ("summary.json", "n_runs") not in rows and ("summary.json", "n_runs") not in quiet  # unchanged: counted
    assert "**5 changed, 0 new, 0 gone, 0 within noise, 6 unchanged" in cube
    assert comment.index("### Metrics of the CI cube") < comment.index("### Params") < comment.index("### Plots")
    assert f"Base `{revs['base'][:8]}`: computed (3 stages run, 0 restored)" in cube
    plots = section(comment, "Plots")
    assert "- `plots/curve.csv`: changed" in plots and "- `plots/fig.png`: changed" in plots
    assert "static.csv" not in plots and "logo.png" not in plots
    assert plots.startswith("\n2 plot(s) of the cube whose data changed")
    html = (out / "plots" / "index.html").read_text()
    assert "curve.csv" in html and "static.csv" in html


def test_a_second_cube_at_the_same_revision_is_restored_from_the_run_cache(cubes):
    work, revs, base, _, tmp = cubes
    again = pr_report.run_cube(work, revs["base"], work / "presets/ci.yaml", tmp / "base-again")
    assert again["ran"] == []
    assert sorted(again["restored"]) == ["summarise", "train@0.1-0", "train@0.2-0"]
    # restored outputs are byte-identical: the result commit has the same tree as the computed one
    assert pr_report.git(["rev-parse", f"{again['commit']}^{{tree}}"], work) == \
        pr_report.git(["rev-parse", f"{base['commit']}^{{tree}}"], work)


def _fresh_clone(work: Path, remote: Path, where: Path) -> Path:
    sh(["git", "clone", "-q", str(work), str(where)], where.parent)
    sh(["dvc", "remote", "add", "--local", "-d", "ci", str(remote)], where)
    return where


def test_a_fresh_clone_fetches_the_base_results_from_the_remote_instead_of_computing(cubes, tmp_path, capsys):
    work, revs, base, _, _ = cubes
    remote = tmp_path / "remote"
    sh(["dvc", "remote", "add", "--local", "-f", "-d", "ci", str(remote)], work)
    try:
        # DVC's own `push --run-cache` sends the records of the stage runs, not their outputs: a clone that fetches
        # them still runs every stage
        sh(["dvc", "push", "-q", "--run-cache"], work)
        plain = _fresh_clone(work, remote, tmp_path / "plain")
        sh(["dvc", "fetch", "-q", "--run-cache"], plain)
        ran = pr_report.run_cube(plain, revs["base"], plain / "presets/ci.yaml", tmp_path / "cube-plain")
        assert sorted(ran["ran"]) == ["summarise", "train@0.1-0", "train@0.2-0"] and ran["restored"] == []
        # pr_report's run-cache push/fetch move the outputs too: the clone restores every stage, runs none
        assert pr_report.main(["run-cache", "push", "--root", str(work)]) == 0
        pushed = capsys.readouterr().out
        fresh = _fresh_clone(work, remote, tmp_path / "fresh")
        assert pr_report.main(["run-cache", "fetch", "--root", str(fresh)]) == 0
        fetched_line = capsys.readouterr().out
        n = re.search(r"run-cache push: (\d+) stage runs, (\d+) objects", pushed)
        assert n and int(n[1]) >= 3 and int(n[2]) >= 3
        assert re.search(rf"run-cache fetch: {n[1]} stage runs, \d+ objects", fetched_line)
        fetched = pr_report.run_cube(fresh, revs["base"], fresh / "presets/ci.yaml", tmp_path / "cube-fresh")
        assert fetched["ran"] == [] and sorted(fetched["restored"]) == ["summarise", "train@0.1-0", "train@0.2-0"]
        assert pr_report.git(["rev-parse", f"{fetched['commit']}^{{tree}}"], fresh) == \
            pr_report.git(["rev-parse", f"{base['commit']}^{{tree}}"], work)  # the very same results
    finally:
        sh(["dvc", "remote", "remove", "--local", "ci"], work)


def test_run_cache_fetch_without_a_remote_is_one_error_line(repo, tmp_path, capsys):
    work, _ = repo
    lonely = tmp_path / "lonely"
    sh(["git", "clone", "-q", str(work), str(lonely)], tmp_path)
    assert pr_report.main(["run-cache", "fetch", "--root", str(lonely)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run-cache fetch: ") and err.count("\n") == 1


def test_cube_rejects_a_preset_that_is_not_a_mapping(repo, tmp_path):
    work, revs = repo
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(pr_report.ReportError, match="must be a mapping of params sections, got list"):
        pr_report.run_cube(work, revs["base"], bad, tmp_path / "w")
