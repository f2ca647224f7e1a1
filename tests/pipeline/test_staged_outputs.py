"""empriv.pipeline.staged_outputs (issue 43, "no partial outputs, anywhere"): a stage's outputs are switched together,
and a stage that fails — before or after the switch — leaves the previous outputs whole. The analyze case is run for
real: the stage's own code on small records, W&B failing because of the environment (its data directory cannot be
created), as it did with a read-only HOME."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from empriv.pipeline.staged_outputs import StagedOutputs


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_outputs_switch_together_and_a_failure_puts_the_previous_ones_back(tmp_path):
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "old.png").write_text("old figure")
    (tmp_path / "table.csv").write_text("old table")
    before = tree(tmp_path)
    for fail_after_publish in (False, True):
        with pytest.raises(OSError, match="disk"):
            with StagedOutputs() as out:
                out.file(tmp_path / "table.csv").write_text("new table")
                (out.directory(tmp_path / "plots") / "new.png").write_text("new figure")
                out.file(tmp_path / "new.json").write_text("{}")
                if fail_after_publish:
                    out.publish()
                    assert (tmp_path / "table.csv").read_text() == "new table"
                    assert not (tmp_path / "plots" / "old.png").exists()
                raise OSError("disk full")
        assert tree(tmp_path) == before  # no temporary, no new file, the old ones as they were
    with StagedOutputs() as out:
        out.file(tmp_path / "table.csv").write_text("new table")
        (out.directory(tmp_path / "plots") / "new.png").write_text("new figure")
    assert tree(tmp_path) == {"plots/new.png": hashlib.sha256(b"new figure").hexdigest(),
                              "table.csv": hashlib.sha256(b"new table").hexdigest()}
    with pytest.raises(ValueError, match="staged twice"):
        with StagedOutputs() as out:
            out.file(tmp_path / "a")
            out.file(tmp_path / "a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plots", "table.csv"]


# --------------------------------------------------------------------------- the analyze stage
CUBE = {"epsilon": [8, "inf"], "batch_size": [8], "steps": [2], "learning_rate": [0.01], "seed": [0, 1]}
OUTPUTS = ("records/runs.csv", "records/adaptation_audit.csv", "records/scores_by_epsilon.json",
           "records/analysis.json", "plots/analysis", "reports/report.html", "metrics")


def write_records(params, shift: float = 0.0) -> None:
    """Train and score records of every run, as the stages write them (the numbers made up, deterministic)."""
    from empriv import paths
    from empriv.io import write_json

    for i, run in enumerate(params.runs()):
        private = run.private
        write_json(paths.TRAIN_METRICS_DIR / f"{run.file_stem}.json", {
            "config": run.name, "method": "full", "noise_multiplier": 1.0 if private else 0.0, "sample_rate": 0.1,
            "delta": 1e-5, "epsilon_prv": run.epsilon if private else None, "accountant": "prv", "sampler": "poisson",
            "final_loss": 2.0 + 0.01 * i, "wall_time_s": 1.0})
        write_json(paths.SCORE_METRICS_DIR / f"{run.file_stem}.json", {
            "config": run.name, "epsilon": run.epsilon, "batch_size": run.batch_size, "steps": run.steps,
            "learning_rate": run.learning_rate, "seed": run.seed, "test_nll": 3.0 - 0.02 * i + shift, "exposure_gap_mean": 0.1 * (i % 3) + shift,
            "vmr_mean": 0.05 * (i % 4), "per_secret": []})
    write_json(paths.BASE_METRICS, {"test_nll": 3.5})


def outputs(root: Path) -> dict[str, str]:
    found = {}
    for rel in OUTPUTS:
        p = root / rel
        found.update({f"{rel}/{k}": v for k, v in tree(p).items()} if p.is_dir() else
                     {rel: hashlib.sha256(p.read_bytes()).hexdigest()} if p.exists() else {})
    return found


def leftovers(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith((".staged", ".previous", ".tmp"))]


@pytest.mark.slow  # ~15 s on an idle core: two analyses (figures, report)
def test_analyze_failing_on_wandb_leaves_its_previous_outputs(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from empriv.config import ConfigError, parse_params
    from empriv.pipeline import analyze

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR",
                "EMPRIV_WANDB_LIVE", "DVC_ROOT", "DVC_EXP_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("EMPRIV_WANDB_DIR", str(tmp_path / "tracking"))
    monkeypatch.setenv("EMPRIV_WANDB_GROUP", "staged-outputs-test")
    params = parse_params({"cube": CUBE, "analyze": {"monte_carlo_trials": 50}})
    monkeypatch.setattr(analyze, "BOOTSTRAP_REPLICATES", 5)  # the standard errors' resamples: fewer, for time
    write_records(params)
    analyze.main(params)
    first = outputs(work)
    assert {"records/runs.csv", "reports/report.html", "metrics/summary.json"} <= set(first)
    assert any(k.startswith("plots/analysis/") for k in first)

    # new records, and W&B cannot stage its tables: W&B's data directory would be below a regular file
    write_records(params, shift=0.5)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x\n")
    monkeypatch.setenv("WANDB_DATA_DIR", str(blocker / "wandb-data"))
    with pytest.raises(ConfigError, match=r"W&B cannot write .*wandb-data \(WANDB_DATA_DIR\): Not a directory"):
        analyze.main(params)  # when it writes the offline runs: after the outputs were published
    assert outputs(work) == first  # records/runs.csv still matches what dvc.lock would say
    assert leftovers(work) == []
    journal = json.loads(next((tmp_path / "tracking" / "wandb" / "empriv-journal").glob("*.json")).read_text())
    logged = journal["sections"]["analysis"]["tables"]["analysis/runs"]
    assert logged["data"][0][logged["columns"].index("test_nll")] == pytest.approx(3.5)  # the new numbers had been
