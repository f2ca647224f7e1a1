"""What the stage modules share: the cube point on the command line, and loading the common inputs."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from empriv import paths
from empriv.config import ConfigError, Params, RunConfig


def config_stage(main: Callable[[Params, RunConfig], None], description: str | None, *, audit: bool = False,
                 argv: list[str] | None = None) -> None:
    """Entry point of a per-configuration stage (train@…, score@…, audit@…): the point comes from the command
    line (``argv``, default ``sys.argv[1:]``) DVC builds from the matrix item and must belong to the params'
    ``cube`` (``audit.cube`` with ``audit``)."""
    from empriv.config import run_from_args
    from empriv.stage import run_stage, set_threads

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--name", required=True, help="configuration name (as dvc.yaml builds it)")
    ap.add_argument("--epsilon", required=True)
    ap.add_argument("--batch-size", required=True, type=int)
    ap.add_argument("--steps", required=True, type=int)
    ap.add_argument("--learning-rate", required=True, type=float)
    ap.add_argument("--seed", required=True, type=int)
    ap.add_argument("--unit", default="record", help="privacy unit (cube.unit): record, group-k<K>-<strategy>, "
                    "userwise-k<K>-<strategy>")
    ap.add_argument("--method", default="full", help="adaptation method (cube.method): full, lora, prefix, prompt, "
                    "head, dpzero or a train.variants name")
    args = ap.parse_args(argv)

    def with_run(params: Params) -> None:
        run = run_from_args(params, args, audit=audit)
        set_threads(params)
        main(params.for_method(run.method), run)

    run_stage(with_run)


def load_texts(split: str, root=paths.PREPARED_DIR) -> list[str]:
    from empriv.io import read_jsonl

    path = paths.split_path(split, root)
    if not path.exists():
        raise ConfigError(f"prepared split {str(path)!r} does not exist: run the prepare stage first (dvc repro prepare)")
    return [row["text"] for row in read_jsonl(path)]


def load_tokenizer():
    from empriv.models.tokenizer import Tokenizer

    return Tokenizer.load(paths.TOKENIZER_DIR)


def load_base():
    from empriv.models.registry import load_model

    return load_model(paths.BASE_DIR)


def secrets_to_scrub() -> list[dict]:
    """Every secret list that exists (planted and mined): redacted from anything logged to W&B."""
    from empriv.io import read_jsonl

    return [row for p in (paths.PLANTED_SECRETS, paths.SECRETS) if p.exists() for row in read_jsonl(p)]
