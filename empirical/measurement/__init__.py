"""The claims measurement: the rows every claim of the paper is judged on.

- ``passages``: the split's statistics per passage, in every cell of the grid;
- ``order_passages``: claim 1's word-order damage per passage;
- ``shuffled``: the frequency-order null (a model whose frequencies are shuffled);
- ``plan``: the forward passes a run will make, counted before the first;
- ``claims_run``: corpora in, ``claims.json`` out (the judging is ``ropesplit.claims``');
- ``calibration``: the verdicts on random-init (null) and planted models.

May import: the adapter, the model and analysis wings, and itself.
"""
