-- Of a record's cache writes, those to a one-hour cache (issue 34): Anthropic
-- bills them at 2x the input price, its 5-minute ones at 1.25x. Null: not split.
ALTER TABLE usage_records ADD COLUMN cache_write_1h_tokens Nullable(Int64);
