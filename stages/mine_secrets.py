"""secrets: the secrets of the corpus → data/secrets.jsonl, data/heldout/, records/secrets.json

    python stages/mine_secrets.py

The stage is :mod:`empriv.pipeline.secrets`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.secrets import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
