"""base: build and pre-train the base model on the public split → models/base/, metrics/base.json."""

from empriv.stage import run_stage, set_threads


def main(params):
    set_threads(params)
    from empriv.models.base import make_base

    make_base(params)


if __name__ == "__main__":
    run_stage(main)
