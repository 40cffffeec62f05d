"""The schema. Times are integer microseconds since the epoch (UTC): they sort and
bucket as plain integers on both SQLite and PostgreSQL and load into Polars
without any timezone parsing."""

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names: Alembic's batch mode on SQLite recreates tables
# and can only drop or alter constraints it can name.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UsageRecord(Base):
    """One LLM request as the calling application saw it (contract section 1).

    `id` is the arrival order: it breaks ties between equal `ts_us`.

    `block_hashes` is stored as one blob of little-endian int64 keys (see
    `service.ingest.hashing`): the analytics read millions of rows and turn each blob
    into a NumPy view with no per-element parsing, 8 bytes a block instead of a
    JSON string. `segments` and `attributes` are read rarely (diagnosis, display)
    and stay JSON.
    """

    __tablename__ = "usage_records"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(200), unique=True)
    ts_us: Mapped[int] = mapped_column(BigInteger)
    received_us: Mapped[int] = mapped_column(BigInteger)
    service: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(200))
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int | None] = mapped_column(BigInteger)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    replica: Mapped[str | None] = mapped_column(String(200))
    deploy: Mapped[str | None] = mapped_column(String(200))
    session_id: Mapped[str | None] = mapped_column(String(200))
    cache_key: Mapped[str | None] = mapped_column(String(200))
    tenant: Mapped[str | None] = mapped_column(String(200))
    block_size: Mapped[int | None] = mapped_column(Integer)
    block_hashes: Mapped[bytes | None] = mapped_column(LargeBinary)
    prefix_hash: Mapped[str | None] = mapped_column(String(200))
    # int64 key of `prefix_hash`, same keying as `block_hashes`.
    prefix_key: Mapped[int | None] = mapped_column(BigInteger)
    prefix_tokens: Mapped[int | None] = mapped_column(BigInteger)
    segments: Mapped[list[dict[str, object]] | None] = mapped_column(JSON)
    attributes: Mapped[dict[str, object] | None] = mapped_column(JSON)
    # Contract section 1's managed-provider fields, last as the migration added them.
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    cache_ttl_s: Mapped[float | None] = mapped_column(Float)
    provider: Mapped[str | None] = mapped_column(String(50))
    scenario: Mapped[str | None] = mapped_column(String(100))
    # Of cache_write_tokens, those written to a one-hour cache (Anthropic's
    # ephemeral_1h_input_tokens); null: not split (docs/providers.md, "Prices").
    cache_write_1h_tokens: Mapped[int | None] = mapped_column(BigInteger)
    # The provider's own diagnosis of a miss, as it names it (Anthropic's
    # cache_miss_reason.type, OpenAI's prompt_cache_diagnostics reason), and its
    # estimate of the tokens missed; null: none (service.ingest.diagnoses).
    provider_miss_reason: Mapped[str | None] = mapped_column(String(50))
    provider_missed_tokens: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        Index("ix_usage_records_model_ts", "model", "ts_us", "id"),
        Index("ix_usage_records_service_ts", "service", "ts_us"),
        Index("ix_usage_records_session_ts", "session_id", "ts_us"),
    )


class ChangeEvent(Base):
    """A deploy, replica-count, config change or note, posted or inferred (section 3)."""

    __tablename__ = "change_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    ts_us: Mapped[int] = mapped_column(BigInteger)
    service: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))
    model: Mapped[str | None] = mapped_column(String(200))
    deploy: Mapped[str | None] = mapped_column(String(200))
    replicas: Mapped[int | None] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(10))
    # Hash of the event's content: posting the same event twice stores it once.
    dedupe_key: Mapped[str] = mapped_column(String(64), unique=True)
    created_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_change_events_service_ts", "service", "ts_us"),)


class ApiToken(Base):
    """A bearer token; only its SHA-256 is stored, so a database leak leaks no token."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    scope: Mapped[str] = mapped_column(String(10))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_us: Mapped[int] = mapped_column(BigInteger)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class RejectedRecord(Base):
    """Input that could not be stored, kept verbatim (bytes) with the reason."""

    __tablename__ = "rejected_records"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    received_us: Mapped[int] = mapped_column(BigInteger)
    endpoint: Mapped[str] = mapped_column(String(50))
    batch_index: Mapped[int | None] = mapped_column(Integer)
    request_id: Mapped[str | None] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(Text)
    raw: Mapped[bytes] = mapped_column(LargeBinary)

    __table_args__ = (Index("ix_rejected_records_received", "received_us"),)


class AnalyticsCursor(Base):
    """How far the analytics pass has read `usage_records` (by arrival id)."""

    __tablename__ = "analytics_cursor"

    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    last_id: Mapped[int] = mapped_column(BigInteger)
    updated_us: Mapped[int] = mapped_column(BigInteger)


class AnalyticsState(Base):
    """The incremental pass's memory: recent block sightings and the previous
    request of each session, serialized (see `service.analytics.state`)."""

    __tablename__ = "analytics_state"

    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    max_ts_us: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[bytes] = mapped_column(LargeBinary)


def _count() -> Mapped[int]:
    return mapped_column(BigInteger, default=0)


def _sum() -> Mapped[int]:
    # After the key columns of the table that uses the mixin (sort_order), as the
    # migrations create them.
    return mapped_column(BigInteger, default=0, sort_order=1)


def _usd() -> Mapped[float]:
    """A sum of dollars (contract section 4a); 0 where nothing was priced, which
    `priced_requests` = 0 tells from a real 0."""
    return mapped_column(Float, default=0.0, server_default="0", sort_order=1)


def _late_sum() -> Mapped[int]:
    """A count added by a later migration (existing rows hold 0)."""
    return mapped_column(BigInteger, default=0, server_default="0", sort_order=1)


class RollupSums:
    """The additive columns every rollup carries, whatever it is keyed by: the sums
    the metrics of contract section 4 are ratios of, and the sparse TTFT histograms
    (service.rollups.histogram) that merge by adding counts. Declared once so that
    `rollups` and `chart_rollups` cannot drift apart."""

    requests: Mapped[int] = _sum()
    prompt_tokens: Mapped[int] = _sum()
    cached_tokens: Mapped[int] = _sum()
    fp_requests: Mapped[int] = _sum()
    fp_prompt_tokens: Mapped[int] = _sum()
    fp_cached_tokens: Mapped[int] = _sum()
    cacheable_tokens: Mapped[int] = _sum()
    rewarm_tokens: Mapped[int] = _sum()
    rewarms_concurrent: Mapped[int] = _sum()
    rewarms_routing: Mapped[int] = _sum()
    rewarms_eviction: Mapped[int] = _sum()
    rewarms_unknown: Mapped[int] = _sum()
    rewarm_tokens_concurrent: Mapped[int] = _sum()
    rewarm_tokens_routing: Mapped[int] = _sum()
    rewarm_tokens_eviction: Mapped[int] = _sum()
    rewarm_tokens_unknown: Mapped[int] = _sum()
    session_requests: Mapped[int] = _sum()
    history_rewrites: Mapped[int] = _sum()
    opening_fp_prompt_tokens: Mapped[int] = _sum()
    opening_cacheable_tokens: Mapped[int] = _sum()
    hits: Mapped[int] = _sum()
    misses: Mapped[int] = _sum()
    # Managed providers (contract sections 4 and 4a), added by 20261201_costs.
    rewarms_below_minimum: Mapped[int] = _late_sum()
    rewarms_expiry: Mapped[int] = _late_sum()
    rewarm_tokens_below_minimum: Mapped[int] = _late_sum()
    rewarm_tokens_expiry: Mapped[int] = _late_sum()
    cache_write_tokens: Mapped[int] = _late_sum()
    priced_requests: Mapped[int] = _late_sum()
    spend_usd: Mapped[float] = _usd()
    wasted_usd: Mapped[float] = _usd()
    wasted_usd_below_minimum: Mapped[float] = _usd()
    wasted_usd_concurrent: Mapped[float] = _usd()
    wasted_usd_expiry: Mapped[float] = _usd()
    wasted_usd_routing: Mapped[float] = _usd()
    wasted_usd_eviction: Mapped[float] = _usd()
    wasted_usd_unknown: Mapped[float] = _usd()
    # Findings (contract section 5b), added by 20261201_findings.
    cache_key_requests: Mapped[int] = _late_sum()
    rewrite_prompt_tokens: Mapped[int] = _late_sum()
    rewrite_rewarm_tokens: Mapped[int] = _late_sum()
    rewrite_wasted_usd: Mapped[float] = _usd()
    rewarms_expiry_2ttl: Mapped[int] = _late_sum()
    # How busy a bucket was for its callers (definitions._load_exprs), added by
    # 20261202_ttft_total.
    ttft_ms_total: Mapped[int] = _late_sum()
    ttft_hit: Mapped[bytes | None] = mapped_column(LargeBinary, sort_order=1)
    ttft_miss: Mapped[bytes | None] = mapped_column(LargeBinary, sort_order=1)


class Rollup(RollupSums, Base):
    """Sums per time bucket and (service, model, deploy, replica); `grain_s` is 60 or
    3600 (hourly rows keep month-long queries small). Empty deploy/replica is ''
    so that the unique key also holds for requests that sent none."""

    __tablename__ = "rollups"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    grain_s: Mapped[int] = mapped_column(Integer)
    bucket_us: Mapped[int] = mapped_column(BigInteger)
    service: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(200))
    deploy: Mapped[str] = mapped_column(String(200))
    replica: Mapped[str] = mapped_column(String(200))

    __table_args__ = (
        UniqueConstraint("grain_s", "model", "bucket_us", "service", "deploy", "replica"),
        Index("ix_rollups_grain_service_bucket", "grain_s", "service", "bucket_us"),
        # The tail the analytics pass merges and the chart rollups are derived from.
        Index("ix_rollups_grain_bucket", "grain_s", "bucket_us"),
    )


class PrefixRollup(Base):
    """Sums per bucket and leading prefix (first block key): distinct prefixes per
    bucket (unique_prefix_ratio) and the top prefixes by tokens. `grain_s` is 60,
    3600 or 86400 (daily rows: the dashboard's top prefixes over a month)."""

    __tablename__ = "prefix_rollups"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    grain_s: Mapped[int] = mapped_column(Integer)
    bucket_us: Mapped[int] = mapped_column(BigInteger)
    service: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(200))
    replica: Mapped[str] = mapped_column(String(200))
    first_key: Mapped[int] = mapped_column(BigInteger)
    requests: Mapped[int] = _count()
    prompt_tokens: Mapped[int] = _count()
    cached_tokens: Mapped[int] = _count()
    cacheable_tokens: Mapped[int] = _count()
    rewarms: Mapped[int] = _count()
    rewarm_tokens: Mapped[int] = _count()

    __table_args__ = (
        UniqueConstraint("grain_s", "model", "bucket_us", "service", "first_key", "replica"),
        Index("ix_prefix_rollups_grain_service_bucket", "grain_s", "service", "bucket_us"),
        Index("ix_prefix_rollups_grain_bucket", "grain_s", "bucket_us"),
    )


def _group_column(width: int) -> Mapped[str]:
    """A group key (contract section 4b): '' where a row is not a group's."""
    return mapped_column(String(width), default="", server_default="", sort_order=3)


class ChartRollup(RollupSums, Base):
    """What a chart or `/v1/metrics` bucket needs, per time bucket and filter scope:
    the read path's table (the `rollups` rows, summed over deploy and replica).

    Derived from `rollups` and `prefix_rollups` by the analytics pass (never from
    records), at `grain_s` 60, 300, 3600 and 86400, so a month at any bucket reads
    about one row per bucket. `level` says which filter the row answers: 0 one
    (service, model), 1 one service (model ''), 2 one model (service ''), 3 all
    ('', ''). The values that do not add up across buckets keep their sets, which
    merge exactly by union: `replicas` (JSON array of the non-empty replica names)
    and `first_keys` (sorted int64 leading-prefix keys, little-endian).

    `group_by`/`group_value`: '' for the whole scope; otherwise the rows of one group
    (`scenario`, `tenant` or `deploy` and its value, contract section 4b) within it,
    derived from `group_rollups`."""

    __tablename__ = "chart_rollups"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    grain_s: Mapped[int] = mapped_column(Integer)
    level: Mapped[int] = mapped_column(Integer)
    service: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(200))
    bucket_us: Mapped[int] = mapped_column(BigInteger)
    # After everything else (sort_order 3), as the groups migration adds them.
    group_by: Mapped[str] = _group_column(20)
    group_value: Mapped[str] = _group_column(200)
    # After the sums (sort_order 1), as the migration creates them.
    replicas: Mapped[str | None] = mapped_column(Text, sort_order=2)
    first_keys: Mapped[bytes | None] = mapped_column(LargeBinary, sort_order=2)
    # The row's own values of the above, read when a bucket is one row.
    ttft_hit_p50: Mapped[float | None] = mapped_column(Float, sort_order=2)
    ttft_hit_p95: Mapped[float | None] = mapped_column(Float, sort_order=2)
    ttft_miss_p50: Mapped[float | None] = mapped_column(Float, sort_order=2)
    ttft_miss_p95: Mapped[float | None] = mapped_column(Float, sort_order=2)
    replica_count: Mapped[int] = mapped_column(BigInteger, default=0, sort_order=2)
    prefix_count: Mapped[int] = mapped_column(BigInteger, default=0, sort_order=2)

    __table_args__ = (
        # Also the read index: every read is one range of bucket_us under one key.
        UniqueConstraint(
            "grain_s", "level", "service", "model", "group_by", "group_value", "bucket_us"
        ),
        # What the analytics pass deletes and rebuilds: every row from a bucket on.
        Index("ix_chart_rollups_grain_bucket", "grain_s", "bucket_us"),
    )


class SegmentRollup(Base):
    """Per hour, (service, model, scenario) and static segment (a part of the
    request's start, before its first `message[...]`) variant: how many requests
    carried it, their prompt tokens, and the tokens of the static start from the
    segment on that were not cacheable (`lost_tokens`, what a stable segment would
    have let them reuse: service.rollups.segments). The evidence of the
    `volatile_segment` and `template_drift` findings (contract section 5b).

    `hash`/`norm_hash` are the segment's as sent (an int hash as its decimal text).
    Scenario '' is none. An hour that is over keeps, per (service, model, name)
    with many variants, rows only for its frequent ones (`service.rollups.segments`);
    the rest fold into one row with hash '' whose `folded` counts them (so distinct
    variants per hour stay exact). Hour grain only."""

    __tablename__ = "segment_rollups"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    bucket_us: Mapped[int] = mapped_column(BigInteger)
    service: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(200))
    scenario: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(200))
    hash: Mapped[str] = mapped_column(String(200))
    norm_hash: Mapped[str | None] = mapped_column(String(200))
    tokens: Mapped[int] = mapped_column(BigInteger)
    folded: Mapped[int] = mapped_column(BigInteger, default=0)
    requests: Mapped[int] = _count()
    prompt_tokens: Mapped[int] = _count()
    lost_tokens: Mapped[int] = _count()

    __table_args__ = (
        UniqueConstraint("bucket_us", "model", "service", "scenario", "name", "hash"),
        Index("ix_segment_rollups_service_bucket", "service", "bucket_us"),
    )


class DiagnosisRollup(Base):
    """Per hour and (service, model), the requests whose provider diagnosed a miss
    itself (`usage_records.provider_miss_reason`), by the provider's reason and by
    what cachewatch found for the same request (`verdict`, `segment`:
    `service.diagnoses.verdicts`) and whether it rewrote its session's history
    (contract section 4's rule): their count, the provider's estimate of the
    tokens missed, and their prompt and cached tokens. Read as the agreement of
    the two (`service.diagnoses.agreement`). Rows merge by adding; hour grain."""

    __tablename__ = "diagnosis_rollups"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    bucket_us: Mapped[int] = mapped_column(BigInteger)
    service: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(String(50))
    verdict: Mapped[str] = mapped_column(String(30))
    segment: Mapped[str] = mapped_column(String(60))
    history_rewrite: Mapped[bool] = mapped_column(Boolean)
    requests: Mapped[int] = _count()
    missed_tokens: Mapped[int] = _count()
    prompt_tokens: Mapped[int] = _count()
    cached_tokens: Mapped[int] = _count()

    __table_args__ = (
        UniqueConstraint(
            "bucket_us",
            "model",
            "service",
            "reason",
            "verdict",
            "segment",
            "history_rewrite",
        ),
        Index("ix_diagnosis_rollups_service_bucket", "service", "bucket_us"),
    )


class GroupRollup(RollupSums, Base):
    """Per minute, (service, model) and group (`group_by` `scenario`, `tenant` or
    `deploy`, and its value): the sums, TTFT histograms and the replica and
    leading-prefix sets of a chart row, from which the chart rows of groups are
    derived (service.rollups.groups). Each hour keeps, per (service, model,
    group_by), at most `group_values_kept` values from its first write, the rest
    summed in the value `service.rollups.groups.OTHER`."""

    __tablename__ = "group_rollups"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    bucket_us: Mapped[int] = mapped_column(BigInteger)
    service: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(200))
    group_by: Mapped[str] = mapped_column(String(20))
    group_value: Mapped[str] = mapped_column(String(200))
    replicas: Mapped[str | None] = mapped_column(Text, sort_order=2)
    first_keys: Mapped[bytes | None] = mapped_column(LargeBinary, sort_order=2)

    __table_args__ = (
        UniqueConstraint("bucket_us", "model", "service", "group_by", "group_value"),
        Index("ix_group_rollups_bucket", "bucket_us"),
    )


class Regression(Base):
    """A lasting hit-rate drop of one (service, model), with its attribution and cause
    (contract section 5). One row per change: re-detection updates it."""

    __tablename__ = "regressions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    service: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(200))
    change_ts_us: Mapped[int] = mapped_column(BigInteger)
    detected_at_us: Mapped[int] = mapped_column(BigInteger)
    updated_at_us: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(10))
    resolved_at_us: Mapped[int | None] = mapped_column(BigInteger)
    before: Mapped[dict[str, object]] = mapped_column(JSON)
    after: Mapped[dict[str, object]] = mapped_column(JSON)
    attributed_event_id: Mapped[int | None] = mapped_column(BigInteger)
    attributed_to: Mapped[dict[str, object] | None] = mapped_column(JSON)
    cause: Mapped[str] = mapped_column(String(30))
    evidence: Mapped[list[str]] = mapped_column(JSON)
    # Contract section 5's `cost`; null when the model has no prices.
    cost: Mapped[dict[str, float] | None] = mapped_column(JSON)
    # Contract section 5's `group`: '' for the whole service.
    group_by: Mapped[str] = _group_column(20)
    group_value: Mapped[str] = _group_column(200)
    # A canary's comparison (section 5a): the older tag, the newer tag's share of
    # requests and the buckets both served. Null for any other regression.
    canary: Mapped[dict[str, object] | None] = mapped_column(JSON, sort_order=3)

    __table_args__ = (
        UniqueConstraint("service", "model", "group_by", "group_value", "change_ts_us"),
        Index("ix_regressions_change", "change_ts_us"),
    )


class Alert(Base):
    """The Slack outbox (issue 5): one message owed per (regression, kind), kind
    `opened` or `resolved`. Written in the detection transaction, so a regression is
    never stored without its alert; sent later by the alerts job (service.alerts).

    `state`: pending -> sending (claimed: `claim` is the lease token, valid until
    `lease_until_us`) -> sent | failed; `no_webhook` is pending while no webhook is
    configured. Retries go back to pending with a later `next_attempt_us`."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    regression_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("regressions.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(10))
    state: Mapped[str] = mapped_column(String(12))
    created_us: Mapped[int] = mapped_column(BigInteger)
    updated_us: Mapped[int] = mapped_column(BigInteger)
    next_attempt_us: Mapped[int] = mapped_column(BigInteger)
    # HTTP attempts, and the consecutive 5xx / connection errors that drive backoff.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    claim: Mapped[str | None] = mapped_column(String(36))
    lease_until_us: Mapped[int | None] = mapped_column(BigInteger)
    sent_us: Mapped[int | None] = mapped_column(BigInteger)
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("regression_id", "kind"),
        Index("ix_alerts_state_due", "state", "next_attempt_us"),
    )


class AlertWebhook(Base):
    """Per webhook (keyed by the SHA-256 of its URL: the URL is a secret), the
    earliest time the next message may go: one per second, later after a 429. A
    row, not process memory, so that several workers share the limit."""

    __tablename__ = "alert_webhooks"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    next_send_us: Mapped[int] = mapped_column(BigInteger)


class IdSaltLease(Base):
    """A process's lease on one salt of the ClickHouse record ids
    (service.clickhouse.ids, which says why two processes cannot make one id).
    `generation` grows by one at every write: claims, renewals and releases are
    compare-and-set on it. A row is inserted the first time its salt is taken."""

    __tablename__ = "id_salt_leases"

    salt: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    holder: Mapped[str] = mapped_column(String(200))
    generation: Mapped[int] = mapped_column(BigInteger)
    expires_us: Mapped[int] = mapped_column(BigInteger)
