"""Usage records from other tools' files (`cachewatch import ...`)."""
