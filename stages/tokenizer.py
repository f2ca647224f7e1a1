"""tokenizer: the public split → models/tokenizer/

    python stages/tokenizer.py

The stage is :mod:`empriv.pipeline.tokenizer`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.tokenizer import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
