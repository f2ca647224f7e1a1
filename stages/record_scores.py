"""record_scores: each training record's mean NLL under the initial base → data/record_scores.json

    python stages/record_scores.py

The stage is :mod:`empriv.pipeline.record_scores`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.record_scores import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
