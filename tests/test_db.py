"""service.db on SQLite: the identity adapters that make pysqlite bind None and
bytes without its adapter protocol must store exactly what was passed."""

from pathlib import Path

from sqlalchemy import text

from service.db import make_engine
from service.settings import Settings


def test_none_and_bytes_are_stored_as_null_and_blob_unchanged(tmp_path: Path) -> None:
    engine = make_engine(Settings(database_url=f"sqlite:///{tmp_path / 'binding.db'}"))
    blob = bytes(range(256)) * 2
    with engine.begin() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        driver.execute("CREATE TABLE t (a, b, c)")
        driver.executemany("INSERT INTO t VALUES (?, ?, ?)", [(None, blob, b""), (1, None, "x")])
        stored = conn.execute(
            text("SELECT typeof(a), a, typeof(b), b, typeof(c), c FROM t ORDER BY rowid")
        ).all()
    engine.dispose()
    assert [tuple(row) for row in stored] == [
        ("null", None, "blob", blob, "blob", b""),
        ("integer", 1, "null", None, "text", "x"),
    ]


def test_a_bytes_subclass_is_still_bound_as_a_blob(tmp_path: Path) -> None:
    """The adapter registry is keyed by exact type: a subclass takes pysqlite's
    usual buffer path and must not be turned into anything else."""

    class Digest(bytes):
        pass

    engine = make_engine(Settings(database_url=f"sqlite:///{tmp_path / 'subclass.db'}"))
    with engine.begin() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        driver.execute("CREATE TABLE t (a)")
        driver.execute("INSERT INTO t VALUES (?)", (Digest(b"\x00\xff"),))
        stored = conn.execute(text("SELECT typeof(a), a FROM t")).one()
    engine.dispose()
    assert tuple(stored) == ("blob", b"\x00\xff")
