"""Pre-aggregated metrics: what the API, dashboard and detection read instead of raw
records (pure functions; storage lives in `service.repository`)."""
