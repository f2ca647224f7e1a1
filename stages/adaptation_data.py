"""adaptation_data@<dataset>: the adaptation audit's sets for one dataset → data/adaptation/<dataset>/

    python stages/adaptation_data.py --dataset iid|ood

The stage is :mod:`empriv.pipeline.adaptation_data`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.adaptation_data import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
