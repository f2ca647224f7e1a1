"""tokenizer: public split → models/tokenizer/ (BPE trained on public text, or the GPT-2 BPE)."""

from empriv.stage import run_stage


def main(params):
    from empriv.models.base import make_tokenizer

    make_tokenizer(params)


if __name__ == "__main__":
    run_stage(main)
