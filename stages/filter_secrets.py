"""filter: model-based secret filters after the cube's non-private runs → data/secrets_filtered.jsonl."""

from empriv.stage import run_stage, set_threads


def main(params):
    set_threads(params)
    from empriv.secrets.filtering import run_filter

    run_filter(params)


if __name__ == "__main__":
    run_stage(main)
