-- The provider's own diagnosis of a miss (issue 34): its reason as it names it
-- and its estimate of the tokens missed. Null: none.
ALTER TABLE usage_records ADD COLUMN provider_miss_reason Nullable(String);
ALTER TABLE usage_records ADD COLUMN provider_missed_tokens Nullable(Int64);
