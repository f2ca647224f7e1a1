"""prepare: the raw corpus (or the built-in generators) → data/prepared/, records/prepare.json

    python stages/prepare.py

The stage is :mod:`empriv.pipeline.prepare`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.prepare import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
