"""filter: the model-based secret filters → data/secrets_filtered.jsonl, records/filter.json

    python stages/filter.py

The stage is :mod:`empriv.pipeline.filter`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.filter import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
