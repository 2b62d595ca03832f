"""Seconds of model compute in this process, so that a run can show its own overhead.

:data:`MODEL_CLOCK` counts the time inside the model's forward passes
(``empirical.model.passes.model_pass``: every capture, loss and intervention, the capture's
taps included, since they run inside the pass) and training steps (forward, backward and
optimizer step). The report's stages record its reading beside their own totals
(``run.json``: ``stage_model_seconds``); the rest of a stage's seconds is ropesplit's own
work (statistics, validation outside the pass, figures, I/O).

>>> clock = Clock()
>>> with clock.timing():
...     with clock.timing():  # nested: counted once, by the outer block
...         pass
>>> clock.seconds >= 0.0, clock.depth
(True, 0)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["MODEL_CLOCK", "Clock"]


@dataclass
class Clock:
    """Seconds spent inside :meth:`timing` blocks (nested blocks count once)."""

    seconds: float = 0.0
    depth: int = 0

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        self.depth += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0:
                self.seconds += time.perf_counter() - start


MODEL_CLOCK = Clock()  # the model's forward passes and training steps, this process
