"""provider diagnoses: the providers' own miss diagnostics on a record, and their
agreement with cachewatch's per hour

Revision ID: 20261205_provider_diagnoses
Revises: 20261205_one_hour_writes
Create Date: 2026-12-05

Anthropic's cache diagnostics and OpenAI's prompt cache diagnostics name why a
request missed (service.ingest.diagnoses); records stored before have none.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261205_provider_diagnoses"
down_revision: str | None = "20261205_one_hour_writes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("usage_records", sa.Column("provider_miss_reason", sa.String(length=50)))
    op.add_column("usage_records", sa.Column("provider_missed_tokens", sa.BigInteger()))
    op.create_table(
        "diagnosis_rollups",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("bucket_us", sa.BigInteger(), nullable=False),
        sa.Column("service", sa.String(length=100), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.String(length=50), nullable=False),
        sa.Column("verdict", sa.String(length=30), nullable=False),
        sa.Column("segment", sa.String(length=60), nullable=False),
        sa.Column("history_rewrite", sa.Boolean(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("missed_tokens", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_diagnosis_rollups")),
        sa.UniqueConstraint(
            "bucket_us",
            "model",
            "service",
            "reason",
            "verdict",
            "segment",
            "history_rewrite",
            name=op.f("uq_diagnosis_rollups_bucket_us"),
        ),
    )
    op.create_index(
        "ix_diagnosis_rollups_service_bucket", "diagnosis_rollups", ["service", "bucket_us"]
    )


def downgrade() -> None:
    op.drop_index("ix_diagnosis_rollups_service_bucket", table_name="diagnosis_rollups")
    op.drop_table("diagnosis_rollups")
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("provider_missed_tokens")
        batch.drop_column("provider_miss_reason")
