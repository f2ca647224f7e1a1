"""score@<config>: utility and memorisation scores of one fine-tuned model → records/score/….json

    python stages/score.py <the cube point, as train.py>

The stage is :mod:`empriv.pipeline.score`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.score import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
