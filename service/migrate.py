"""Running Alembic from code: `cachewatch migrate`, `cachewatch serve` and tests.

The migrations (`migrations/` in the checkout) are package data: `service/migrations`
links to them, and a wheel copies them there, so they are found beside this module
wherever the package is installed: a wheel in site-packages (the Docker image, a
pip install) runs them from any working directory, with no alembic.ini around.
The project's alembic.ini is for developers' `alembic revision` only.
"""

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

SCRIPT_LOCATION = Path(__file__).resolve().parent / "migrations"


def alembic_config() -> Config:
    """A file-less configuration: upgrading needs only the script location, and
    the logging setup of an ini file would replace the command's own."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.set_main_option("path_separator", "os")
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
