"""chart rollups: the read path's table (per bucket and filter scope, 4 grains)

Revision ID: 20261130_chart_rollups
Revises: 20261129_alerts
Create Date: 2026-11-30

The table starts empty; the next analytics pass derives it (and the daily
`prefix_rollups` rows) from the existing rollups (`service.services.chart_rollups`).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261130_chart_rollups"
down_revision: str | None = "20261129_alerts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SUMS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "fp_requests",
    "fp_prompt_tokens",
    "fp_cached_tokens",
    "cacheable_tokens",
    "rewarm_tokens",
    "rewarms_concurrent",
    "rewarms_routing",
    "rewarms_eviction",
    "rewarms_unknown",
    "rewarm_tokens_concurrent",
    "rewarm_tokens_routing",
    "rewarm_tokens_eviction",
    "rewarm_tokens_unknown",
    "session_requests",
    "history_rewrites",
    "opening_fp_prompt_tokens",
    "opening_cacheable_tokens",
    "hits",
    "misses",
)


def upgrade() -> None:
    op.create_table(
        "chart_rollups",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("grain_s", sa.Integer(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("service", sa.String(length=100), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("bucket_us", sa.BigInteger(), nullable=False),
        *[sa.Column(name, sa.BigInteger(), nullable=False) for name in _SUMS],
        sa.Column("ttft_hit", sa.LargeBinary(), nullable=True),
        sa.Column("ttft_miss", sa.LargeBinary(), nullable=True),
        sa.Column("replicas", sa.Text(), nullable=True),
        sa.Column("first_keys", sa.LargeBinary(), nullable=True),
        *[
            sa.Column(f"ttft_{outcome}_{q}", sa.Float(), nullable=True)
            for outcome in ("hit", "miss")
            for q in ("p50", "p95")
        ],
        sa.Column("replica_count", sa.BigInteger(), nullable=False),
        sa.Column("prefix_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chart_rollups")),
        sa.UniqueConstraint(
            "grain_s",
            "level",
            "service",
            "model",
            "bucket_us",
            name=op.f("uq_chart_rollups_grain_s"),
        ),
    )
    # Every row from a bucket on: what the analytics pass merges, deletes and derives.
    for table in ("chart_rollups", "rollups", "prefix_rollups"):
        op.create_index(f"ix_{table}_grain_bucket", table, ["grain_s", "bucket_us"])


def downgrade() -> None:
    op.execute("DELETE FROM prefix_rollups WHERE grain_s = 86400")  # the daily rows
    for table in ("rollups", "prefix_rollups"):
        op.drop_index(f"ix_{table}_grain_bucket", table_name=table)
    op.drop_table("chart_rollups")
    op.execute("DELETE FROM analytics_cursor WHERE name = 'chart_rollups'")
