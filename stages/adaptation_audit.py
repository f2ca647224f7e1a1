"""adaptation_audit@<dataset>-<config>: membership inference against one DP adaptation
→ records/adaptation_audit/….json

    python stages/adaptation_audit.py --dataset D --epsilon E --batch-size B --steps T
                                      --learning-rate LR --seed S --method M

The stage is :mod:`empriv.pipeline.adaptation_audit`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.adaptation_audit import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
