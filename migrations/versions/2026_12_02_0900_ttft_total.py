"""ttft_total: the callers' summed wait for the first token, per rollup

Revision ID: 20261202_ttft_total
Revises: 20261201_groups
Create Date: 2026-12-02

Rows already stored get 0: for their buckets, detection weighs traffic by prompt
tokens alone, as before (service.detection.changepoints).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261202_ttft_total"
down_revision: str | None = "20261201_groups"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("rollups", "chart_rollups", "group_rollups")


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(
            table,
            sa.Column("ttft_ms_total", sa.BigInteger(), nullable=False, server_default="0"),
        )


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("ttft_ms_total")
