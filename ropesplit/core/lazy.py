"""A package whose public names load their modules on first use (PEP 562).

A package ``__init__`` states where each public name lives and takes the two module
hooks from :func:`lazy_names`::

    __getattr__, __dir__ = lazy_names(__name__, {"capture": "ropesplit.empirical.model.capture"})

so that importing the package (or one of its light modules, such as
``empirical.experiments.settings``) imports none of the heavy ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:  # fmt: skip
    """The ``__getattr__`` and ``__dir__`` of ``package``: each name in ``homes`` read from
    the module named there (a full dotted path) when first asked for."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    def __dir__() -> list[str]:
        return sorted(homes)

    return __getattr__, __dir__
