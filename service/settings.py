"""All configuration, read once from `CACHEWATCH_*` environment variables."""

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CACHEWATCH_", extra="ignore")

    database_url: str = "sqlite:///./cachewatch.db"
    reuse_window_s: float = Field(3600.0, gt=0)
    detect_bucket_s: int = Field(300, gt=0)
    detect_interval_s: int = Field(300, gt=0)
    slack_webhook_url: str | None = None
    public_url: str = "http://127.0.0.1:8000"
    public_read: bool = False
    max_body_bytes: int = Field(10 * MiB, gt=0)
    max_decompressed_bytes: int = Field(64 * MiB, gt=0)
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
    # The lasting-drop rule: at least this much absolute and relative hit-rate drop,
    # lasting at least this many detection buckets.
    drop_min_abs: float = Field(0.10, gt=0, le=1)
    drop_min_rel: float = Field(0.20, gt=0, le=1)
    drop_min_buckets: int = Field(3, ge=1)
    detect_lookback_days: int = Field(14, ge=1)
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


@lru_cache
def get_settings() -> Settings:
    return Settings()
