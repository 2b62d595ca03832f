"""One module per ``ropesplit`` subcommand.

Each module defines::

    HELP: str                                   one-line help
    def add_arguments(parser) -> None           its flags
    def run(args) -> int                        the work; returns the exit code

Modules keep heavy imports (sympy, numpy, torch, transformers) inside ``run``
so that ``ropesplit --help`` and unrelated subcommands start fast.  The CLI
discovers the modules here; ``ORDER`` fixes how ``--help`` lists them.
"""

ORDER = ["derive", "bound", "analyze", "claims", "merge", "compare", "perturb", "figures", "report"]
