"""prepare: raw corpus → data/prepared/{train,validation,test,public}.jsonl + metrics/prepare.json."""

from empriv.stage import run_stage


def main(params):
    from empriv.data.prepare import prepare

    prepare(params)


if __name__ == "__main__":
    run_stage(main)
