"""Tests mirror src (issue 27): every module of ``src/empriv`` has its test module at the mirrored path
(``src/empriv/a/b.py`` → ``tests/a/test_b.py``; a package's ``__init__`` with code → ``tests/a/test_<package>.py``),
or a line below says where it is covered — and the line is checked: the named test module mentions the module, or
mentions the module ``via`` that imports it (a package face, a stage), or (``via`` ``"dvc.yaml"``) runs the pipeline
(``dvc repro``, or ``make_repo`` of tests/test_pipeline.py) whose stage script (``stages/<x>.py``) imports the
module. A new module without either fails; a line that no longer holds fails."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "empriv"
sys.path.insert(0, str(ROOT / "tools"))
import import_closure as ic  # noqa: E402

# module: (the test module that covers it, the module through which it is reached there, or None)
COVERED_ELSEWHERE = {
    "empriv.analysis.cli": ("tests/test_noop.py", None),
    "empriv.analysis.formatting": ("tests/analysis/test_figures.py", 'empriv.analysis.figures'),
    "empriv.analysis.plot_data": ("tests/analysis/test_figures.py", 'empriv.analysis.figures'),
    "empriv.analysis.plotting": ("tests/analysis/test_figures.py", 'empriv.analysis.figures'),
    "empriv.analysis.precision": ("tests/analysis/test_metric_precision.py", None),
    "empriv.analysis.report": ("tests/analysis/test_report_browser.py", None),
    "empriv.analysis.stats": ("tests/analysis/test_variance.py", 'empriv.analysis.variance'),
    "empriv.audit.adaptation": ("tests/audit/test_adaptation_mia.py", None),
    "empriv.audit.user_level": ("tests/audit/test_user_level_audit.py", None),
    "empriv.cli": ("tests/infra/test_sweep.py", None),
    "empriv.config.auditing": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.cube": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.data": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.errors": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.infra": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.loading": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.methods": ("tests/train/test_method_registry.py", None),
    "empriv.config.params": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.rendering": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.runs": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.scoring": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.training": ("tests/test_config.py", 'empriv.config'),
    "empriv.config.values": ("tests/test_config.py", 'empriv.config'),
    "empriv.data.selection": ("tests/data/test_record_selection.py", None),
    "empriv.data.synthetic.corpus": ("tests/data/test_synthetic.py", 'empriv.data.synthetic'),
    "empriv.data.synthetic.emails": ("tests/data/test_synthetic.py", 'empriv.data.synthetic'),
    "empriv.data.synthetic.grammar": ("tests/data/test_synthetic.py", 'empriv.data.synthetic'),
    "empriv.data.synthetic.public": ("tests/data/test_synthetic.py", 'empriv.data.synthetic'),
    "empriv.infra.sweep.commit": ("tests/infra/sweep/test_space.py", None),
    "empriv.infra.sweep.faults": ("tests/infra/test_sweep_faults.py", None),
    "empriv.infra.sweep.interrupts": ("tests/infra/test_sweep_faults.py", None),
    "empriv.infra.sweep.leftovers": ("tests/infra/test_sweep_leftovers.py", None),
    "empriv.infra.sweep.removed": ("tests/reliability/test_sweep_removed_values.py", None),
    "empriv.infra.sweep.jobs": ("tests/infra/test_sweep.py", "empriv.infra.sweep"),
    "empriv.infra.sweep.lock": ("tests/infra/test_sweep_faults.py", "empriv.infra.sweep"),
    "empriv.infra.sweep.plan": ("tests/infra/test_sweep.py", "empriv.infra.sweep"),
    "empriv.infra.sweep.schedule": ("tests/infra/test_sweep.py", "empriv.infra.sweep"),
    "empriv.experiments": ("tests/test_pipeline.py", None),
    "empriv.infra.warm_key": ("tests/infra/test_warm.py", None),
    "empriv.infra.warm_server": ("tests/infra/test_warm.py", None),
    "empriv.infra.warm_worker": ("tests/infra/test_warm.py", None),
    "empriv.models.base": ("tests/secrets/test_canaries.py", 'empriv.pipeline.tokenizer'),
    "empriv.models.conv1d": ("tests/models/test_adaptations.py", 'empriv.models.adaptations'),
    "empriv.models.lora": ("tests/models/test_adaptations.py", 'empriv.models.adaptations'),
    "empriv.models.per_sample": ("tests/models/test_adaptations.py", 'empriv.models.adaptations'),
    "empriv.models.prefix": ("tests/models/test_adaptations.py", 'empriv.models.adaptations'),
    "empriv.models.prompt": ("tests/models/test_adaptations.py", 'empriv.models.adaptations'),
    "empriv.models.recording": ("tests/models/test_fast_dp.py", "empriv.models.fast_dp"),
    "empriv.models.registry": ("tests/models/test_bases.py", None),
    "empriv.models.virtual_tokens": ("tests/models/test_adaptations.py", 'empriv.models.adaptations'),
    "empriv.paths": ("tests/test_dag.py", None),
    "empriv.pipeline.adaptation_audit": ("tests/test_adaptation_pipeline.py", "dvc.yaml"),
    "empriv.pipeline.adaptation_data": ("tests/test_adaptation_pipeline.py", "dvc.yaml"),
    "empriv.pipeline.analyze": ("tests/test_pipeline.py", "dvc.yaml"),
    "empriv.pipeline.analyze_union": ("tests/test_study_design.py", None),
    "empriv.pipeline.audit": ("tests/infra/test_tracking.py", None),
    "empriv.pipeline.base": ("tests/test_pipeline.py", "dvc.yaml"),
    "empriv.pipeline.canaries": ("tests/infra/test_tracking.py", 'empriv.pipeline.audit'),
    "empriv.pipeline.common": ("tests/data/test_prepare.py", None),
    "empriv.pipeline.filter": ("tests/secrets/test_filtering.py", None),
    "empriv.pipeline.input_checks": ("tests/reliability/test_inputs.py", None),
    "empriv.pipeline.text_checks": ("tests/data/test_text_checks.py", None),
    "empriv.infra.dvc_remote": ("tests/infra/test_dvc_adapter.py", None),
    "empriv.pipeline.file_facts": ("tests/reliability/test_inputs.py", "empriv.pipeline.input_checks"),
    "empriv.pipeline.override_checks": ("tests/reliability/test_overrides.py", None),
    "empriv.pipeline.inputs": ("tests/test_validate.py", None),
    "empriv.pipeline.integrity": ("tests/infra/test_sweep.py", 'empriv.cli'),
    "empriv.pipeline.prepare": ("tests/data/test_prepare.py", None),
    "empriv.pipeline.profiles": ("tests/privacy/test_profiles_stage.py", None),
    "empriv.pipeline.record_scores": ("tests/test_pipeline.py", "dvc.yaml"),
    "empriv.pipeline.score": ("tests/infra/test_tracking.py", None),
    "empriv.pipeline.secrets": ("tests/data/test_prepare_sources.py", None),
    "empriv.pipeline.tokenizer": ("tests/secrets/test_canaries.py", None),
    "empriv.pipeline.train": ("tests/test_dag.py", None),
    "empriv.pipeline.validate": ("tests/test_validate.py", None),
    "empriv.privacy": ("tests/privacy/test_cache.py", None),
    "empriv.privacy.accountants": ("tests/privacy/test_prv_numerics.py", None),
    "empriv.privacy.accountants.base": ("tests/privacy/test_prv_numerics.py", 'empriv.privacy.accountants'),
    "empriv.privacy.accountants.pld": ("tests/privacy/test_prv_numerics.py", 'empriv.privacy.accountants'),
    "empriv.privacy.accountants.prv": ("tests/privacy/test_accounting.py", 'empriv.privacy.accounting'),
    "empriv.privacy.accountants.rdp": ("tests/privacy/test_prv_numerics.py", 'empriv.privacy.accountants'),
    "empriv.privacy.checks": ("tests/privacy/test_prv_numerics.py", "empriv.privacy.calibration"),
    "empriv.privacy.cli": ("tests/privacy/test_user_level_cli.py", None),
    "empriv.privacy.errors": ("tests/privacy/test_accounting.py", 'empriv.privacy.accounting'),
    "empriv.privacy.forward": ("tests/privacy/test_cache.py", None),
    "empriv.privacy.profiles": ("tests/analysis/test_dvc_plots_render.py", None),
    "empriv.privacy.search": ("tests/privacy/test_prv_numerics.py", None),
    "empriv.privacy.user_level": ("tests/train/test_user_level_training.py", None),
    "empriv.privacy_unit": ("tests/test_dag.py", None),
    "empriv.randomness": ("tests/train/test_streams.py", None),
    "empriv.score.acr_fast": ("tests/score/test_acr.py", "empriv.score.acr"),
    "empriv.score.gcg": ("tests/score/test_acr.py", "empriv.score.acr"),
    "empriv.score.air": ("tests/score/test_air_vmr_utility.py", None),
    "empriv.score.distance": ("tests/score/test_air_vmr_utility.py", None),
    "empriv.score.run": ("tests/test_validate.py", None),
    "empriv.score.utility": ("tests/score/test_air_vmr_utility.py", None),
    "empriv.score.vmr": ("tests/score/test_air_vmr_utility.py", None),
    "empriv.secrets.build": ("tests/secrets/test_mining.py", None),
    "empriv.secrets.leaks": ("tests/secrets/test_canaries.py", None),
    "empriv.stage": ("tests/test_dag.py", None),
    "empriv.infra.tracking.curves": ("tests/infra/test_tracking.py", 'empriv.infra.tracking'),
    "empriv.infra.tracking.journal": ("tests/infra/test_tracking.py", 'empriv.infra.tracking'),
    "empriv.infra.tracking.naming": ("tests/infra/test_tracking.py", 'empriv.infra.tracking'),
    "empriv.infra.tracking.offline": ("tests/infra/test_tracking.py", 'empriv.infra.tracking'),
    "empriv.infra.tracking.runs": ("tests/infra/test_tracking.py", 'empriv.infra.tracking'),
    "empriv.infra.tracking.scrub": ("tests/infra/test_tracking.py", 'empriv.infra.tracking'),
    "empriv.infra.tracking.service": ("tests/infra/test_tracking_service.py", None),
    "empriv.infra.tracking.transaction_log": ("tests/infra/test_tracking.py", None),
    "empriv.train.finetune": ("tests/infra/test_tracking.py", None),
    "empriv.train.methods": ("tests/train/test_method_registry.py", None),
    "empriv.train.methods.base": ("tests/train/test_method_registry.py", "empriv.train.methods"),
    "empriv.train.methods.dpzero": ("tests/train/test_method_registry.py", "empriv.train.methods"),
    "empriv.train.methods.full": ("tests/train/test_method_registry.py", "empriv.train.methods"),
    "empriv.train.methods.head": ("tests/train/test_method_registry.py", "empriv.train.methods"),
    "empriv.train.methods.lora": ("tests/train/test_method_registry.py", "empriv.train.methods"),
    "empriv.train.methods.prefix": ("tests/train/test_method_registry.py", "empriv.train.methods"),
    "empriv.train.methods.prompt": ("tests/train/test_method_registry.py", "empriv.train.methods"),
    "empriv.train.user_level": ("tests/train/test_user_level_training.py", None),
}


def _has_code(path: Path) -> bool:
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
               and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
               for n in ast.parse(path.read_text(encoding="utf-8")).body)


def _modules() -> dict[str, Path]:
    """module name → its mirrored test path, for every module of src/empriv (packages whose __init__ has code)."""
    out = {}
    for p in sorted(SRC.rglob("*.py")):
        if p.name == "__init__.py":
            if p.parent == SRC or not _has_code(p):
                continue
            rel, stem = p.parent.relative_to(SRC), p.parent.name
        else:
            rel, stem = p.relative_to(SRC).with_suffix(""), p.stem
        out["empriv." + ".".join(rel.parts)] = ROOT / "tests" / rel.parent / f"test_{stem}.py"
    return out


def _mentions(text: str, module: str) -> bool:
    return re.search(re.escape(module) + r"(?![\w])", text) is not None


def test_every_module_has_a_mirrored_test_or_says_where_it_is_covered():
    modules = _modules()
    missing = sorted(m for m, mirror in modules.items() if not mirror.exists() and m not in COVERED_ELSEWHERE)
    assert not missing, f"modules with neither tests/<path>/test_<name>.py nor a COVERED_ELSEWHERE line: {missing}"
    stale = sorted(m for m in COVERED_ELSEWHERE if m not in modules or modules[m].exists())
    assert not stale, f"COVERED_ELSEWHERE lines for modules that are gone or now have their mirrored test: {stale}"


def test_each_covered_elsewhere_line_holds():
    dvc_yaml = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    run_by_dvc = {m for script in set(re.findall(r"\bstages/\w+\.py\b", dvc_yaml)) for m in ic.script_imports(script)}
    wrong = {}
    for module, (test_file, via) in COVERED_ELSEWHERE.items():
        path = ROOT / test_file
        if not path.exists():
            wrong[module] = f"{test_file} does not exist"
            continue
        text = path.read_text(encoding="utf-8")
        if via is None:
            ok = _mentions(text, module)
        elif via == "dvc.yaml":
            ok = (module in run_by_dvc or _mentions(dvc_yaml, module)) \
                and re.search(r"\bdvc\b.*\brepro\b|make_repo", text) is not None
        else:
            ok = _mentions(text, via) and (module in ic.direct_imports(via) or module.rsplit(".", 1)[0] == via)
        if not ok:
            wrong[module] = f"{test_file} via {via}"
    assert not wrong, f"COVERED_ELSEWHERE lines that do not hold: {wrong}"


def test_no_two_test_modules_share_a_file_name():
    """pytest imports test modules by their base name (the test folders are not packages): a second
    ``test_x.py`` anywhere under tests/ stops the whole run at collection, so the mirror must pick another name."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules with the same file name: {clashes}"
