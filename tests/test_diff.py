"""empriv diff: every verdict on hand-made metrics, and two revisions of a tiny git + DVC repository."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from empriv.cli import main
from empriv.diff import Z, compare, format_markdown

VENV_BIN = Path(sys.executable).parent


def score(mean, se_seed, n=8, std=1.0):
    return {"mean": mean, "std": std, "worst": mean + 1, "n": n, "se": std / math.sqrt(n), "se_seed": se_seed,
            "n_runs": 2 * n}


def rows_by_key(rows):
    return {r.metric: r for r in rows}


def test_each_verdict_on_hand_made_metrics():
    old = {"s.json": {"eps8": {"gap": score(5.00, 0.10), "nll": score(3.00, 0.01), "util": score(2.0, 0.1),
                               "acr_searched": 40, "gone_key": 1.5},
                      "base_nll": 5.978, "drift": 1.2345, "also_null": None}}
    new = {"s.json": {"eps8": {"gap": score(5.20, 0.10), "nll": score(3.10, 0.01), "util": score(2.0, 0.1),
                               "acr_searched": 72, "gone_key": None, "new_key": 0.5},
                      "base_nll": 5.979, "drift": 1.2346, "also_null": None}}
    rows = compare(old, new)
    r = rows_by_key(rows)
    # within noise: |Δ| = 0.2 against 3·√(0.1² + 0.1²) = 0.42
    assert r["eps8.gap.mean"].verdict == "within noise"
    assert r["eps8.gap.mean"].sigma == pytest.approx(math.sqrt(0.02))
    assert r["eps8.gap.mean"].significance == pytest.approx(0.2 / math.sqrt(0.02))
    # changed: |Δ| = 0.1 against 3·√2·0.01 = 0.042
    assert r["eps8.nll.mean"].verdict == "changed" and r["eps8.nll.mean"].delta == pytest.approx(0.1)
    # a count has no uncertainty: changed above the relative tolerance (0.2 %)
    assert r["eps8.acr_searched"].verdict == "changed" and r["eps8.acr_searched"].sigma is None
    # float drift of a value without uncertainty stays below the relative tolerance
    assert r["drift"].verdict == "within noise" and r["base_nll"].verdict == "within noise"
    assert r["eps8.gone_key"].verdict == "gone" and r["eps8.new_key"].verdict == "new"
    assert "also_null" not in r  # null on both sides: no row
    assert r["eps8.util.mean"].verdict == "unchanged" and r["eps8.util.mean"].delta == 0  # equal: not "noise"
    # sorted: changed (most significant first), new, gone, within noise, unchanged
    verdicts = [x.verdict for x in rows]
    assert verdicts == sorted(verdicts, key=["changed", "new", "gone", "within noise", "unchanged"].index)
    # the count first: without σ its significance is |Δ| over the tolerance / z (666); the mean is 7.1σ; the
    # worst (one configuration: σ = √2·0.01·√8 = 0.04) moved 2.5σ, within noise
    assert [x.metric for x in rows if x.verdict == "changed"] == ["eps8.acr_searched", "eps8.nll.mean"]
    assert r["eps8.nll.worst"].verdict == "within noise"


def test_a_real_change_in_one_seed_noise_and_a_larger_z():
    old = {"m.json": {"x": score(1.0, 0.05)}}
    new = {"m.json": {"x": score(1.5, 0.05)}}
    assert rows_by_key(compare(old, new))["x.mean"].verdict == "changed"  # 0.5 > 3·0.071
    assert rows_by_key(compare(old, new, z=10))["x.mean"].verdict == "within noise"  # 0.5 < 10·0.071
    with pytest.raises(ValueError, match="z must be > 0, got 0"):
        compare(old, new, z=0)


def test_a_p_value_takes_the_verdict_of_its_statistic_and_coefficients_use_their_se():
    old = {"a.json": {"eps8": {"n": 8, "rho_score": 0.10, "p_score": 0.82, "coef_log_b": 5.69, "coef_log_b_se": 2.0,
                               "n_configs": 8}}}
    new = {"a.json": {"eps8": {"n": 8, "rho_score": 0.30, "p_score": 0.47, "coef_log_b": 6.20, "coef_log_b_se": 2.1,
                               "n_configs": 8}}}
    r = rows_by_key(compare(old, new))
    assert r["eps8.rho_score"].verdict == "within noise" and r["eps8.p_score"].verdict == "within noise"
    assert r["eps8.coef_log_b"].verdict == "within noise"  # 0.51 against 3·√(2² + 2.1²)
    assert r["eps8.coef_log_b_se"].verdict == "within noise"  # a standard error's own uncertainty: se/√(2(n−1))


def test_r2_uses_its_standard_error_and_no_longer_trips_the_relative_tolerance():
    """Another machine moved the default run's epsinf R² from 0.6871 to 0.6839 (ACR searches tipped by float drift):
    0.47 % of the value, changed under the 0.2 % tolerance while it had no uncertainty. With r2_se it is read
    against the spread of R² over the runs' noise."""
    old = {"a.json": {"epsinf": {"n_configs": 8, "r2": 0.6871, "r2_se": 0.14}}}
    new = {"a.json": {"epsinf": {"n_configs": 8, "r2": 0.6839, "r2_se": 0.14}}}
    bare = {"a.json": {"epsinf": {"n_configs": 8, "r2": 0.6839}}}
    assert rows_by_key(compare(old, new))["epsinf.r2"].verdict == "within noise"
    assert rows_by_key(compare({"a.json": {"epsinf": {"n_configs": 8, "r2": 0.6871}}}, bare))["epsinf.r2"].verdict == "changed"
    far = {"a.json": {"epsinf": {"n_configs": 8, "r2": 0.05, "r2_se": 0.05}}}
    assert rows_by_key(compare(old, far))["epsinf.r2"].verdict == "changed"  # 0.64 > 3·√(0.14² + 0.05²)


def test_markdown_leads_with_the_summary_and_shows_every_row_only_when_asked():
    old = {"s.json": {"a": score(1.0, 0.01), "b": 3, "c": 1.0, "c_se": 0.5}}
    new = {"s.json": {"a": score(2.0, 0.01), "b": 3, "c": 1.5, "c_se": 0.5}}
    rows = compare(old, new)
    md = format_markdown(rows, "base", "PR")
    # a.mean and a.worst moved by 1.0; c by 0.7σ; b and a's std, n, se, se_seed, n_runs and c_se are equal
    assert md.startswith("2 changed, 0 new, 0 gone, 1 within noise, 7 unchanged (changed: |Δ| > 3σ")
    assert "| s.json | a.mean | 1 | 2 | +1 | 70.7σ | changed |" in md
    assert "<details>" not in md and "| c |" not in md and "| b |" not in md  # only changed, new and gone
    full = format_markdown(rows, "base", "PR", show_all=True)
    head, _, folded = full.partition("<details>")
    assert head == md.rstrip("\n") + "\n\n"
    assert "<summary>1 metrics within noise</summary>" in folded and "| s.json | c | 1 | 1.5 | +0.5 | 0.7σ | within noise |" in folded
    assert "<summary>7 metrics unchanged</summary>" in folded and "| s.json | b | 3 | 3 | +0 | - | unchanged |" in folded
    assert folded.rstrip().endswith("</details>")


def test_text_output_prints_the_summary_first_and_hides_rows_within_noise_unless_all():
    from empriv.diff import format_text

    old = {"s.json": {"x": 1.0, "x_se": 0.1, "y": 1.0, "y_se": 0.1, "z": 2.0, "gone": 1}}
    new = {"s.json": {"x": 2.0, "x_se": 0.1, "y": 1.1, "y_se": 0.1, "z": 2.0, "fresh": 1}}
    rows = compare(old, new)
    text = format_text(rows, "HEAD", "workspace").splitlines()
    assert text[0].startswith("1 changed, 1 new, 1 gone, 1 within noise, 3 unchanged")
    shown = [line.split()[1] for line in text[3:]]
    assert shown == ["x", "fresh", "gone"]  # the header is text[2]; y (0.7σ), z, x_se, y_se hidden
    every = format_text(rows, "HEAD", "workspace", show_all=True).splitlines()
    assert every[0] == text[0] and [line.split()[1] for line in every[3:]] == ["x", "fresh", "gone", "y", "x_se",
                                                                              "y_se", "z"]
    quiet = format_text(compare(old, old), "HEAD", "workspace")
    assert quiet == "0 changed, 0 new, 0 gone, 0 within noise, 6 unchanged " \
                    "(changed: |Δ| > 3σ, σ the combined standard error of both sides, or > 0.2% of the value for a " \
                    "metric without one)\n"


def test_identical_files_are_all_unchanged_and_never_within_noise():
    files = {"s.json": {"eps8": {"gap": score(5.0, 0.1), "acr_success": 35, "acr_searched": 40}, "r2": 0.5}}
    assert {r.verdict for r in compare(files, json.loads(json.dumps(files)))} == {"unchanged"}


def test_acr_successes_are_judged_with_a_binomial_standard_error():
    """35 → 33 of 40 searches: σ = √(40·0.875·0.125 + 40·0.825·0.175) = √(4.375 + 5.775) = 3.19, so 0.6σ."""
    old = {"s.json": {"epsinf": {"acr_searched": 40, "acr_success": 35, "acr_rare_searched": 10, "acr_rare_success": 0}}}
    new = {"s.json": {"epsinf": {"acr_searched": 40, "acr_success": 33, "acr_rare_searched": 10, "acr_rare_success": 1}}}
    r = rows_by_key(compare(old, new))
    assert r["epsinf.acr_success"].sigma == pytest.approx(math.sqrt(4.375 + 5.775))
    assert r["epsinf.acr_success"].verdict == "within noise"
    assert r["epsinf.acr_searched"].verdict == "unchanged"
    # 0 of 10 takes p = 0.5/11: √(10·(0.5/11)(10.5/11)) = 0.6587; 1 of 10: √(10·0.1·0.9) = 0.949
    assert r["epsinf.acr_rare_success"].sigma == pytest.approx(math.hypot(0.6587, 0.9487), abs=1e-3)
    assert r["epsinf.acr_rare_success"].verdict == "within noise"
    far = {"s.json": {"epsinf": {"acr_searched": 40, "acr_success": 15}}}
    assert rows_by_key(compare(old, far))["epsinf.acr_success"].verdict == "changed"  # 20 > 3·√(4.375 + 10)


def test_a_configuration_value_is_judged_with_its_seed_standard_error():
    """configs.json: the seed noise of one configuration's mean (the 46 of 52 false 'changed' rows of issue 42)."""
    old = {"c.json": {"eps8-b256-T50-lr0.005": {"acr_mean": 4.1, "acr_mean_se": 0.4, "test_nll": 2.51, "test_nll_se": 0.02}}}
    new = {"c.json": {"eps8-b256-T50-lr0.005": {"acr_mean": 4.9, "acr_mean_se": 0.5, "test_nll": 2.71, "test_nll_se": 0.02}}}
    r = rows_by_key(compare(old, new))
    assert r["eps8-b256-T50-lr0.005.acr_mean"].verdict == "within noise"  # 0.8 < 3·√(0.4² + 0.5²) = 1.92
    assert r["eps8-b256-T50-lr0.005.test_nll"].verdict == "changed"  # 0.2 > 3·√2·0.02 = 0.085
    # a side written before the `_se` keys takes the other side's: σ = √2·0.5
    bare = {"c.json": {"eps8-b256-T50-lr0.005": {"acr_mean": 4.1}}}
    row = rows_by_key(compare(bare, new))["eps8-b256-T50-lr0.005.acr_mean"]
    assert row.sigma == pytest.approx(math.sqrt(2) * 0.5) and row.verdict == "within noise"


def test_the_count_of_configurations_with_a_value_of_a_censored_score_is_binomial():
    """ACR over successes has a value only where a search succeeded: its n (of the ε group's n_configs) moves."""
    def group(n):
        return {"n_configs": 8, "n_runs": 16, "acr_mean": {"mean": 3.0, "std": 1.0, "worst": 4.0, "n": n, "se": 0.4,
                                                            "se_seed": 0.3, "n_runs": n}}
    r = rows_by_key(compare({"s.json": {"eps2": group(2)}}, {"s.json": {"eps2": group(4)}}))
    assert r["eps2.acr_mean.n"].sigma == pytest.approx(math.hypot(math.sqrt(8 * 0.25 * 0.75), math.sqrt(8 * 0.25)))
    assert r["eps2.acr_mean.n"].verdict == "within noise" and r["eps2.n_configs"].verdict == "unchanged"


# ----------------------------------------------------------------------------- revisions of a real repository
DVC_YAML = """\
stages:
  summarise:
    cmd: python -c "pass"
    metrics:
      - metrics/summary.json:
          cache: false
"""


def sh(cmd, cwd):
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip()


def commit(repo: Path, summary: dict, message: str) -> str:
    (repo / "metrics").mkdir(exist_ok=True)
    (repo / "metrics/summary.json").write_text(json.dumps(summary))
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message], repo)
    return sh(["git", "rev-parse", "HEAD"], repo)


def dvc_repo(tmp_path: Path) -> Path:
    """A git + DVC repository in ``tmp_path/repo`` whose dvc.yaml declares the metrics of ``DVC_YAML``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    sh(["git", "init", "-q", "-b", "main"], repo)
    sh(["dvc", "init", "-q"], repo)
    (repo / "dvc.yaml").write_text(DVC_YAML)
    return repo


@pytest.mark.slow
def test_empriv_diff_reads_two_revisions_and_the_working_tree(tmp_path, capsys):
    repo = dvc_repo(tmp_path)
    a = commit(repo, {"eps8": {"gap": score(5.0, 0.1)}, "n_runs": 16}, "a")
    b = commit(repo, {"eps8": {"gap": score(9.0, 0.1)}, "n_runs": 16, "extra": 1.0}, "b")
    assert main(["diff", a, b, "--root", str(repo), "--json"]) == 0
    rows = {r["metric"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["eps8.gap.mean"]["verdict"] == "changed" and rows["eps8.gap.mean"]["old"] == 5.0
    assert rows["extra"]["verdict"] == "new" and rows["n_runs"]["verdict"] == "unchanged"
    # HEAD against the working tree (the default), where the mean moved by less than its noise
    (repo / "metrics/summary.json").write_text(json.dumps({"eps8": {"gap": score(9.05, 0.1)}, "n_runs": 16}))
    assert main(["diff", "--root", str(repo), "--md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("0 changed, 0 new, 1 gone, 2 within noise, 6 unchanged")  # gap's mean and worst moved
    assert "| metrics/summary.json | extra | 1 | - | - | - | gone |" in md
    assert "eps8.gap.mean" not in md  # within noise: hidden by default
    assert main(["diff", "--root", str(repo), "--md", "--all"]) == 0
    assert "| metrics/summary.json | eps8.gap.mean | 9 | 9.05 | +0.05 | 0.4σ | within noise |" in capsys.readouterr().out
    assert main(["diff", "--root", str(repo)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("0 changed, 0 new, 1 gone, 2 within noise, 6 unchanged") and "HEAD" in text[2]
    assert len(text) == 4  # summary, blank, header, the gone row
    assert main(["diff", "no-such-rev", "--root", str(repo)]) == 2
    assert capsys.readouterr().err.startswith("error: unknown Git revision 'no-such-rev'")


DVC_YAML_TWO = DVC_YAML + """\
metrics:
  - metrics/configs.json
"""


@pytest.mark.slow
def test_a_declared_metrics_file_missing_or_unreadable_is_one_line_and_exit_2(tmp_path, capsys):
    """Once, metrics/configs.json missing from the working tree read as 56 rows "gone", exit 0: a CI gate passed."""
    repo = dvc_repo(tmp_path)
    a = commit(repo, {"n_runs": 16, "kept": 1.0}, "a: one metrics file")
    (repo / "dvc.yaml").write_text(DVC_YAML_TWO)  # a second file declared, not written yet: missing at b
    b = commit(repo, {"n_runs": 16}, "b: configs.json declared")
    assert main(["diff", a, b, "--root", str(repo)]) == 2
    assert capsys.readouterr().err == (f"error: metrics/configs.json at {b}: does not exist, though dvc.yaml "
                                       "declares it there\n")
    (repo / "metrics/configs.json").write_text(json.dumps({"eps8": {"n": 3}}))
    c = commit(repo, {"n_runs": 16}, "c: configs.json written")
    # declared at c only: its metrics are new; a key missing inside a file that exists is still gone; exit 0
    assert main(["diff", a, c, "--root", str(repo), "--json"]) == 0
    rows = {r["metric"]: r["verdict"] for r in json.loads(capsys.readouterr().out)}
    assert rows == {"eps8.n": "new", "kept": "gone", "n_runs": "unchanged"}
    # the working tree: missing, then unreadable, on the second side; as the first side of two revisions
    (repo / "metrics/configs.json").unlink()
    assert main(["diff", "--root", str(repo)]) == 2
    assert capsys.readouterr().err == ("error: metrics/configs.json in the working tree: does not exist, though "
                                       "dvc.yaml declares it there (run `make repro`, or `dvc checkout` it)\n")
    (repo / "metrics/configs.json").write_text("{not json")
    assert main(["diff", "--root", str(repo)]) == 2
    assert capsys.readouterr().err == ("error: metrics/configs.json in the working tree: JSON file structure is "
                                       "corrupted, though dvc.yaml declares it there\n")
    assert main(["diff", b, c, "--root", str(repo)]) == 2
    assert capsys.readouterr().err.startswith(f"error: metrics/configs.json at {b}: does not exist")
    # the command's exit status, as a CI gate sees it
    proc = subprocess.run([str(VENV_BIN / "empriv"), "diff", "--root", str(repo)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_an_uncertainty_is_never_a_change_of_its_own_but_its_metric_still_is():
    """Issue 42: the default's re-seeding moved `config_seed_ratio_se` 3.44 → 30 and `test_nll.se_seed` 0.0099 →
    0.0019 — the σ of other rows, called changed. An `_se` beside its metric and `se`/`se_seed` beside `mean` are at
    most within noise; a standard deviation that is a finding (`std_seeds`) and an `_se` with no metric beside it
    are still judged."""
    old = {"a.json": {"e": {"n_configs": 8, "config_seed_ratio": 2.0, "config_seed_ratio_se": 3.44, "std_seeds": 1.0,
                            "orphan_se": 1.0},
                      "nll": {"n": 8, "n_runs": 16, "mean": 1.0, "se_seed": 0.0099, "std": 0.1}}}
    new = {"a.json": {"e": {"n_configs": 8, "config_seed_ratio": 2.1, "config_seed_ratio_se": 30.0, "std_seeds": 9.0,
                            "orphan_se": 30.0},
                      "nll": {"n": 8, "n_runs": 16, "mean": 1.5, "se_seed": 0.00189, "std": 0.1}}}
    r = rows_by_key(compare(old, new))
    assert r["e.config_seed_ratio_se"].verdict == "within noise" and r["nll.se_seed"].verdict == "within noise"
    assert r["e.config_seed_ratio_se"].significance > 3  # still shown with its Δ/σ
    assert r["nll.mean"].verdict == "changed"  # 0.5 against 3·√(0.0099² + 0.00189²)
    assert r["e.std_seeds"].verdict == "changed" and r["e.orphan_se"].verdict == "changed"
