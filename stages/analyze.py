"""analyze: every run in one table, the statistics, plots, report and DVC metrics
→ records/, plots/analysis/, reports/, metrics/

    python stages/analyze.py

The stage is :mod:`empriv.pipeline.analyze`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.analyze import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
