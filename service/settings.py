"""All configuration, read once from `CACHEWATCH_*` environment variables."""

from functools import lru_cache
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024
#: The most entries a page of a paged read may be configured to hold.
READ_PAGE_CEILING = 1_000_000


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CACHEWATCH_", extra="ignore")

    database_url: str = "sqlite:///./cachewatch.db"
    reuse_window_s: float = Field(3600.0, gt=0)
    # Usage records, per-request results and block uses in ClickHouse instead
    # (docs/deployment.md): chdb:///dir (in-process) or http://host:8123/database.
    clickhouse_url: str | None = None
    # The pass reads records received at least this long ago: an insert is visible
    # by then (service.clickhouse.records); one found later has its hour recomputed.
    # A read of the rollups waits this long first, to count what was just accepted.
    clickhouse_visibility_lag_s: float = Field(1.0, ge=0)
    # The pass's block-level step runs as this many statements, one per shard of
    # cityHash64(model, key): each holds only its shard's keys in memory.
    clickhouse_pass_shards: int = Field(4, ge=1, le=1024)
    # GET /v1/capacity on ClickHouse replays this share of the blocks (a SHARDS
    # sample, service.analytics.shards) and states its standard error.
    clickhouse_capacity_sample_rate: float = Field(0.01, gt=0, le=1)
    # Records a step of the ClickHouse analytics pass computes at most (whole hours;
    # an hour with more is a step alone): bounds the memory of a backlog, there and
    # here (service.services.clickhouse_pass).
    clickhouse_pass_step_records: int = Field(1_000_000, ge=1)
    # Sharded ClickHouse servers (docs/deployment.md, "Sharding"): the cluster's name
    # in the servers' `remote_servers`, and every shard's HTTP URL (comma-separated,
    # each naming the database of `clickhouse_url`), where the migrations create
    # the local and Distributed tables. Unset: one server.
    clickhouse_cluster: str | None = None
    clickhouse_shard_urls: str = ""
    detect_bucket_s: int = Field(300, gt=0)
    detect_interval_s: int = Field(300, gt=0)
    slack_webhook_url: str | None = None
    public_url: str = "http://127.0.0.1:8000"
    public_read: bool = False
    max_body_bytes: int = Field(10 * MiB, gt=0)
    # The models file (TOML, contract section 4a; docs/providers.md): caching profiles
    # and prices per model. None: the built-in profiles and the price source only.
    models_file: Path | None = None
    max_decompressed_bytes: int = Field(64 * MiB, gt=0)
    # Memory that request bodies and their decoding may hold at once, per process;
    # past it a request is answered 503 with Retry-After (service/ingest/inflight.py).
    # At least what one body at both limits takes (the default: 714 MiB).
    max_inflight_bytes: int = Field(1024 * MiB, gt=0)
    # String block hashes whose int64 keys each ingesting process remembers, per
    # generation of two (service/ingest/hashing.py): a recurring hash then costs a
    # dict lookup instead of a BLAKE2b call. At most twice this many hashes with
    # their keys are held (docs/deployment.md, "Sizing"); 0 remembers none.
    hash_memo_entries: int = Field(100_000, ge=0, le=10_000_000)
    # Rejected records kept per body (service/services/rejected.py, docs/ingestion.md):
    # the first `rejected_sample_per_reason` of each distinct reason, for at most
    # `rejected_reasons_per_body` reasons, then one row per reason counting the rest;
    # and at most `rejected_rows_per_minute` sample rows across bodies per minute
    # (past it a body keeps one row that counts its rejections). The answer's counts
    # stay exact whatever is kept.
    rejected_sample_per_reason: int = Field(10, ge=1, le=10_000)
    rejected_reasons_per_body: int = Field(100, ge=1, le=10_000)
    rejected_rows_per_minute: int = Field(10_000, ge=0)
    # Raw usage records and rejected records older than this are deleted (rollups,
    # regressions, events and alerts are kept): see service/services/retention.py.
    retention_days: int = Field(30, gt=0)
    retention_interval_s: int = Field(3600, gt=0)
    # Rows deleted per transaction: each batch holds SQLite's write lock briefly.
    retention_batch: int = Field(5000, ge=1, le=100_000)
    # How long a writer waits for SQLite's lock before the request answers 503.
    sqlite_busy_timeout_ms: int = Field(5000, ge=0)
    retry_after_s: int = Field(5, ge=1)
    # A valid token is looked up at most once per this many seconds per process
    # (service.services.tokens.TokenCache): revoking one takes effect within it.
    # 0 looks every request's token up.
    token_cache_s: float = Field(5.0, ge=0)
    # Run the background jobs (analytics pass, detection, alerts) inside `serve`.
    # With several API replicas, leave it on everywhere or on one: each job takes a
    # database lock, so it runs once at a time either way.
    run_jobs: bool = True
    analytics_interval_s: int = Field(30, gt=0)
    # The analytics pass commits in steps of at most this many new records (by arrival
    # id), each in its own transaction: on SQLite a step holds the write lock for
    # a second or two (well inside `sqlite_busy_timeout_ms`), so ingestion never
    # waits long on the pass (docs/ingestion.md, "Late records and the pass").
    # Smaller steps cost more: each has its fixed costs (the open hour's and day's
    # rows merged again), and a step's records older than the one before's are late
    # records to it.
    analytics_step_records: int = Field(50_000, ge=1)
    # ... and of at most about this many rollup minutes (a late record counting the
    # hours it makes the pass rebuild): sparse records cost by the buckets they touch.
    analytics_step_minutes: int = Field(1_500, ge=1)
    # The lasting-drop rule (contract sections 5 and 5c): at least this much absolute
    # and relative hit-rate drop, lasting at least `detect_min_duration_s` (in whole
    # detection buckets, rounded up).
    drop_min_abs: float = Field(0.10, gt=0, le=1)
    drop_min_rel: float = Field(0.20, gt=0, le=1)
    detect_min_duration_s: int = Field(1800, gt=0)
    # A regression is over once its series is back for this long of busy traffic
    # (docs/detection.md section 3): a KV budget thrashing at the peak comes back
    # between its dips, and those are no recoveries.
    detect_recovery_s: int = Field(3 * 3600, gt=0)
    detect_lookback_days: int = Field(14, ge=1)
    # Groups (contract sections 4b, 5, 5a; docs/groups.md): detection also watches
    # each scenario and the `detect_top_tenants` tenants with the most prompt tokens
    # of each (service, model), and compares a newer deploy tag with the older one.
    detect_top_tenants: int = Field(20, ge=0)
    detect_groups: bool = True
    # Detection examines at most this many values of each group field per (service,
    # model) and pass (docs/detection.md, "Bounded work"): the busiest scenarios (and
    # tenants, at most `detect_top_tenants`), and the deploy tags that served last.
    # A build number per deploy or a user id per scenario costs one (service, model)
    # this many series, and never holds up the others' detection.
    detect_max_group_values: int = Field(200, ge=1)
    # An hour that is over keeps the rollups of at most this many values per (service,
    # model) and group field (the busiest by prompt tokens in that hour): 50,000
    # tenants are not 50,000 series per bucket.
    group_values_kept: int = Field(50, ge=1)
    # Paged reads (`GET /v1/groups`, `GET /v1/findings`, docs/groups.md): a request
    # without `limit` answers `read_page_limit` entries, one with a larger `limit`
    # than `read_page_max` that many; the next page is in the `Link` header.
    read_page_limit: int = Field(1000, ge=1, le=READ_PAGE_CEILING)
    read_page_max: int = Field(10_000, ge=1, le=READ_PAGE_CEILING)
    # Slack alerts (service.alerts, docs/alerts.md). The delivery job runs every
    # `alerts_interval_s`; the HTTP timeout must stay well under the lease, or a second
    # worker could take over an alert whose message is still in flight.
    alerts_interval_s: int = Field(10, gt=0)
    alerts_http_timeout_s: float = Field(10.0, gt=0)
    alerts_lease_s: float = Field(120.0, gt=0)
    # Slack allows about one message per second per webhook.
    alerts_min_interval_s: float = Field(1.0, ge=0)
    # 5xx and connection errors: retried after base * 2^(n-1) (capped, with jitter),
    # at most `alerts_max_attempts` times in a row before the alert is marked failed.
    alerts_backoff_base_s: float = Field(5.0, gt=0)
    alerts_backoff_max_s: float = Field(600.0, gt=0)
    alerts_max_attempts: int = Field(8, ge=1)
    # Alerts due together go out as one digest of at most this many.
    alerts_digest_max: int = Field(10, ge=1, le=40)
    # Findings (contract section 5b, docs/findings.md): a finding is reported when it
    # affects at least `finding_min_share` of its (service, model)'s prompt tokens.
    finding_min_share: float = Field(0.02, ge=0, le=1)
    # volatile_segment: more than this share of a segment's hashes in an hour are
    # distinct, in an hour where at least `finding_volatile_min_requests` carried it.
    finding_volatile_share: float = Field(0.5, ge=0, lt=1)
    finding_volatile_min_requests: int = Field(8, ge=2)
    # template_drift: variants used side by side in at least this share of the hours,
    # each by at least `finding_drift_variant_share` of the requests carrying the
    # part; without norm_hash, 2 to `finding_drift_max_variants` variants whose token
    # counts are within `finding_drift_token_tolerance` of each other.
    finding_drift_hours: float = Field(0.25, gt=0, le=1)
    finding_drift_variant_share: float = Field(0.05, gt=0, lt=0.5)
    finding_drift_max_variants: int = Field(10, ge=2)
    finding_drift_token_tolerance: float = Field(0.01, ge=0, lt=1)
    # history_rewrite: at least this share of continuing session requests rewrite.
    finding_rewrite_share: float = Field(0.20, gt=0, le=1)
    # eviction: the KV budget reported is where the capacity curve reaches this
    # share of the ceiling.
    finding_ceiling_target: float = Field(0.95, gt=0, le=1)
    # A pass that needs the database another pass holds (`cachewatch detect`, and each
    # job of the server or worker: SQLite's write lock, PostgreSQL's advisory lock of
    # the pass) waits this long for it, then skips: the command says so on stderr and
    # exits 75, the job logs one warning and runs again at its next interval.
    pass_lock_wait_s: float = Field(60.0, ge=0)

    @model_validator(mode="after")
    def _page_limit_within_max(self) -> "Settings":
        if self.read_page_limit > self.read_page_max:
            raise ValueError(
                f"read_page_limit ({self.read_page_limit}) is more than read_page_max "
                f"({self.read_page_max})"
            )
        return self

    @model_validator(mode="after")
    def _one_body_fits_the_inflight_budget(self) -> "Settings":
        from service.ingest.inflight import most_one_body_holds  # imports the decoders

        needed = most_one_body_holds(self.max_body_bytes, self.max_decompressed_bytes)
        if self.max_inflight_bytes < needed:
            raise ValueError(
                f"max_inflight_bytes ({self.max_inflight_bytes}) is less than a body at the "
                f"size limits holds while it is decoded ({needed}): raise it, or lower "
                "max_body_bytes / max_decompressed_bytes"
            )
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
