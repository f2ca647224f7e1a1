"""canaries: the audit canaries → data/canaries/, records/canaries.json

    python stages/canaries.py

The stage is :mod:`empriv.pipeline.canaries`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.canaries import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
