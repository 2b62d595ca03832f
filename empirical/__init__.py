"""ropesplit.empirical (being built)."""
