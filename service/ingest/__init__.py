"""Turning request bodies into validated usage rows (pure functions, no I/O)."""
