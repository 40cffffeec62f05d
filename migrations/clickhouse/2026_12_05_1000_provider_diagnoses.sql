-- The provider's own diagnosis of a miss (issue 34): its reason as it names it
-- and its estimate of the tokens missed. Null: none.
ALTER TABLE usage_records ADD COLUMN provider_miss_reason Nullable(String);
ALTER TABLE usage_records ADD COLUMN provider_missed_tokens Nullable(Int64);
-- The pass's new per-request value (service.analytics.requests.RESULT_SCHEMA):
-- the blocks a request shares with its session's previous one.
ALTER TABLE request_results ADD COLUMN session_common_blocks Nullable(Int64);
-- And whether a request's session switched models: the model of each session
-- request ('' for rows derived before: unknown, never a switch).
ALTER TABLE session_requests ADD COLUMN model String DEFAULT '';
ALTER TABLE request_results ADD COLUMN session_model_changed Nullable(UInt8);
