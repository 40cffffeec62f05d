-- No more materialized views (issue 33). A view's rows are written after the
-- record's own part: a process killed between the two kept the records and lost
-- their block uses and session rows for good (the re-post found the records stored
-- and skipped them). The analytics pass now reads block uses from the records'
-- own arrays (block_uses is no longer written; kept for the data already in it
-- until retention drops it) and derives session_requests for the records it reads
-- (service.clickhouse.derive), again if it died before committing its cursor.
DROP TABLE IF EXISTS block_uses_of_blocks;
DROP TABLE IF EXISTS block_uses_of_prefixes;
DROP TABLE IF EXISTS session_requests_of_records;
