"""ropesplit.numerics (being built)."""
