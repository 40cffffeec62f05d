-- Block uses and session requests are written by the analytics pass, no longer by
-- materialized views in the insert (issue 33). A view's rows are written after the
-- record's own part: a process killed between the two kept the records and lost
-- their uses for good (the re-post found the records stored and skipped them). The
-- pass now derives the rows of the records it reads (ids above its cursor) in
-- `service.clickhouse.records.derive`; a pass that dies after that and before it
-- commits its cursor derives them again, and every read of these tables tolerates
-- the copies (service.clickhouse.pass_sql).
DROP TABLE IF EXISTS block_uses_of_blocks;
DROP TABLE IF EXISTS block_uses_of_prefixes;
DROP TABLE IF EXISTS session_requests_of_records;
