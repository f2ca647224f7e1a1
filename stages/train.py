"""train@<config>: DP fine-tuning of one cube configuration → models/runs/<config>/, metrics/train/<config>.json."""

from empriv.stage import run_config_stage


def main(params, run):
    from empriv.train.run import train_run

    train_run(params, run)


if __name__ == "__main__":
    run_config_stage(main, __doc__)
