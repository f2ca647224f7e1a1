"""profiles: ε(δ) privacy profiles of every finite (ε, b, T) of the cube → plots/profiles/

    python stages/profiles.py

The stage is :mod:`empriv.pipeline.profiles`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.profiles import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
