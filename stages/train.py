"""train@<config>: DP fine-tuning of one cube configuration → models/runs/<config>/, metrics/train/<config>.json."""

import argparse

from empriv.stage import run_stage, set_threads


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--name", required=True, help="configuration name (as dvc.yaml builds it)")
    ap.add_argument("--epsilon", required=True)
    ap.add_argument("--batch-size", required=True, type=int)
    ap.add_argument("--steps", required=True, type=int)
    ap.add_argument("--learning-rate", required=True, type=float)
    ap.add_argument("--seed", required=True, type=int)
    return ap.parse_args()


def main(params):
    from empriv.config import run_from_args

    run = run_from_args(params, ARGS)
    set_threads(params)
    from empriv.train.run import train_run

    train_run(params, run)


if __name__ == "__main__":
    ARGS = parse_args()
    run_stage(main)
