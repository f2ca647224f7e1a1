"""secrets: the secrets to measure, with prompt/continuation split → data/secrets.jsonl."""

from empriv.stage import run_stage


def main(params):
    from empriv.secrets.stage import make_secrets

    make_secrets(params)


if __name__ == "__main__":
    run_stage(main)
