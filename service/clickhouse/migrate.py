"""The ClickHouse tables' migrations: `service/clickhouse/migrations/*.sql`, applied in
the order of their date-and-slug names, each once, recorded in `schema_migrations`.

Alembic keeps the relational schema; it has no ClickHouse dialect of its own, so
the ClickHouse side is plain SQL files in the layout Langfuse and Helicone use for
theirs (one file per change, never edited once released). Each statement is
written to be re-runnable (`IF NOT EXISTS`), so a migration interrupted halfway is
completed by the next run.
"""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl

from service.clickhouse.client import ClickHouse
from service.clickhouse.records import quote

# Package data beside this module, so an installed wheel (the Docker image, a pip
# install) carries them; a path into the source tree would not exist there.
MIGRATIONS = Path(__file__).resolve().parent / "migrations"

_LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    name String, applied_us Int64
) ENGINE = MergeTree ORDER BY name"""


def statements(path: Path) -> list[str]:
    """The statements of one migration file: `;`-terminated, `--` comments dropped."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def applied(ch: ClickHouse) -> set[str]:
    ch.command(_LEDGER)
    frame = ch.query("SELECT name FROM schema_migrations", {"name": pl.String()})
    return set(frame["name"].to_list())


def upgrade(ch: ClickHouse, directory: Path = MIGRATIONS) -> list[str]:
    """Apply the migrations not applied yet; returns their names."""
    done = applied(ch)
    ran = []
    for path in sorted(directory.glob("*.sql")):
        if path.stem in done:
            continue
        for statement in statements(path):
            ch.command(statement)
        ch.command(
            "INSERT INTO schema_migrations (name, applied_us) "
            f"VALUES ({quote(path.stem)}, {time.time_ns() // 1000})"
        )
        ran.append(path.stem)
    return ran
