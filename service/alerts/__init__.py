"""Slack alerts for regressions (issue 5, docs/alerts.md): message building
(`message`, pure), the outbox written by detection (`outbox`), its queries
(`repository`) and the delivery job (`delivery`) with its HTTP transport (`slack`)."""
