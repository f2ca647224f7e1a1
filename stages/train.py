"""train@<config>: DP fine-tuning of one cube configuration → models/runs/…, records/train/….json

    python stages/train.py --name <point> --epsilon E --batch-size B --steps T --learning-rate LR --seed S
                           [--unit U] [--method M]

The stage is :mod:`empriv.pipeline.train`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.train import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
