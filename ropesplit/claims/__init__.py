"""ropesplit.claims: the paper's claims as pre-registered tests, and their records, with no
model and no torch (``ropesplit merge`` and ``ropesplit compare`` read only JSON).

    registry    the claims, their primary tests, thresholds and the grid of open choices
    verdicts    the verdict rules: a condition's decision, a claim's verdict, robustness
    records     a run's settings and grid; its record judged from its rows; merge, compare
    text        the lines the CLI prints and the report shows

It stands on ``ropesplit.core`` and the model-free parts of ``ropesplit.numerics``
(intervals, pooling); ``ropesplit.empirical.measurement.claims_run`` measures the rows it judges.
"""
