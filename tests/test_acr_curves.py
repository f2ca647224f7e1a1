"""tools/acr_curves.py: ACR success and ACR over successes per (ε, T), failures counted but never averaged."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _score(d: Path, name: str, eps, steps: int, secrets: list) -> None:
    p = d / "records" / "score" / "record" / "full" / f"{name}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"epsilon": eps, "steps": steps, "per_secret": secrets}))


def test_acr_curves_pool_seeds_and_leave_failures_out_of_the_mean(tmp_path):
    ok = lambda a: {"id": "s", "acr_success": True, "acr": a}  # noqa: E731
    fail = {"id": "f", "acr_success": False, "acr": None, "acr_upper_bound": 2.0}
    skipped = {"id": "n", "acr": None}  # not searched
    _score(tmp_path, "eps8-b32-T100-lr0.01-s0", 8, 100, [fail, fail, skipped])
    _score(tmp_path, "eps8-b32-T100-lr0.01-s1", 8, 100, [ok(2.0), fail])
    _score(tmp_path, "epsinf-b32-T100-lr0.01-s0", "inf", 100, [ok(4.0), ok(6.0)])
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "acr_curves.py"), str(tmp_path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    rows = {(r["epsilon"], r["steps"]): r for r in
            __import__("csv").DictReader(open(tmp_path / "acr_curves.csv"))}
    r8, rinf = rows[("8", "100")], rows[("inf", "100")]
    assert (r8["runs"], r8["searched"], r8["success"]) == ("2", "4", "1")
    assert float(r8["success_rate"]) == 0.25 and float(r8["acr_mean"]) == 2.0 and r8["acr_std"] == ""
    assert float(rinf["acr_mean"]) == 5.0 and float(rinf["success_rate"]) == 1.0
    assert (tmp_path / "acr_curves.png").stat().st_size > 1000


def test_acr_curves_refuses_a_directory_without_score_records(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "acr_curves.py"), str(tmp_path)], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "records/score does not exist" in proc.stderr
