"""The training wing: a small RoPE model trained here, measured at each checkpoint.

- ``train_setup``: the config, tokenisers, model and text split of a run;
- ``train``: the loop and its log-spaced checkpoints;
- ``train_measure``: a checkpoint's loss and docs/theory.md section 5;
- ``emergence``: runs over bases and seeds, compared with the theory.

May import: the adapter, the model and analysis wings, and itself.
"""
