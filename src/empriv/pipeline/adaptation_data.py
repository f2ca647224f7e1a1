"""adaptation_data@<dataset>: the adaptation-audit study's sets for one dataset (iid | ood) → data/adaptation/<dataset>/
(members, non-members, shadow, population, and the pre-training probe's members and non-members; JSONL, one text per
row). Built from the built-in generators and the public split (empriv.data.adaptation_sets); no download."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from empriv import paths
from empriv.config import ConfigError, Params
from empriv.pipeline.common import load_texts

log = logging.getLogger("empriv.adaptation_audit")

SET_FILES = ("members", "nonmembers", "shadow", "population", "probe_members", "probe_nonmembers")


def build_sets(params: Params):
    """Both datasets' sets and the probe, as :func:`empriv.data.adaptation_sets.build_adaptation_sets` makes them from
    the params' sizes and seed (deterministic: every adaptation_data@ item builds the same sets)."""
    from empriv.data.adaptation_sets import build_adaptation_sets
    from empriv.data.synthetic import secret_values
    from empriv.io import read_jsonl

    a = params.adaptation_audit
    # the planted secrets (synthetic-enron) and every value inside them may not appear in a generated public-like text
    planted = [r["text"] for r in read_jsonl(paths.PLANTED_SECRETS) if r.get("text")] if paths.PLANTED_SECRETS.exists() else []
    return build_adaptation_sets(load_texts("public"), n_members=a.n_members, n_nonmembers=a.n_nonmembers,
                                 n_shadow=a.n_shadow, n_population=a.n_population, n_probe_members=a.n_probe,
                                 n_probe_nonmembers=a.n_probe, seed=a.seed,
                                 ood_records_per_author=a.ood_records_per_author, forbidden=secret_values(planted))


def main(params: Params, dataset: str, out_root: Path = paths.ADAPTATION_DATA_DIR) -> dict:
    from empriv.io import atomic_dir, write_json, write_jsonl

    if dataset not in params.adaptation_audit.cube.dataset:
        raise ConfigError(f"--dataset {dataset!r} is not in params.yaml's adaptation_audit.cube.dataset "
                          f"({params.adaptation_audit.cube.dataset})")
    sets = build_sets(params)
    split = sets.split(dataset)
    parts = {"members": split.members, "nonmembers": split.nonmembers, "shadow": split.shadow,
             "population": split.population, "probe_members": sets.pretraining.members,
             "probe_nonmembers": sets.pretraining.nonmembers}
    counts = {name: len(texts) for name, texts in parts.items()}
    with atomic_dir(Path(out_root) / dataset) as tmp:
        for name, texts in parts.items():
            write_jsonl(Path(tmp) / f"{name}.jsonl", [{"text": t} for t in texts])
        write_json(Path(tmp) / "sets.json", {"dataset": dataset, "source": split.source, "counts": counts,
                                            "seed": params.adaptation_audit.seed,
                                            "ood_records_per_author": params.adaptation_audit.ood_records_per_author})
    log.info("adaptation sets %s (%s): %s", dataset, split.source, counts)
    return counts


def read_set(dataset: str, name: str, root: Path = paths.ADAPTATION_DATA_DIR) -> list[str]:
    from empriv.io import read_jsonl

    path = Path(root) / dataset / f"{name}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no adaptation set (run dvc repro adaptation_data@{dataset})")
    return [r["text"] for r in read_jsonl(path)]


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/adaptation_data.py --dataset iid|ood``)."""
    from empriv.stage import run_stage

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", required=True, choices=("iid", "ood"))
    args = ap.parse_args(argv)
    run_stage(lambda params: main(params, args.dataset))
