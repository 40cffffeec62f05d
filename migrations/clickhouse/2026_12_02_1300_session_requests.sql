-- The requests of each session in session order, for history rewrites: a pass
-- reads each computed session's requests from its range on and the latest one
-- before, through the primary key, however old the session (issue 21). Copies of
-- one request (a raced retry) collapse as in block_uses, the first received kept.
CREATE TABLE IF NOT EXISTS session_requests (
    session_id String,
    ts_us Int64,
    id Int64,
    version UInt64,
    rid UInt64,
    prompt_tokens Int64,
    block_size Int64,
    block_hashes Array(Int64)
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_us, 1000000)))
ORDER BY (session_id, ts_us, rid);

CREATE MATERIALIZED VIEW IF NOT EXISTS session_requests_of_records TO session_requests AS
SELECT assumeNotNull(session_id) AS session_id, ts_us, id, version,
       cityHash64(request_id) AS rid, prompt_tokens, ifNull(block_size, 0) AS block_size,
       block_hashes
FROM usage_records
WHERE isNotNull(session_id);
