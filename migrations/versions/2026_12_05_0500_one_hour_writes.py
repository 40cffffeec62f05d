"""one-hour writes: of a record's cache writes, those to a one-hour cache

Revision ID: 20261205_one_hour_writes
Revises: 20261204_id_salt_leases
Create Date: 2026-12-05

Anthropic bills writes to its 5-minute and 1-hour caches at 1.25x and 2x the
input price and reports them apart (usage.cache_creation); records stored before
have it null: not split, priced as they were.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261205_one_hour_writes"
down_revision: str | None = "20261204_id_salt_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("usage_records", sa.Column("cache_write_1h_tokens", sa.BigInteger()))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("cache_write_1h_tokens")
