"""managed providers: cache writes, TTL, provider and scenario per record; the new
rewarm causes and the dollar sums per rollup; a regression's cost

Revision ID: 20261201_costs
Revises: 20261130_chart_rollups
Create Date: 2026-12-01

Rows already stored get 0 (and no provider): the analytics do not recompute the
past for a new column (docs/providers.md, "The past").
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261201_costs"
down_revision: str | None = "20261130_chart_rollups"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTS = (
    "rewarms_below_minimum",
    "rewarms_expiry",
    "rewarm_tokens_below_minimum",
    "rewarm_tokens_expiry",
    "cache_write_tokens",
    "priced_requests",
)
_DOLLARS = (
    "spend_usd",
    "wasted_usd",
    "wasted_usd_below_minimum",
    "wasted_usd_concurrent",
    "wasted_usd_expiry",
    "wasted_usd_routing",
    "wasted_usd_eviction",
    "wasted_usd_unknown",
)
_ROLLUP_TABLES = ("rollups", "chart_rollups")


def upgrade() -> None:
    op.add_column(
        "usage_records",
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.add_column("usage_records", sa.Column("cache_ttl_s", sa.Float(), nullable=True))
    op.add_column("usage_records", sa.Column("provider", sa.String(length=50), nullable=True))
    op.add_column("usage_records", sa.Column("scenario", sa.String(length=100), nullable=True))
    for table in _ROLLUP_TABLES:
        for name in _COUNTS:
            op.add_column(
                table, sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")
            )
        for name in _DOLLARS:
            op.add_column(table, sa.Column(name, sa.Float(), nullable=False, server_default="0"))
    op.add_column("regressions", sa.Column("cost", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("regressions") as batch:
        batch.drop_column("cost")
    for table in _ROLLUP_TABLES:
        with op.batch_alter_table(table) as batch:
            for name in (*_COUNTS, *_DOLLARS):
                batch.drop_column(name)
    with op.batch_alter_table("usage_records") as batch:
        for name in ("cache_write_tokens", "cache_ttl_s", "provider", "scenario"):
            batch.drop_column(name)
