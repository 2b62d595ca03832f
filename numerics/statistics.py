r"""The per-head statistics of docs/theory.md section 5, named once.

:class:`~ropesplit.numerics.stats.HeadStats` computes them; this registry is what
every reader lists them from: ``ropesplit analyze`` (its CSV and tidy tables), the
report's per-layer table, training's checkpoints and figure 11. A statistic added
to ``HeadStats`` is one line here (a test holds the two together). Imports nothing
but the standard library, so the report's sections read it without numpy.

    r_split             corr(W, f + g) over the allowed pairs        (section 3)
    r_split_rowcentred  the same after removing each row's mean
    r_3axis             corr(W, least-squares a_{i-j} + b_i + c_j)
    remainder_share     ||E||_F / ||W - mean W||_F
    tightness_max       max |E| / bound over pairs with bound > 0    (section 3)
    tightness_median    median of the same
    lowfreq_share_k     key-deviation energy in the low-frequency half  (section 5)
    lowfreq_share_q     query-deviation energy in the low-frequency half
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STATISTICS", "Statistic", "names"]


@dataclass(frozen=True)
class Statistic:
    """One per-head statistic: its name (a ``HeadStats`` field) and where it is shown."""

    name: str
    table: bool = True  # a column of the report's per-layer table
    training: bool = True  # watched over training: figure 11 and the emergence table


STATISTICS = (
    Statistic("r_split"),
    Statistic("r_split_rowcentred", training=False),
    Statistic("r_3axis", training=False),
    Statistic("remainder_share"),
    Statistic("tightness_max"),
    Statistic("tightness_median", table=False, training=False),
    Statistic("lowfreq_share_k"),
    Statistic("lowfreq_share_q"),
)


def names(where: str | None = None) -> tuple[str, ...]:
    """The statistics' names in order: all (``None``), or those shown in the report's
    per-layer ``"table"`` or watched in ``"training"``.

    >>> names("training")
    ('r_split', 'remainder_share', 'tightness_max', 'lowfreq_share_k', 'lowfreq_share_q')
    """
    if where not in (None, "table", "training"):
        raise ValueError(f"where must be None, 'table' or 'training', got {where!r}")
    return tuple(s.name for s in STATISTICS if where is None or getattr(s, where))
