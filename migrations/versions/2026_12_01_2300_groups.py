"""groups: rollups per scenario, tenant and deploy, chart rows per group, and the
group of a regression

Revision ID: 20261201_groups
Revises: 20261201_findings
Create Date: 2026-12-01

`group_rollups` starts empty: groups are counted from the first records the
analytics pass reads after this migration (docs/groups.md, "The past"). Existing
chart rows and regressions are the whole scope's ('').
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "20261201_groups"
down_revision: str | None = "20261201_findings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTS = (
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
_LATE_COUNTS = (
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
_FINDING_COUNTS = ("cache_key_requests", "rewrite_prompt_tokens", "rewrite_rewarm_tokens")
_FINDING_DOLLARS = ("rewrite_wasted_usd",)
_CHART_KEY = ("grain_s", "level", "service", "model", "bucket_us")
_REGRESSION_KEY = ("service", "model", "change_ts_us")


def _sum_columns() -> list[sa.Column[Any]]:
    big, late = sa.BigInteger(), {"nullable": False, "server_default": "0"}
    return [
        *[sa.Column(n, big, nullable=False) for n in _COUNTS],
        *[sa.Column(n, big, **late) for n in _LATE_COUNTS],  # type: ignore[arg-type]
        *[sa.Column(n, sa.Float(), **late) for n in _DOLLARS],  # type: ignore[arg-type]
        *[sa.Column(n, big, **late) for n in _FINDING_COUNTS],  # type: ignore[arg-type]
        *[sa.Column(n, sa.Float(), **late) for n in _FINDING_DOLLARS],  # type: ignore[arg-type]
        sa.Column("rewarms_expiry_2ttl", big, **late),  # type: ignore[arg-type]
        sa.Column("ttft_hit", sa.LargeBinary(), nullable=True),
        sa.Column("ttft_miss", sa.LargeBinary(), nullable=True),
    ]


def _group_columns() -> list[sa.Column[str]]:
    return [
        sa.Column("group_by", sa.String(length=20), nullable=False, server_default=""),
        sa.Column("group_value", sa.String(length=200), nullable=False, server_default=""),
    ]


def upgrade() -> None:
    op.create_table(
        "group_rollups",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("bucket_us", sa.BigInteger(), nullable=False),
        sa.Column("service", sa.String(length=100), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("group_by", sa.String(length=20), nullable=False),
        sa.Column("group_value", sa.String(length=200), nullable=False),
        *_sum_columns(),
        sa.Column("replicas", sa.Text(), nullable=True),
        sa.Column("first_keys", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_group_rollups")),
        sa.UniqueConstraint(
            "bucket_us",
            "model",
            "service",
            "group_by",
            "group_value",
            name=op.f("uq_group_rollups_bucket_us"),
        ),
    )
    op.create_index("ix_group_rollups_bucket", "group_rollups", ["bucket_us"])
    with op.batch_alter_table("chart_rollups") as batch:
        for column in _group_columns():
            batch.add_column(column)
        batch.drop_constraint("uq_chart_rollups_grain_s", type_="unique")
        batch.create_unique_constraint(
            "uq_chart_rollups_grain_s",
            ["grain_s", "level", "service", "model", "group_by", "group_value", "bucket_us"],
        )
    with op.batch_alter_table("regressions") as batch:
        for column in _group_columns():
            batch.add_column(column)
        batch.add_column(sa.Column("canary", sa.JSON(), nullable=True))
        batch.drop_constraint("uq_regressions_service", type_="unique")
        batch.create_unique_constraint(
            "uq_regressions_service",
            ["service", "model", "group_by", "group_value", "change_ts_us"],
        )


def downgrade() -> None:
    op.execute("DELETE FROM chart_rollups WHERE group_by != ''")
    op.execute(
        "DELETE FROM alerts WHERE regression_id IN "
        "(SELECT id FROM regressions WHERE group_by != '')"
    )
    op.execute("DELETE FROM regressions WHERE group_by != ''")
    for table, key in (("chart_rollups", _CHART_KEY), ("regressions", _REGRESSION_KEY)):
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"uq_{table}_{key[0]}", type_="unique")
            batch.create_unique_constraint(f"uq_{table}_{key[0]}", list(key))
            batch.drop_column("group_value")
            batch.drop_column("group_by")
            if table == "regressions":
                batch.drop_column("canary")
    op.drop_index("ix_group_rollups_bucket", table_name="group_rollups")
    op.drop_table("group_rollups")
