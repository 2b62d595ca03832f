"""ropesplit.theory (being built)."""
