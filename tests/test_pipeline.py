"""End to end: the real DVC pipeline on a tiny cube, in a temporary copy of the repository."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow

TINY = {
    "runtime": {"device": "cpu", "threads": 1, "wandb_mode": "offline"},
    "data": {"n_train": 400, "n_validation": 20, "n_test": 40, "n_public": 400, "seed": 3,
             "secret_frequencies": [0.05, 0.02, 0.01]},
    "tokenizer": {"kind": "bpe", "vocab_size": 512},
    "base": {"n_layer": 1, "n_embd": 32, "n_head": 2, "seq_len": 64, "pretrain_steps": 20, "pretrain_batch_size": 16,
             "threads": 2},  # the base stage alone at 2 threads (the other stages: runtime.threads 1)
    "train": {"micro_batch_size": 16},
    "cube": {"epsilon": [8, "inf"], "batch_size": [32], "steps": [3], "learning_rate": [0.01], "seed": [0, 1]},
    "score": {"vmr_samples": 3, "n_controls": 4,
              "acr": {"epsilons": None, "steps": 8, "candidates": 32, "top_k": 64, "seeds": [0], "max_secrets": 2,
                      "max_length": 15,
                      "patience": 10}},
    # the audit cube: its own runs, trained with the member canaries
    "canaries": {"n_canaries": 120, "n_population": 20, "prefix_length": 8},
    "audit": {"cube": {"epsilon": [8, "inf"], "batch_size": [32], "steps": [12], "learning_rate": [0.05], "seed": [0]},
              "guesses": 20, "r_grid": [10, 20, 40]},
}


def default_params() -> dict:
    """Every params section at config's documented defaults (not the repository's params.yaml, which users edit)."""
    from empriv.config import Params

    defaults = {name: field.get_default(call_default_factory=True) for name, field in Params.model_fields.items()
                if name != "cube"}
    return {name: value.model_dump() if hasattr(value, "model_dump") else value for name, value in defaults.items()}


def write_params(work: Path, overrides: dict) -> None:
    """config's defaults with ``overrides`` merged in by section (DVC needs every section present)."""
    import yaml

    params = default_params()
    for section, values in overrides.items():
        params[section] = {**params.get(section, {}), **values}
    for cube in (params.get("cube"), params["audit"].get("cube")):  # the unit and method axes: record, full unless given
        if isinstance(cube, dict):
            cube.setdefault("unit", ["record"])
            cube.setdefault("method", ["full"])
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


_SHARED_WARM: list[Path] = []


def shared_warm_dir() -> Path:
    """The warm-worker directory (``EMPRIV_WARM_DIR``) of every scratch repository of this pytest process: one
    server pre-imports torch & co. once (~5 s) and forks the model stages of every copy, as it does for the stages
    of one repository, instead of one server per copy. tests/conftest.py removes its sockets at the end of the
    session (a server stops when its socket goes) and the directory, so none outlives the run by more than its idle
    timeout."""
    if not _SHARED_WARM:
        import tempfile

        _SHARED_WARM.append(Path(tempfile.mkdtemp(prefix="empriv-test-warm-")))
    return _SHARED_WARM[0]


def stop_warm_servers(directory: Path, *, remove: bool = False) -> None:
    """Stop every warm server listening in ``directory``: each exits within a second of its socket's removal (it
    logs so); with ``remove``, the directory goes too once they have."""
    import time

    directory = Path(directory)
    for sock in directory.glob("*.sock"):
        sock.unlink(missing_ok=True)
    if remove:
        log = directory / "server.log"
        deadline = time.monotonic() + 5
        while log.is_file() and time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if text.count(" exited") >= text.count(" listening at "):
                break
            time.sleep(0.1)
        shutil.rmtree(directory, ignore_errors=True)


def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["WANDB_MODE"] = "offline"
    env["EMPRIV_WARM_DIR"] = str(shared_warm_dir())  # dvc.yaml's model stages: one warm server for every copy
    env["EMPRIV_WARM_IDLE"] = "300"  # it lives between the tests (stopped at the session's end)
    env.pop("WANDB_API_KEY", None)
    return env


def _run(cmd: list[str], cwd: Path, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def _sweep_log(proc: subprocess.CompletedProcess, cwd: Path) -> str:
    """The log file of an `empriv sweep` (its first printed line names it), without the times of day: the per-job
    lines (submitted, done, up to date at its turn, restored) are written there only."""
    found = re.search(r"; log (\S+/sweep\.log)$", proc.stdout.splitlines()[0])
    assert found, proc.stdout
    return "".join(line[9:] + "\n" for line in (cwd / found.group(1)).read_text().splitlines())


def _ran_stages(proc: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", proc.stdout + proc.stderr)


def make_repo(tmp: Path, overrides: dict) -> tuple[Path, dict, subprocess.CompletedProcess]:
    """A fresh copy of the tracked files in ``tmp/repo``, committed, with ``overrides``; `dvc repro` run once."""
    work = tmp / "repo"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        src = ROOT / rel
        outputs = rel.startswith(("metrics/", "records/", "plots/", "dvc.lock", "results/"))
        if src.is_file() and (not outputs or rel == "records/adaptation_audit/README.md"):  # analyze's dep in git
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, work / rel)
    write_params(work, overrides)
    env = _env(tmp)
    git = ["git", "-c", "user.name=empriv-test", "-c", "user.email=test@example.invalid"]
    _run(["git", "init", "-q"], work, env)
    _run(git + ["add", "-A"], work, env)
    _run(git + ["commit", "-qm", "fixture"], work, env)
    proc = _run(["dvc", "repro"], work, env)
    return work, env, proc


def copy_repo(work: Path, dest: Path) -> Path:
    """A copy of the scratch repository ``work`` (git, DVC cache, outputs; not its W&B runs) at ``dest``: DVC sees it
    up to date."""
    shutil.copytree(work, dest, symlinks=True, ignore=shutil.ignore_patterns("wandb", "warm"))  # never a warm socket
    return dest


@pytest.fixture(scope="module")
def repo(tiny_pipeline) -> tuple[Path, dict, subprocess.CompletedProcess]:
    """The tiny default (tiny-gpt2, its BPE), `dvc repro` run once: the session's ``tiny_pipeline``
    (tests/conftest.py; tests/test_diff_machines.py starts from a copy of it), which this module's tests change."""
    work, env, proc, _ = tiny_pipeline
    return work, env, proc


def _names(seeds=(0, 1)) -> list[str]:
    return [f"eps{e}-b32-T3-lr0.01-s{s}" for e in ("8", "inf") for s in seeds]


def _secrets(work: Path) -> list[dict]:
    return [json.loads(line) for line in (work / "data/secrets.jsonl").read_text().splitlines()]


def test_every_stage_ran_and_wrote_its_outputs(repo):
    work, _, proc = repo
    ran = _ran_stages(proc)
    for stage in ("prepare", "tokenizer", "secrets", "base", "filter", "analyze", "profiles"):
        assert stage in ran
    assert sum(s.startswith("train@") for s in ran) == 4
    assert sum(s.startswith("score@") for s in ran) == 4
    for rel in ("data/prepared/train.jsonl", "data/prepared/public.jsonl", "data/prepared/test.jsonl",
                "data/prepared/validation.jsonl", "models/tokenizer/tokenizer.json", "data/secrets.jsonl",
                "models/base/model.safetensors", "records/prepare.json", "records/base.json",
                "records/secrets.json", "records/filter.json", "data/secrets_filtered.jsonl", "data/heldout/test.jsonl",
                "records/runs.csv", "metrics/summary.json", "metrics/configs.json", "metrics/analysis.json",
                "plots/profiles/profiles.csv", "plots/profiles/eps8.png",
                "dvc.lock"):
        assert (work / rel).is_file(), rel
    for name in _names():
        assert (work / "models/runs/record/full" / name / "model.safetensors").is_file()
        assert (work / "records/train/record/full" / f"{name}.json").is_file()
        assert (work / "records/score/record/full" / f"{name}.json").is_file()


def test_prepare_and_secrets_metrics(repo):
    work, _, _ = repo
    prep = json.loads((work / "records/prepare.json").read_text())
    assert prep["n_train"] == 400 and prep["n_secrets"] == 3
    secrets = _secrets(work)
    assert [round(s["frequency"] * 400) for s in secrets] == [20, 8, 4]
    for s in secrets:
        assert s["prompt"] + s["continuation"] == s["text"]
        assert 0.0 <= s["in_window_fraction"] <= 1.0
    # `Forwarded by` lines open their email, so they sit inside even this small vocabulary's window.
    assert [s["in_window_fraction"] for s in secrets if s["kind"] == "forwarded_by"] == [1.0]
    public = json.loads((work / "records/secrets.json").read_text())
    assert all("text" not in s and "prompt" not in s for s in public["secrets"])
    base = json.loads((work / "records/base.json").read_text())
    assert 1.0 < base["test_perplexity"] < 512  # better than uniform over the 512-token vocabulary
    assert base["threads"] == 2  # base.threads, not runtime.threads (1)


def test_train_metrics_record_the_guarantee(repo):
    work, _, _ = repo
    for name in _names():
        m = json.loads((work / "records/train/record/full" / f"{name}.json").read_text())
        assert m["steps"] == 3 and len(m["loss_curve"]) == 3
        assert m["sampler"] == "poisson"
        assert m["delta"] == pytest.approx(400 ** -1.1)
        assert m["sample_rate"] == pytest.approx(32 / 400)
        if name.startswith("eps8"):
            assert m["accountant"] == "prv"
            assert m["noise_multiplier"] > 0
            assert 7.9 <= m["epsilon_prv"] <= 8.0
            assert m["epsilon_rdp"] >= m["epsilon_prv"]
        else:
            assert m["noise_multiplier"] == 0 and m["epsilon_prv"] == "inf"
    # Same ε, b, T → same σ across seeds; a different seed trains a different model.
    a, b = (json.loads((work / "records/train/record/full" / f"eps8-b32-T3-lr0.01-s{s}.json").read_text()) for s in (0, 1))
    assert a["noise_multiplier"] == b["noise_multiplier"]
    assert a["loss_curve"] != b["loss_curve"]


def test_score_and_summary(repo):
    work, _, _ = repo
    n_secrets = len(_secrets(work))
    for name in _names():
        m = json.loads((work / "records/score/record/full" / f"{name}.json").read_text())
        assert len(m["per_secret"]) == n_secrets
        assert 0.0 <= m["vmr_mean"] <= m["vmr_worst"] <= 1.0
        assert m["test_nll"] > 0 and math.isfinite(m["exposure_gap_mean"])
        assert m["continuation_nll_worst"] <= m["continuation_nll_mean"]
        assert all(set(r) >= {"id", "vmr", "continuation_nll", "exposure_gap"} and "text" not in r for r in m["per_secret"])
        # ACR on the seed-0 runs only (score.acr.training_seeds), for the first 2 secrets (max_secrets)
        acr = [r.get("acr") for r in m["per_secret"]]
        if name.endswith("-s0"):
            assert m["acr_protocol"]["ran"] and m["acr_protocol"]["n_secrets"] == 2
            # a failed search has no value (acr null) and an upper bound; acr_mean/acr_max are over successes only
            searched = m["per_secret"][:2]
            assert all(r["acr_success"] in (True, False) for r in searched) and acr[2:] == [None] * (n_secrets - 2)
            hits = [r["acr"] for r in searched if r["acr_success"]]
            assert all(a > 0 for a in hits)
            assert all(r["acr"] is None and r["acr_upper_bound"] > 0 for r in searched if not r["acr_success"])
            assert m["acr_n_searched"] == 2 and m["acr_n_success"] == len(hits)
            assert m["acr_success_rate"] == pytest.approx(len(hits) / 2)
            if hits:
                assert m["acr_mean"] == pytest.approx(sum(hits) / len(hits)) and m["acr_max"] == max(hits)
            else:
                assert m["acr_mean"] is None and m["acr_max"] is None
        else:
            assert not m["acr_protocol"]["ran"] and "acr_mean" not in m and acr == [None] * n_secrets
    detail = json.loads((work / "records/scores_by_epsilon.json").read_text())
    assert set(detail["per_epsilon"]) == {"8", "inf"} and detail["n_runs"] == 4
    for entry in detail["per_epsilon"].values():
        assert entry["n_configs"] == 1 and entry["n_runs"] == 2
    # the DVC metric: headline per ε group, numbers only, ε numeric (∞ is its own key)
    summary = json.loads((work / "metrics/summary.json").read_text())
    assert summary["n_runs"] == 4 and {"eps8", "epsinf"} <= set(summary)
    assert summary["eps8"]["epsilon"] == 8.0 and "epsilon" not in summary["epsinf"]
    assert summary["eps8"]["test_nll"]["n"] == 1 and summary["eps8"]["n_runs"] == 2
    means = [json.loads((work / "records/score/record/full" / f"{n}.json").read_text())["test_nll"] for n in _names() if "eps8" in n]
    # written to the second significant digit of its seed standard error (empriv.analysis.precision): exact in records/
    t = summary["eps8"]["test_nll"]
    assert t["n_runs"] == 2 and t["se"] is None and t["se_seed"] > 0
    assert t["mean"] == pytest.approx(sum(means) / len(means), abs=t["se_seed"] / 10)
    assert summary["base_test_nll"] == pytest.approx(json.loads((work / "records/base.json").read_text())["test_nll"],
                                                     rel=1e-3)  # no uncertainty: 4 significant digits
    configs = json.loads((work / "metrics/configs.json").read_text())
    assert set(configs) == {"eps8-b32-T3-lr0.01", "epsinf-b32-T3-lr0.01"}
    assert all(isinstance(v, (int, float)) or v is None for c in configs.values() for v in c.values())
    csv = (work / "records/runs.csv").read_text().splitlines()
    assert len(csv) == 5 and "exposure_gap_mean" in csv[0]


def test_analysis_metrics_plots_and_report(repo):
    work, _, _ = repo
    analysis = json.loads((work / "records/analysis.json").read_text())
    assert analysis["n_runs"] == 4 and analysis["primary_score"]
    for part in ("seed_vs_configuration", "regression", "heuristics", "selection"):
        assert part in analysis
    s = analysis["primary_score"]
    assert set(analysis["seed_vs_configuration"][s]) == {"8", "inf"}
    assert set(analysis["selection"]) == {"8"}  # no selection at ε = inf
    compact = json.loads((work / "metrics/analysis.json").read_text())
    assert set(compact) == {"n_configs", "n_configs_kept", s} and set(compact[s]) == {"eps8", "epsinf"}
    randomness = analysis["seed_vs_configuration"][s]["8"]["randomness"]  # one configuration: 4 significant digits
    assert compact[s]["eps8"]["std_seeds"] == (None if randomness is None else pytest.approx(randomness, rel=1e-3))
    for rel in ("variance.png", "heuristics.png", "variance.csv", "heuristics.csv", "risks.csv", "selection.csv"):
        assert (work / "plots/analysis" / rel).stat().st_size > 0, rel
    html = (work / "reports/report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("data:image/png;base64,") >= 3
    assert "poisson" in html and "eps8-b32-T3-lr0.01-s0" in html
    for secret in _secrets(work):
        for text in (secret["text"], secret["continuation"]):
            assert text not in html and text not in json.dumps(analysis)


def test_no_secret_reaches_wandb_or_logs(repo):
    work, _, proc = repo
    needles = []
    for s in _secrets(work):
        needles += [s["text"], s["continuation"]]
    wandb_files = [p for p in (work / "wandb").rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in wandb_files), "the train runs must have written offline W&B runs"
    for p in wandb_files:
        data = p.read_bytes()
        for needle in needles:
            assert needle.encode() not in data, f"a secret reached {p.relative_to(work)}"
    logs = proc.stdout + proc.stderr
    for needle in needles:
        assert needle not in logs
    for p in [*(work / "metrics").rglob("*"), *(work / "records").rglob("*")]:
        if p.is_file():
            text = p.read_text()
            assert not any(n in text for n in needles), p


def test_second_repro_is_a_no_op_and_one_cube_change_reruns_only_it(repo):
    work, env, _ = repo
    again = _run(["dvc", "repro"], work, env)
    assert _ran_stages(again) == []  # nothing re-runs: no stage is always_changed
    write_params(work, {**TINY, "cube": {**TINY["cube"], "seed": [0, 2]}})
    _run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qam", "seed 2"], work, env)
    changed = _run(["dvc", "repro"], work, env)
    ran = set(_ran_stages(changed)) - {"validate"}
    # the filter stage re-reads the non-private models (its output is unchanged: filters are off by default)
    assert ran == {"train@8-32-3-0.01-2-record-full", "train@inf-32-3-0.01-2-record-full",
                   "score@8-32-3-0.01-2-record-full", "score@inf-32-3-0.01-2-record-full",
                   "filter", "analyze"}
    summary = json.loads((work / "metrics/summary.json").read_text())
    assert summary["n_runs"] == 4  # the stale seed-1 files are not counted: the table follows the cube


def test_a_code_edit_reruns_exactly_the_stages_that_import_the_file(repo, tmp_path):
    """Stages depend on their code fingerprints (the code stage): an edit to a scoring module re-runs the code
    stage, every score@ and what reads the scores, but no training, auditing or data stage; then nothing."""
    import yaml

    work, env, _ = repo
    edit, swept = tmp_path / "edit", tmp_path / "swept"
    for copy in (edit, swept):
        shutil.copytree(work, copy, symlinks=True, ignore=shutil.ignore_patterns("wandb", "warm"))
    seeds = yaml.safe_load((edit / "params.yaml").read_text())["cube"]["seed"]  # an earlier test may change them
    assert _ran_stages(_run(["dvc", "repro"], edit, env)) == []
    for copy in (edit, swept):
        with open(copy / "src/empriv/score/vmr.py", "a") as fh:
            fh.write("\n# an edit that changes no result\n")
    status = json.loads(_run(["dvc", "status", "--json"], edit, env).stdout)
    assert set(status) == {"code"}, status  # DVC sees the source change; the fingerprints carry it downstream
    ran = _ran_stages(_run(["dvc", "repro"], edit, env))
    assert ran[0] == "code"
    assert {s for s in ran if s.startswith("score@")} == {f"score@{e}-32-3-0.01-{s}-record-full"
                                                         for e in ("8", "inf") for s in seeds}
    assert not [s for s in ran if s.startswith(("train@", "audit@", "input@"))]
    assert not {"validate", "prepare", "tokenizer", "secrets", "base", "canaries"} & set(ran), ran
    assert _ran_stages(_run(["dvc", "repro"], edit, env)) == []
    # `make repro`'s `empriv sweep --all` plans every stage below `code` as stale, but decides at each stage's
    # turn as `dvc repro` does: the same stages run (the others' fingerprints came out unchanged) — and, where an
    # earlier test removed a cube value with plain `dvc repro`, the sweep moves that value's stale outputs out of the
    # directories a stage reads (issue 43), so that stage runs too, once
    sweep = _run([str(VENV_BIN / "empriv"), "sweep", "--engine", "local", "--all"], swept, env)
    log = _sweep_log(sweep, swept)
    cleaned = set(re.findall(r"^moved \d+ output\(s\) of runs dvc\.yaml no longer has out of .* \(read by (\w+)\)",
                             log, re.M))
    assert cleaned <= {"filter", "analyze"}, log
    assert set(re.findall(r"^done (\S+) ", log, re.M)) == set(ran) | cleaned, log
    assert "up to date at its turn: train@" in log
    assert _ran_stages(_run(["dvc", "repro"], swept, env)) == []


def test_make_repro_s_sweep_gives_what_dvc_repro_gives(repo, tmp_path):
    """`make repro` runs every stage as an `empriv sweep --all` local job, then `dvc repro`: for a new cube point
    the sweep trains and scores it (2 jobs at once) and runs what reads them (filter, analyze), `dvc repro` has
    nothing left to do, and the models and records equal those of a plain `dvc repro` of the same change."""
    import yaml

    work, env, _ = repo
    # a seed no other test uses (DVC's run-cache, copied with the repository, would restore its runs otherwise),
    # added to the cube as an earlier test may have left it
    seeds = yaml.safe_load((work / "params.yaml").read_text())["cube"]["seed"]
    assert 7 not in seeds
    copies = {}
    for name in ("swept", "plain"):
        copies[name] = tmp_path / name
        shutil.copytree(work, copies[name], symlinks=True, ignore=shutil.ignore_patterns("wandb", "warm"))
        params = yaml.safe_load((copies[name] / "params.yaml").read_text())
        params["cube"]["seed"] = [*seeds, 7]
        (copies[name] / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    new = {f"{st}@{e}-32-3-0.01-7-record-full" for st in ("train", "score") for e in ("8", "inf")}
    sweep = _run([str(VENV_BIN / "empriv"), "sweep", "--engine", "local", "--jobs", "2", "--all"], copies["swept"],
                 env)
    plain = set(_ran_stages(_run(["dvc", "repro"], copies["plain"], env)))
    assert new <= plain
    log = _sweep_log(sweep, copies["swept"])
    assert set(re.findall(r"^done (\S+) ", log, re.M)) == plain, log  # filter, analyze, ...
    assert "dvc status of them: clean" in sweep.stdout
    assert _ran_stages(_run(["dvc", "repro"], copies["swept"], env)) == []
    for name in ("swept", "plain"):
        assert _ran_stages(_run(["dvc", "repro"], copies[name], env)) == []

    def digest(root: Path) -> dict:
        """The new point's models (bytes) and records (the times and memory they measure left out)."""
        out = {}
        for top in ("models/runs", "records/train", "records/score"):
            for p in sorted((root / top).rglob("*")):
                if p.is_file() and "-s7" in str(p):
                    if p.suffix == ".json" and top.startswith("records"):
                        rec = json.loads(p.read_text())
                        out[str(p.relative_to(root))] = {k: v for k, v in rec.items()
                                                         if not k.endswith("_time_s") and k != "peak_memory"}
                    else:
                        out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        return out

    swept, plain_d = digest(copies["swept"]), digest(copies["plain"])
    assert len(swept) >= 8 and swept.keys() == plain_d.keys()
    differ = [k for k in swept if swept[k] != plain_d[k]]
    assert not differ, differ


def test_user_level_units_train_score_and_sit_beside_record_level(repo, tmp_path):
    """cube.unit gains Group Privacy and User-wise DP-SGD units: only their train@/score@ runs (and the record
    scores, the analysis) run; their records carry the unit's accounting; the summary, the configurations and the
    report show them next to the record-level runs, whose metrics keys are unchanged."""
    work, env, _ = repo
    ul = tmp_path / "ul"
    shutil.copytree(work, ul, symlinks=True, ignore=shutil.ignore_patterns("wandb", "warm"))  # not the warm socket
    units = ["record", "group-k2-random", "userwise-k2-chunk"]
    # the tiny corpus has ~11 synthetic users: b = 8 records (Group) or units (User-wise) per step; the audit cube
    # audits the two user-level configurations at ε = 8 with canary units of k = 2 records
    audit_cube = {"epsilon": [8], "batch_size": [8], "steps": [3], "learning_rate": [0.01], "seed": [0],
                  "unit": units[1:]}
    write_params(ul, {**TINY, "cube": {**TINY["cube"], "seed": [0], "batch_size": [8], "unit": units},
                      "audit": {**TINY["audit"], "cube": audit_cube}})
    proc = _run(["dvc", "repro"], ul, env)
    ran = set(_ran_stages(proc)) - {"validate"}
    assert {s for s in ran if s.startswith(("train@", "score@"))} == {
        f"{st}@{e}-8-3-0.01-0-{u}-full" for st in ("train", "score") for e in ("8", "inf") for u in units}
    assert "analyze" in ran and "canaries" in ran
    assert {s for s in ran if s.startswith("audit@")} == {f"audit@8-8-3-0.01-0-{u}-full" for u in units[1:]}
    assert "record_scores" not in ran and (ul / "data/record_scores.json").is_file()  # computed once, by the first run
    g = json.loads((ul / "records/train/group-k2-random/full/eps8-b8-T3-lr0.01-s0.json").read_text())
    w = json.loads((ul / "records/train/userwise-k2-chunk/full/eps8-b8-T3-lr0.01-s0.json").read_text())
    prep = json.loads((ul / "records/prepare.json").read_text())["train_units"]
    assert g["accountant"] == "pld-mog" and g["n_bounded_records"] == 2 * prep["n_units"] == 2 * g["n_units"]
    assert g["epsilon_user_level"] <= 8 + 1e-3 and g["epsilon_record_level_prv"] < g["epsilon_user_level"]
    assert w["sample_rate"] == pytest.approx(8 / prep["n_units"]) and w["epsilon_user_level"] == pytest.approx(8, abs=0.05)
    assert w["mean_records_per_step"] == pytest.approx(2 * w["mean_units_per_step"]) and w["config"].endswith("-userwise-k2-chunk-full")
    assert (ul / "models/runs/userwise-k2-chunk/full/eps8-b8-T3-lr0.01-s0/model.safetensors").is_file()
    summary = json.loads((ul / "metrics/summary.json").read_text())
    assert {"eps8", "epsinf", "eps8-group-k2-random", "epsinf-userwise-k2-chunk"} <= set(summary)
    assert summary["eps8"]["n_runs"] == 1 and summary["eps8-group-k2-random"]["n_runs"] == 1 and summary["n_runs"] == 6
    configs = json.loads((ul / "metrics/configs.json").read_text())
    assert {"eps8-b8-T3-lr0.01", "eps8-b8-T3-lr0.01-group-k2-random", "epsinf-b8-T3-lr0.01-userwise-k2-chunk"} <= set(configs)
    report = (ul / "reports/report.html").read_text()
    assert "Record- vs user-level" in report and "userwise-k2-chunk" in report
    runs = (ul / "records/runs.csv").read_text().splitlines()
    assert runs[0].split(",").count("unit") == 1 and sum("group-k2-random" in r for r in runs) == 2
    # user-level audits: m = 120 canary units of 2 records, one membership per unit, the bound over units
    public = json.loads((ul / "records/canaries.json").read_text())
    assert public["user_level"]["k2"]["n_units"] == 120 and public["user_level"]["k2"]["n_records"] == 240
    assert public["user_level"]["k2"]["leak_check"]["n_leaks"] == 0 and public["n_canaries"] == 120
    meta = json.loads((ul / "data/canaries/user-k2/meta.json").read_text())
    rows = [json.loads(line) for line in (ul / "data/canaries/user-k2/canaries.jsonl").read_text().splitlines()]
    members = sum(bool(r["member"]) for r in rows) // 2
    assert meta["records_per_unit"] == 2 and len(rows) == 240 and 30 < members < 90
    for u in units[1:]:
        a = json.loads((ul / f"records/audit/{u}/full/eps8-b8-T3-lr0.01-s0.json").read_text())
        assert a["audit_level"] == "user" and a["unit"] == u and a["user_audit"]["records_per_unit"] == 2
        assert a["audit_n_canaries"] == 120 and a["audit_n_guesses"] == 20 and 0 <= a["audit_n_correct"] <= 20
        assert a["train"]["n_canary_units_included"] == members and a["train"]["n_units"] == prep["n_units"] + members
        assert 0 <= a["audit_eps_lb_99"] <= a["audit_eps_lb_95"] <= a["audit_epsilon_upper"]
        assert a["train"]["epsilon_user_level"] == pytest.approx(8, abs=0.05)
        assert a["audit_epsilon_upper"] > 8  # the user-level ε at the audit's δ = 1e-5 (the run's δ is larger)
        scores = (ul / f"models/audit/{u}/full/eps8-b8-T3-lr0.01-s0/canary_scores.jsonl").read_text().splitlines()
        assert len(scores) == 120 and '"secret"' not in scores[0]  # one row per unit, no tokens
        assert summary[f"eps8-{u}"]["audit_eps_lb_95"] == a["audit_eps_lb_95"]  # joined with the cube's run
    status = _run(["dvc", "status", "--json"], ul, env).stdout
    assert json.loads(status) == {}  # nothing stale


def test_params_are_dependencies_key_by_key(repo):
    """A score key re-runs scoring only; a runtime key that changes results (threads) re-runs training; a
    W&B key (logging only) re-runs nothing. Asked of DVC itself (`dvc status`), nothing is run."""
    work, env, _ = repo

    def stale(overrides: dict) -> set[str]:
        write_params(work, overrides)
        out = _run(["dvc", "status", "--json"], work, env).stdout
        return set(json.loads(out or "{}")) - {"validate"}

    current = json.loads(json.dumps(TINY))
    write_params(work, current)  # back to the fixture's cube (an earlier test changed it), everything up to date
    _run(["dvc", "repro"], work, env)
    assert stale(current) == set()
    score_change = stale({**current, "score": {**current["score"], "n_controls": 5}})
    assert score_change and all(s.startswith("score@") or s == "analyze" for s in score_change), score_change
    threads = stale({**current, "runtime": {**current["runtime"], "threads": 2}})
    assert any(s.startswith("train@") for s in threads) and any(s.startswith("audit@") for s in threads)
    assert stale({**current, "runtime": {**current["runtime"], "wandb_project": "elsewhere"}}) == set()
    write_params(work, current)
    assert stale(current) == set()


def test_editing_the_raw_corpus_re_runs_prepare(repo, tmp_path):
    """A raw file outside the repository that params name (here data.path) is a DVC dep of its input@ stage: after
    the run `dvc status` is clean, an edit in place makes prepare stale and re-runs it, and un-naming the file
    removes the stage and its fingerprint."""
    work, env, _ = repo
    raw = tmp_path / "raw"
    raw.mkdir()
    corpus = raw / "corpus.csv"  # not read by the synthetic source, but named: the DAG must follow it
    corpus.write_text("file,message\n")
    params = json.loads(json.dumps(TINY))
    params["data"] = {**params["data"], "path": str(corpus)}
    write_params(work, params)
    proc = subprocess.run(["dvc", "repro", "prepare"], cwd=work, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "inputs.corpus: missing" in proc.stderr  # validate asks for it, nothing ran
    _run([str(VENV_BIN / "empriv"), "validate", "--fix-inputs"], work, env)
    import yaml

    assert yaml.safe_load((work / "params.yaml").read_text())["inputs"] == {"corpus": str(corpus)}
    ran = _ran_stages(_run(["dvc", "repro", "prepare"], work, env))
    assert "input@corpus" in ran and "prepare" in ran
    fp = json.loads((work / "data/inputs/corpus/fingerprint.json").read_text())
    assert fp["sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest() and fp["param"] == "data.path"

    def stale() -> set[str]:
        return set(json.loads(_run(["dvc", "status", "--json", "--with-deps", "prepare"], work, env).stdout or "{}"))

    assert stale() == set()
    corpus.write_text("file,message\na,b\n")  # an edit in place: same path, same params
    assert stale() == {"input@corpus"}  # its dep changed; prepare follows once the new fingerprint is written
    ran = _ran_stages(_run(["dvc", "repro", "prepare"], work, env))
    assert {"input@corpus", "prepare"} <= set(ran) and stale() == set()
    write_params(work, json.loads(json.dumps(TINY)))  # back to no raw file: the stage goes, its fingerprint too
    _run(["dvc", "repro", "prepare"], work, env)
    assert not (work / "data/inputs/corpus/fingerprint.json").exists() and stale() == set()
    # DVC's .gitignore for the gone output stays, untracked: .dvcignore keeps it out of prepare's dependency, or a
    # clean checkout of the commit (a queued experiment) would see another directory
    assert (work / "data/inputs/corpus/.gitignore").exists()
    (work / "data/inputs/corpus/.gitignore").unlink()
    assert stale() == set()


def test_invalid_params_fail_before_any_work_with_a_clear_error(repo, tmp_path):
    """`dvc repro` with a bad params file stops at the validate stage: one line, no traceback, and every output
    and metric of the previous run is left as it was (DVC deletes a stage's outputs only when it runs it)."""
    import hashlib

    work, env, _ = repo
    bad = tmp_path / "bad"
    shutil.copytree(work, bad, ignore=shutil.ignore_patterns("wandb", "warm"), symlinks=True)
    write_params(bad, {**TINY, "cube": {**TINY["cube"], "epsilon": [-1, "inf"]}})

    def digest() -> dict:
        return {str(p.relative_to(bad)): hashlib.sha256(p.read_bytes()).hexdigest()
                for top in ("metrics", "data", "models", "plots", "reports") for p in (bad / top).rglob("*") if p.is_file()}

    before = digest()
    proc = _run(["dvc", "repro"], bad, env, check=False)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cube.epsilon[0]" in errors[0] and "-1" in errors[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert _ran_stages(proc) == ["validate"]
    assert digest() == before and len(before) > 20

def test_a_failing_train_stage_leaves_the_previous_outputs_and_no_partial_file(repo, monkeypatch):
    import hashlib

    from empriv.config import load_params
    from empriv.models import adapters
    from empriv.pipeline import train as train_stage

    work, env, _ = repo
    monkeypatch.chdir(work)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    params = load_params("params.yaml")
    run = params.runs()[0]
    model_dir, metrics_file = work / "models/runs" / run.file_stem, work / "records/train" / f"{run.file_stem}.json"

    def digest() -> dict:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in [*model_dir.iterdir(), metrics_file]}

    before = digest()

    def broken_save(model, method, directory, **saving):
        (Path(directory) / "model.safetensors").write_bytes(b"half a file")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(adapters, "save_finetuned", broken_save)
    with pytest.raises(OSError, match="disk full"):
        train_stage.main(params, run)
    assert digest() == before
    leftovers = [p.name for d in (work / "models/runs/record/full", work / "records/train/record/full") for p in d.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_lora_fine_tuning_trains_only_adapters_under_dp_and_scores(repo, monkeypatch, tmp_path):
    from empriv.config import parse_params, read_yaml
    from empriv.pipeline import score as score_stage
    from empriv.pipeline import train as train_stage

    work, env, _ = repo
    monkeypatch.chdir(work)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    raw = read_yaml("params.yaml")
    raw["cube"]["method"] = ["lora"]
    raw["train"]["lora"] = {"rank": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["c_attn"]}
    params = parse_params(raw).for_method("lora")  # what the stage's entry point does with --method lora
    run = params.runs()[0]
    assert run.private
    m = train_stage.main(params, run, runs_dir=tmp_path / "models", metrics_dir=tmp_path / "metrics")
    saved = {p.name for p in (tmp_path / "models" / run.file_stem).iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= saved and "model.safetensors" not in saved
    # rank-2 adapters on c_attn (32 → 96) of one layer: A 2×32 + B 96×2 = 256 parameters
    assert m["trainable_parameters"] == 2 * 32 + 96 * 2
    assert m["method"] == "lora" and m["noise_multiplier"] > 0 and len(m["loss_curve"]) == run.steps
    s = score_stage.main(params, run, model_dir=tmp_path / "models" / run.file_stem, metrics_dir=tmp_path / "scores")
    assert math.isfinite(s["test_nll"]) and len(s["per_secret"]) == len(_secrets(work))


def test_audit_stages_train_with_canaries_and_write_the_audit_metrics(repo):
    work, _, proc = repo
    ran = _ran_stages(proc)
    assert "canaries" in ran and sum(s.startswith("audit@") for s in ran) == 2
    canaries = [json.loads(line) for line in (work / "data/canaries/canaries.jsonl").read_text().splitlines()]
    assert len(canaries) == 140 and sum(c["member"] is None for c in canaries) == 20
    public = json.loads((work / "records/canaries.json").read_text())
    assert public["design"] == "new_token" and public["n_canaries"] == 120 and public["n_new_tokens"] == 140

    def no_lists(v) -> bool:  # counts and names only (e.g. the leak check's per-split counts), never token ids
        return not isinstance(v, list) and (not isinstance(v, dict) or all(no_lists(x) for x in v.values()))

    assert no_lists(public) and public["leak_check"]["n_leaks"] == 0
    members = sum(bool(c["member"]) for c in canaries)
    for eps in ("8", "inf"):
        name = f"eps{eps}-b32-T12-lr0.05-s0"
        m = json.loads((work / "records/audit/record/full" / f"{name}.json").read_text())
        for key in ("audit_eps_lb_95", "audit_eps_lb_99", "audit_auc", "audit_tpr_at_fpr_0.001", "audit_tpr_at_fpr_0.01",
                    "audit_design", "audit_n_canaries", "audit_n_guesses", "audit_n_correct"):
            assert key in m, key
        assert m["audit_design"] == "new_token" and m["audit_n_canaries"] == 120 and m["audit_n_guesses"] == 20
        assert 0 <= m["audit_n_correct"] <= 20 and 0 <= m["audit_eps_lb_99"] <= m["audit_eps_lb_95"]
        # included canaries are ordinary records under the same accounting: n = training split + members
        assert m["train"]["n"] == 400 + members and m["train"]["n_canaries_included"] == members
        assert m["train"]["sample_rate"] == pytest.approx(32 / (400 + members))
        assert (work / "models/audit/record/full" / name / "model.safetensors").is_file()
        rows = (work / "models/audit/record/full" / name / "canary_scores.jsonl").read_text().splitlines()
        assert len(rows) == 120 and '"secret"' not in rows[0]
        if eps == "8":
            assert m["audit_eps_lb_95"] <= 8.0 and 7.9 <= m["train"]["epsilon_prv"] <= 8.0
    # the main cube's runs saw no canary
    for name in _names():
        assert json.loads((work / "records/train/record/full" / f"{name}.json").read_text())["n"] == 400
    inf = json.loads((work / "records/audit/record/full/epsinf-b32-T12-lr0.05-s0.json").read_text())
    # 12 non-private steps at q = 32/(400 + ~60) include a member canary at least once with probability ~0.58,
    # so an AUC up to ~0.79 is reachable; only trained-on canaries can be told apart (their new-token rows moved)
    assert inf["audit_auc"] > 0.6


def test_audit_bound_stays_below_the_accountants_epsilon_and_lora_audits_train_the_new_rows(repo, monkeypatch, tmp_path):
    from empriv.config import parse_params, read_yaml
    from empriv.models.registry import load_model
    from empriv.pipeline import audit as audit_stage

    work, env, _ = repo
    m8 = json.loads((work / "records/audit/record/full/eps8-b32-T12-lr0.05-s0.json").read_text())
    assert m8["audit_delta"] == 1e-5 and m8["audit_epsilon_upper"] > 8.0  # ε at δ = 1e-5 exceeds ε at δ = n^-1.1
    assert m8["audit_eps_lb_95"] <= m8["audit_epsilon_upper"]
    monkeypatch.chdir(work)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    raw = read_yaml("params.yaml")
    # enough steps that every member canary is seen a few times (q = 64/470, T = 20)
    raw["audit"]["cube"] = {"epsilon": ["inf"], "batch_size": [64], "steps": [20], "learning_rate": [0.05], "seed": [0],
                            "method": ["lora"]}
    raw["train"]["lora"] = {"rank": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["c_attn"]}
    params = parse_params(raw).for_method("lora")
    run = params.audit_runs()[0]
    out = audit_stage.main(params, run, runs_dir=tmp_path / "models", metrics_dir=tmp_path / "metrics")
    assert out["train"]["method"] == "lora"
    assert out["audit_auc"] > 0.9  # the new-token rows trained although the blocks only got adapters
    saved = load_model(tmp_path / "models" / run.file_stem)  # merged into a whole model, extended vocabulary
    n_new = json.loads((work / "data/canaries/meta.json").read_text())["n_new_tokens"]
    assert saved.get_input_embeddings().weight.shape[0] == 512 + n_new


def test_a_queued_sweep_runs_and_reads_as_a_results_table(repo):
    """docs/sweeps.md's recipe: two experiments queued over cube keys with -S, `dvc queue start`, then
    `dvc exp show --json` parsed into one row per experiment (empriv exps); `dvc exp apply` leaves `dvc status` clean.
    The queued runs reuse every stage DVC already ran (run cache): only the changed analysis runs."""
    import time

    import yaml

    from empriv.experiments import exp_rows, table_columns

    work, env, _ = repo
    _run(["dvc", "exp", "run", "--queue", "-n", "seeds-0", "-S", "cube.seed=[0]"], work, env)
    _run(["dvc", "exp", "run", "--queue", "-n", "eps-8", "-S", "cube.epsilon=[8]"], work, env)
    _run(["dvc", "queue", "start"], work, env)
    deadline = time.time() + 900
    while True:
        status = _run(["dvc", "queue", "status"], work, env).stdout
        if not re.search(r"\b(Queued|Running)\b", status):
            break
        assert time.time() < deadline, status
        time.sleep(3)
    assert "Failed" not in status, status
    rows = {r["experiment"]: r for r in exp_rows(json.loads(_run(["dvc", "exp", "show", "--json"], work, env).stdout))}
    assert {"seeds-0", "eps-8"} <= set(rows), list(rows)
    seeds, eps = rows["seeds-0"], rows["eps-8"]
    # a queued experiment is the workspace's params (uncommitted changes included) with the -S keys set
    workspace_cube = yaml.safe_load((work / "params.yaml").read_text())["cube"]
    assert seeds["params:cube.seed"] == [0] and seeds["params:cube.epsilon"] == workspace_cube["epsilon"] == [8, "inf"]
    assert eps["params:cube.epsilon"] == [8] and eps["params:cube.seed"] == workspace_cube["seed"]
    assert len(workspace_cube["seed"]) == 2
    assert seeds["n_runs"] == 2 and seeds["eps8.n_configs"] == 1 and "epsinf.n_configs" in seeds
    assert eps["n_runs"] == 2 and "epsinf.n_configs" not in eps
    assert isinstance(seeds["eps8.test_nll"], float) and isinstance(eps["eps8.test_nll"], float)
    columns = table_columns(list(rows.values()))
    assert "params:cube.seed" in columns and "params:cube.epsilon" in columns
    assert "params:score.seed" not in columns  # the same in every experiment
    assert len(columns) <= 60
    # the CLI prints the same table
    out = _run([str(VENV_BIN / "empriv"), "exps", "--csv"], work, env).stdout.splitlines()
    assert out[0].split(",")[:1] == ["experiment"] and any(line.startswith("eps-8,") for line in out)
    _run(["dvc", "exp", "apply", "eps-8"], work, env)
    assert json.loads((work / "metrics/summary.json").read_text())["eps8"]["test_nll"]["mean"] == eps["eps8.test_nll"]
    # every stage is up to date (no stage is always_changed: the default names no raw file outside the repository)
    status = json.loads(_run(["dvc", "status", "--json"], work, env).stdout or "{}")
    assert status == {}, status


def test_a_pretrained_local_base_is_used_end_to_end_with_its_own_tokenizer(tmp_path, monkeypatch):
    """base.name = a local model directory with the real GPT-2 BPE (not the pipeline's BPE): no tokenizer
    is trained and no pre-training runs; secrets, training (DP-LoRA), scoring and the audit count its
    tokens; every model directory loads with the Auto classes from another working directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from empriv.models.tokenizer import load_gpt2
    from tiny_models import tiny_gpt2

    gpt2 = load_gpt2()
    base_dir = tmp_path / "my-base"
    tiny_gpt2(vocab_size=gpt2.vocab_size, n_embd=16, n_head=2, n_layer=1, n_positions=64).save_pretrained(str(base_dir))
    gpt2.save(base_dir)
    overrides = {**TINY, "tokenizer": {"kind": "auto"}, "base": {**TINY["base"], "name": str(base_dir)},
                 "train": {"micro_batch_size": 16},
                 "cube": {"epsilon": [8], "batch_size": [32], "steps": [2], "learning_rate": [0.01], "seed": [0],
                          "method": ["lora"]},
                 "audit": {**TINY["audit"], "cube": {"epsilon": [8], "batch_size": [32], "steps": [2],
                                                     "learning_rate": [0.05], "seed": [0], "method": ["lora"]}},
                 "inputs": {"base": str(base_dir)}}  # the local base is a raw input DVC tracks (input@base)
    work, _, proc = make_repo(tmp_path, overrides)
    assert "pre-train base" not in proc.stderr and "input@base" in _ran_stages(proc)
    assert json.loads((work / "data/inputs/base/fingerprint.json").read_text())["files"] >= 3  # weights, config, BPE
    base = json.loads((work / "records/base.json").read_text())
    assert base["pretrained"] is True and base["pretrain_steps"] == 0 and base["pretrain_final_loss"] is None
    assert math.isfinite(base["test_nll"])
    meta = json.loads((work / "models/tokenizer/meta.json").read_text())
    assert meta["kind"] == "pretrained" and meta["vocab_size"] == gpt2.vocab_size and meta["eos_id"] == 50256
    for secret in _secrets(work):
        assert secret["token_length"] == len(gpt2.encode(secret["text"]))
    run = "eps8-b32-T2-lr0.01-s0"
    train = json.loads((work / f"records/train/record/lora/{run}.json").read_text())
    assert train["method"] == "lora" and train["random_streams"]["key"].startswith("purpose=train|method=lora|")
    score = json.loads((work / f"records/score/record/lora/{run}.json").read_text())
    assert math.isfinite(score["test_nll"]) and score["n_secrets"] == len(_secrets(work))
    audit = "eps8-b32-T2-lr0.05-s0"
    assert json.loads((work / f"records/audit/record/lora/{audit}.json").read_text())["audit_n_canaries"] == 120
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for d in (work / "models/base", work / "models/runs/record/lora" / run, work / "models/audit/record/lora" / audit):
        tok = AutoTokenizer.from_pretrained(str(d))
        assert len(tok) == gpt2.vocab_size and tok.eos_token_id == 50256
        assert tok("Hello world", add_special_tokens=False).input_ids == [15496, 995]
    from peft import AutoPeftModelForCausalLM

    lora = AutoPeftModelForCausalLM.from_pretrained(str(work / "models/runs/record/lora" / run))
    assert any("lora_A" in n for n, _ in lora.named_parameters())
    assert AutoModelForCausalLM.from_pretrained(str(work / "models/base")).config.vocab_size == gpt2.vocab_size
    assert AutoModelForCausalLM.from_pretrained(str(work / "models/audit/record/lora" / audit)).config.vocab_size > gpt2.vocab_size  # + new-token canaries


def test_own_corpus_with_canaries_only_is_scored_by_the_audit_end_to_end(tmp_path):
    """data.source: text with data.secret_kind: canaries (issue 44) through prepare, secrets, train, score, canaries,
    audit and analyze: no string of the corpus is scored (score@ has utility only), the canary audit of the
    configuration that shares the main run's name gives its privacy numbers (AUC, TPR, ε̂, member/non-member loss),
    analyze joins them into the run table, the metrics and the report, and no canary, canary text or corpus record
    reaches W&B, the logs, metrics, records or the report."""
    import random

    rng = random.Random(0)
    words = ("the a meeting project budget report team weather garden coffee train city river book music letter "
             "friend week plan order review").split()
    rows = [{"text": f"Note {i}: " + " ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) + ".",
             "who": f"u{i % 23}"} for i in range(600)]
    corpus = tmp_path / "raw" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = {**{k: v for k, v in TINY["data"].items() if k != "secret_frequencies"}, "source": "text",
            "path": str(corpus), "user_field": "who", "secret_kind": "canaries"}
    point = {"epsilon": [8], "batch_size": [32], "steps": [3], "learning_rate": [0.01], "seed": [0]}
    overrides = {**TINY, "data": data, "inputs": {"corpus": str(corpus)},
                 "cube": {**point, "epsilon": [8, "inf"]},
                 "audit": {**TINY["audit"], "cube": point}}  # the audit point is the main cube's ε = 8 run
    work, _, proc = make_repo(tmp_path, overrides)
    ran = _ran_stages(proc)
    for stage in ("input@corpus", "prepare", "secrets", "train@8-32-3-0.01-0-record-full",
                  "score@8-32-3-0.01-0-record-full", "canaries", "audit@8-32-3-0.01-0-record-full", "analyze"):
        assert stage in ran, stage
    check_canaries_only_run(work, proc.stdout + proc.stderr, [r["text"] for r in rows])


def check_canaries_only_run(work: Path, logs: str, records: list[str]) -> None:
    """The outputs of a canaries-only run of an own corpus (``records``) whose audit cube holds the main cube's
    ``eps8-b32-T3-lr0.01-s0``: see the test above."""
    import polars as pl

    from empriv.infra.tracking import SecretScrubber
    from empriv.models.tokenizer import Tokenizer
    from empriv.secrets.canaries import CanarySet

    prep = json.loads((work / "records/prepare.json").read_text())
    assert prep["source"] == "text" and prep["secret_kind"] == "canaries" and prep["n_train"] == 400
    assert (work / "data/secrets.jsonl").read_text() == "" and (work / "data/secrets_filtered.jsonl").read_text() == ""
    secrets = json.loads((work / "records/secrets.json").read_text())
    assert secrets["n_secrets"] == 0 and secrets["secret_kind"] == "canaries"
    run = "eps8-b32-T3-lr0.01-s0"
    for name in (run, "epsinf-b32-T3-lr0.01-s0"):
        score = json.loads((work / f"records/score/record/full/{name}.json").read_text())
        assert score["n_secrets"] == 0 and score["per_secret"] == [] and math.isfinite(score["test_nll"])
        assert score["acr_protocol"]["ran"] is False and score.get("exposure_gap_mean") is None
    audit = json.loads((work / f"records/audit/record/full/{run}.json").read_text())
    assert audit["audit_n_canaries"] == 120 and audit["audit_n_guesses"] == 20 and 0 <= audit["audit_n_correct"] <= 20
    assert 0.0 <= audit["audit_auc"] <= 1.0 and 0.0 <= audit["audit_eps_lb_95"] <= audit["audit_epsilon_upper"]
    assert audit["train"]["n"] == 400 + audit["audit_n_members"]
    # analyze: the audit's numbers joined to the main run of the same name; no secret score has a value
    table = pl.read_csv(work / "records/runs.csv").filter(pl.col("config") == f"{run}-full")
    assert table["audit_auc"][0] == pytest.approx(audit["audit_auc"])
    assert table["audit_eps_lb_95"][0] == pytest.approx(audit["audit_eps_lb_95"])
    analysis = json.loads((work / "records/analysis.json").read_text())
    assert {"audit_eps_lb_95", "audit_eps_lb_99", "audit_auc"} <= set(analysis["audit_columns"])
    assert analysis["privacy_scores"] == [] and analysis["primary_score"] is None
    assert "no empirical privacy score has values: only utility is analysed" in analysis["notes"]
    summary = json.loads((work / "metrics/summary.json").read_text())
    assert summary["eps8"]["audit_eps_lb_95"] == pytest.approx(audit["audit_eps_lb_95"], abs=1e-3)
    assert summary["eps8"]["exposure_gap_mean"]["n"] == 0 and summary["eps8"]["test_nll"]["n"] == 1
    assert "audit_eps_lb_95" in (work / "reports/report.html").read_text()
    # secrets stay local: canaries (token ids, as the scrubber spells them, and decoded prefixes) and raw records
    tok = Tokenizer.load(work / "models/tokenizer")
    canaries = CanarySet.load(work / "data/canaries")
    needles = SecretScrubber().with_canaries(canaries, tok).needles
    needles += [t for c in canaries.canaries if len(t := tok.decode(list(c.prefix)).strip()) >= 12]
    needles += records
    assert len(needles) > len(records) + 120
    wandb_files = [p for p in (work / "wandb").rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in wandb_files), "the train and audit runs must have written offline W&B runs"
    written = [*wandb_files, *(p for d in ("metrics", "records", "reports", "plots") for p in (work / d).rglob("*")
                               if p.is_file())]
    for p in written:
        data_bytes = p.read_bytes()
        assert not [n for n in needles if n.encode() in data_bytes], p.relative_to(work)
    assert not [n for n in needles if n in logs]


def test_a_train_stage_killed_mid_run_resumes_through_the_pipeline_counting_epsilon_once(repo, tmp_path):
    """Issue 29: kill -9 during a train@ run with runtime.checkpoint_every, then `dvc repro train@…`: DVC deletes the
    stage's outputs, not its checkpoints (.empriv/checkpoints), so the run resumes where it was and its ε is the
    calibrated one (steps counted once); the checkpoints are gone afterwards."""
    import signal
    import time

    work, env, _ = repo
    killed = tmp_path / "killed"
    shutil.copytree(work, killed, ignore=shutil.ignore_patterns("wandb", "warm"), symlinks=True)
    point = {"epsilon": [8], "batch_size": [32], "steps": [300], "learning_rate": [0.01], "seed": [0]}
    write_params(killed, {**TINY, "runtime": {**TINY["runtime"], "checkpoint_every": 10}, "cube": point})
    _run(["dvc", "repro", "validate"], killed, env)
    name = "eps8-b32-T300-lr0.01-s0"
    ck = killed / ".empriv/checkpoints/train/record/full" / name
    proc = subprocess.Popen([sys.executable, "stages/train.py", "--name", name, "--epsilon", "8",
                             "--batch-size", "32", "--steps", "300", "--learning-rate", "0.01", "--seed", "0"],
                            cwd=killed, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not list(ck.glob("step-*/meta.json")):
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before its first checkpoint"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    steps_done = max(int(p.parent.name.split("-")[1]) for p in ck.glob("step-*/meta.json"))
    assert 0 < steps_done < 300 and not (killed / f"records/train/record/full/{name}.json").exists()
    ran = _ran_stages(_run(["dvc", "repro", "train@8-32-300-0.01-0-record-full"], killed, env))
    assert "train@8-32-300-0.01-0-record-full" in ran
    record = json.loads((killed / f"records/train/record/full/{name}.json").read_text())
    assert record["resumed_from_step"] >= steps_done and record["steps"] == 300
    assert len(record["loss_curve"]) == 300  # every step once: the steps before the kill are not trained again
    assert record["epsilon_prv"] == pytest.approx(8, rel=1e-3)  # the ε of 300 steps at the calibrated σ
    assert not ck.exists()
