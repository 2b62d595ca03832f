"""``python -m ropesplit`` runs the CLI."""

import sys

from ropesplit.cli import main

sys.exit(main())
