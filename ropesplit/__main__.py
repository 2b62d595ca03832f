"""``python -m ropesplit`` runs the CLI."""

import sys

from ropesplit.cli import main

if __name__ == "__main__":
    sys.exit(main())
