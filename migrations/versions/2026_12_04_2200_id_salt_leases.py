"""id salt leases: each API process's salt of the ClickHouse record ids

Revision ID: 20261204_id_salt_leases
Revises: 20261202_ttft_total
Create Date: 2026-12-04

Starts empty: a process inserts the row of the salt it takes first
(service.clickhouse.ids). Only a ClickHouse deployment writes it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261204_id_salt_leases"
down_revision: str | None = "20261202_ttft_total"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "id_salt_leases",
        sa.Column("salt", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("expires_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("salt", name=op.f("pk_id_salt_leases")),
    )


def downgrade() -> None:
    op.drop_table("id_salt_leases")
