"""The ground floor: what every layer (theory, numerics, empirical, figures, report, the
CLI) may import, and which imports no layer above it.

    errors   RopesplitError and ValidationError: one-line user errors, their exit codes
    io       write_json / write_text: records written exactly (NaN and arrays included),
             whole or not at all; the path checks the CLI runs before any work
    paper    the seed paper's numbers and words (PAPER_R_SPLIT, QUOTES)
    claims   the claims registry: pre-registered primary tests, verdict words, the grid
    allocator  steady_allocator: the C heap keeps freed memory (the CLI sets it, once)
    clock    MODEL_CLOCK: seconds inside the model's passes and training steps

``tests/test_packaging.py`` holds every layer to it: nothing here imports numpy, torch or a
layer of ropesplit.
"""
