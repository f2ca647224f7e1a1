"""validate: check all of params.yaml (and the raw inputs it names) before any stage runs → .empriv/params.ok

    python stages/validate_params.py [--fill-defaults] [--fix-inputs] [--params params.yaml] [--debug]

The stage is :mod:`empriv.pipeline.validate`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.validate import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
