"""Running Alembic from code: `cachewatch migrate`, `cachewatch serve` and tests."""

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def alembic_config(engine: Engine | None = None) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.attributes["configure_logger"] = False
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
