-- Usage records, their block uses and their per-request results (issue 21,
-- docs/deployment.md). SQL shared by Debian's ClickHouse 18.16 and current releases.
--
-- One row per record. `version` is 2^63 - 1 - id: ReplacingMergeTree keeps the
-- row of the highest version of a sorting key, so of two copies of one request_id
-- (a retry that raced the first attempt) the first one received is kept. Copies
-- meet only within a partition and one hour (the sorting key starts with it): a
-- retry carries the same ts. Reads that need exact counts read `FINAL`.
CREATE TABLE IF NOT EXISTS usage_records (
    id Int64,
    version UInt64,
    request_id String,
    ts_us Int64,
    received_us Int64,
    service String,
    model String,
    prompt_tokens Int64,
    cached_tokens Int64,
    completion_tokens Nullable(Int64),
    ttft_ms Nullable(Float64),
    latency_ms Nullable(Float64),
    replica Nullable(String),
    deploy Nullable(String),
    session_id Nullable(String),
    cache_key Nullable(String),
    tenant Nullable(String),
    block_size Nullable(Int64),
    has_blocks UInt8,
    block_hashes Array(Int64),
    prefix_hash Nullable(String),
    prefix_key Nullable(Int64),
    prefix_tokens Nullable(Int64),
    segments Nullable(String),
    attributes Nullable(String),
    cache_write_tokens Int64,
    cache_ttl_s Nullable(Float64),
    provider Nullable(String),
    scenario Nullable(String)
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_us, 1000000)))
ORDER BY (intDiv(ts_us, 3600000000), request_id);

-- Every key a record carries, one row per (record, position): its block hashes
-- (kind 0) and its prefix key (kind 1). Fed by the two views below in the insert
-- itself, so a record and its uses are durable together. `rid` is
-- cityHash64(request_id): copies of one request collapse here as in usage_records.
-- A cluster shards this table by cityHash64(model, key): every use of a key is on
-- one shard, where the analytics pass compares it with the previous one.
CREATE TABLE IF NOT EXISTS block_uses (
    model String,
    kind UInt8,
    key Int64,
    pos UInt32,
    ts_us Int64,
    id Int64,
    version UInt64,
    rid UInt64,
    replica Nullable(String),
    ttft_ms Nullable(Float64)
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_us, 1000000)))
ORDER BY (intDiv(ts_us, 3600000000), model, kind, key, rid, pos);

CREATE MATERIALIZED VIEW IF NOT EXISTS block_uses_of_blocks TO block_uses AS
SELECT model, toUInt8(0) AS kind, key, toUInt32(position - 1) AS pos, ts_us, id, version,
       cityHash64(request_id) AS rid, replica, ttft_ms
FROM usage_records
ARRAY JOIN block_hashes AS key, arrayEnumerate(block_hashes) AS position;

CREATE MATERIALIZED VIEW IF NOT EXISTS block_uses_of_prefixes TO block_uses AS
SELECT model, toUInt8(1) AS kind, assumeNotNull(prefix_key) AS key, toUInt32(0) AS pos, ts_us,
       id, version, cityHash64(request_id) AS rid, replica, ttft_ms
FROM usage_records
WHERE isNotNull(prefix_key);

-- The analytics pass's per-request values (service.analytics.requests.RESULT_SCHEMA),
-- rewritten whole when a late record makes the pass recompute an hour: the row of
-- the latest pass (`version`) is the one that counts.
CREATE TABLE IF NOT EXISTS request_results (
    id Int64,
    ts_us Int64,
    version UInt64,
    fingerprinted UInt8,
    seen_blocks Int64,
    cacheable_tokens Int64,
    rewarm_tokens Int64,
    is_rewarm UInt8,
    rewarm_cause Nullable(String),
    rewarm_gap_us Nullable(Int64),
    history_rewrite UInt8,
    is_opening UInt8,
    is_hit UInt8,
    first_key Nullable(Int64),
    first_key_is_prefix Nullable(UInt8)
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_us, 1000000)))
ORDER BY (intDiv(ts_us, 3600000000), id);

-- The analytics pass's scratch tables (service.clickhouse.pass_sql), emptied at the
-- start of each pass; one pass runs at a time (the relational analytics lock).
-- Each block use of the records being computed, with the previous use of its key.
CREATE TABLE IF NOT EXISTS pass_uses (
    id Int64,
    kind UInt8,
    key Int64,
    pos UInt32,
    seen UInt8,
    prev_ts Int64,
    prev_ttft Float64
) ENGINE = Memory;

-- The rewarms whose cause is routing or eviction: where the deepest seen key was.
CREATE TABLE IF NOT EXISTS pass_candidates (
    id Int64,
    ts_us Int64,
    model String,
    kind UInt8,
    key Int64,
    replica String
) ENGINE = Memory;
