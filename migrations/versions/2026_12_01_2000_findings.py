"""findings: the sums the findings read per rollup, and the segment rollups

Revision ID: 20261201_findings
Revises: 20261201_costs
Create Date: 2026-12-01

Rows already stored get 0: the findings of hours before this migration see no
cache keys, rewrites' tokens or segments (docs/findings.md, "The past").
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261201_findings"
down_revision: str | None = "20261201_costs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTS = (
    "cache_key_requests",
    "rewrite_prompt_tokens",
    "rewrite_rewarm_tokens",
)
_DOLLARS = ("rewrite_wasted_usd",)
_LAST_COUNTS = ("rewarms_expiry_2ttl",)
_ROLLUP_TABLES = ("rollups", "chart_rollups")


def upgrade() -> None:
    for table in _ROLLUP_TABLES:
        for name in _COUNTS:
            op.add_column(
                table, sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")
            )
        for name in _DOLLARS:
            op.add_column(table, sa.Column(name, sa.Float(), nullable=False, server_default="0"))
        for name in _LAST_COUNTS:
            op.add_column(
                table, sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")
            )
    op.create_table(
        "segment_rollups",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("bucket_us", sa.BigInteger(), nullable=False),
        sa.Column("service", sa.String(length=100), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("scenario", sa.String(length=100), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("hash", sa.String(length=200), nullable=False),
        sa.Column("norm_hash", sa.String(length=200), nullable=True),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("folded", sa.BigInteger(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("lost_tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_segment_rollups")),
        sa.UniqueConstraint(
            "bucket_us",
            "model",
            "service",
            "scenario",
            "name",
            "hash",
            name=op.f("uq_segment_rollups_bucket_us"),
        ),
    )
    op.create_index(
        "ix_segment_rollups_service_bucket", "segment_rollups", ["service", "bucket_us"]
    )


def downgrade() -> None:
    op.drop_index("ix_segment_rollups_service_bucket", table_name="segment_rollups")
    op.drop_table("segment_rollups")
    for table in _ROLLUP_TABLES:
        with op.batch_alter_table(table) as batch:
            for name in (*_COUNTS, *_DOLLARS, *_LAST_COUNTS):
                batch.drop_column(name)
