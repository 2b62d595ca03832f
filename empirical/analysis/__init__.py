"""The analysis wing: a captured model's statistics per head, and the tables they make.

- ``analyze``: docs/theory.md section 5 on every head, beside a random-init control;
- ``raw``, ``lens``: the same from q/k you already have, or a TransformerLens cache;
- ``protocol``: what moves the measured ``r_split`` towards the paper's number;
- ``tidy``: one row per head, one column per statistic.

May import: the adapter, the model wing and itself.
"""
