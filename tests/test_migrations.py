"""Every migration upgrades and downgrades cleanly, and head matches the models."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from service import migrate
from service.models import Base


def test_head_matches_the_models(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_downgrade_to_base_and_upgrade_again(tmp_path, database_url: str) -> None:  # type: ignore[no-untyped-def]
    from service.db import make_engine
    from service.settings import Settings
    from tests.conftest import drop_database, fresh_database_url

    url = fresh_database_url(tmp_path, "migrations")
    engine = make_engine(Settings(database_url=url))
    try:
        migrate.upgrade(engine)
        assert "usage_records" in inspect(engine).get_table_names()
        migrate.downgrade(engine, "base")
        assert "usage_records" not in inspect(engine).get_table_names()
        migrate.upgrade(engine)
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
        drop_database(url)
