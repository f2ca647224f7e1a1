"""base: the base model → models/base/, records/base.json

    python stages/base.py

The stage is :mod:`empriv.pipeline.base`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.base import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
