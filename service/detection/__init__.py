"""Regression detection: pure functions over bucketed series (NumPy) returning
dataclasses; the database work is in `service.services.detection`."""
