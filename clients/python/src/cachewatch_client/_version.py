"""The client's version: the same number as the cachewatch service whose record
format (its contract, section 1) it writes."""

__version__ = "0.1.0"
