"""audit@<config>: train one audit-cube configuration with the canaries and audit it
→ models/audit/…, records/audit/….json

    python stages/audit.py <the audit cube point, as train.py>

The stage is :mod:`empriv.pipeline.audit`: ``cli`` parses the command line, ``main`` runs it.
"""

import sys

from empriv.pipeline.audit import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
