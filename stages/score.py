"""score@<config>: utility and memorisation scores of one fine-tuned model → metrics/score/<config>.json."""

from empriv.stage import run_stage, set_threads
from train import parse_args


def main(params):
    from empriv.config import run_from_args

    run = run_from_args(params, ARGS)
    set_threads(params)
    from empriv.score.run import score_run

    score_run(params, run)


if __name__ == "__main__":
    ARGS = parse_args()
    run_stage(main)
