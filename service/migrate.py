"""Running Alembic from code: `cachewatch migrate`, `cachewatch serve` and tests."""

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def migrations_home() -> Path:
    """Where alembic.ini and migrations/ are: beside the package in a checkout or an
    editable install; in the working directory when the package is installed into
    site-packages (the Docker image runs from /app); or CACHEWATCH_MIGRATIONS_HOME."""
    candidates = [os.environ.get("CACHEWATCH_MIGRATIONS_HOME"), PROJECT_ROOT, Path.cwd()]
    for candidate in candidates:
        if candidate and (Path(candidate) / "migrations" / "env.py").exists():
            return Path(candidate)
    raise FileNotFoundError(
        "cannot find alembic.ini and migrations/: run from the project folder or set "
        "CACHEWATCH_MIGRATIONS_HOME"
    )


def alembic_config() -> Config:
    home = migrations_home()
    config = Config(str(home / "alembic.ini"))
    config.set_main_option("script_location", str(home / "migrations"))
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
