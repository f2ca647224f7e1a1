"""score@<config>: utility and memorisation scores of one fine-tuned model → metrics/score/<config>.json."""

from empriv.stage import run_config_stage


def main(params, run):
    from empriv.score.run import score_run

    score_run(params, run)


if __name__ == "__main__":
    run_config_stage(main, __doc__)
