"""alerts: the Slack outbox and the per-webhook send limit

Revision ID: 20261129_alerts
Revises: 20261129_regressions
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261129_alerts"
down_revision: str | None = "20261129_regressions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("regression_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("state", sa.String(length=12), nullable=False),
        sa.Column("created_us", sa.BigInteger(), nullable=False),
        sa.Column("updated_us", sa.BigInteger(), nullable=False),
        sa.Column("next_attempt_us", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("claim", sa.String(length=36), nullable=True),
        sa.Column("lease_until_us", sa.BigInteger(), nullable=True),
        sa.Column("sent_us", sa.BigInteger(), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["regression_id"],
            ["regressions.id"],
            name=op.f("fk_alerts_regression_id_regressions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
        sa.UniqueConstraint("regression_id", "kind", name=op.f("uq_alerts_regression_id")),
    )
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.create_index("ix_alerts_state_due", ["state", "next_attempt_us"], unique=False)

    op.create_table(
        "alert_webhooks",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("next_send_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_alert_webhooks")),
    )


def downgrade() -> None:
    op.drop_table("alert_webhooks")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index("ix_alerts_state_due")

    op.drop_table("alerts")
