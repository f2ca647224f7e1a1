"""input@<key>: the fingerprint of one raw file params name → data/inputs/<key>/fingerprint.json

    python stages/inputs.py --key corpus|overrides|base

The stage is :mod:`empriv.pipeline.inputs`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.inputs import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
