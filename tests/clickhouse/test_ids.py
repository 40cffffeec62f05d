"""Record ids of a ClickHouse deployment never collide between processes (issue 33,
defect 3): each process leases its salt from the relational database (SQLite, or
PostgreSQL under CACHEWATCH_TEST_DATABASE_URL), and a salt's successive holders
make ids in successive milliseconds (service.clickhouse.ids)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.queues
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from service import migrate
from service.api.app import create_app
from service.clickhouse.ids import LEASES, IdSource, SaltLease, SaltsExhausted
from service.db import make_engine
from service.settings import Settings
from tests.conftest import drop_database, fresh_database_url

LEASE_US = 600 * 1_000_000
T0 = 1_800_000_000 * 1_000_000  # 2027-01-15


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    """A new database of the backend under test, migrated: its URL."""
    url = fresh_database_url(tmp_path, "salts")
    engine = make_engine(Settings(database_url=url))
    migrate.upgrade(engine)
    engine.dispose()
    yield url
    drop_database(url)


@pytest.fixture
def engine(database: str) -> Iterator[Engine]:
    engine = make_engine(Settings(database_url=database))
    yield engine
    engine.dispose()


class Clock:
    """A fake clock, in microseconds."""

    def __init__(self, now_us: int = T0) -> None:
        self.now_us = now_us

    def __call__(self) -> int:
        return self.now_us


def source(engine: Engine, clock: Clock, **lease: int) -> IdSource:
    return IdSource(SaltLease(engine, clock=clock, **lease), renew_s=None)


def salt_of(ids: np.ndarray) -> set[int]:
    return set(((ids >> 12) & 1023).tolist())


def ms_of(ids: np.ndarray) -> np.ndarray:
    return ids >> 22


def _take_in_process(url: str, start_at: float, n: int) -> list[int]:
    """A process of its own: its ids, taken after `start_at` (all race then)."""
    engine = make_engine(Settings(database_url=url))
    ids = IdSource(SaltLease(engine), renew_s=None)
    time.sleep(max(0.0, start_at - time.time()))
    out = ids.take(n).tolist()
    engine.dispose()
    return out


def test_processes_and_threads_never_share_a_salt(database: str, engine: Engine) -> None:
    """Eight processes and eight threads claim at once, then take ids in the same
    milliseconds: sixteen salts, no id twice."""
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0
    n = 5000
    with context.Pool(8) as pool:
        pending = pool.starmap_async(_take_in_process, [(database, start_at, n)] * 8)
        taken: list[np.ndarray] = []
        sources = [IdSource(SaltLease(engine), renew_s=None) for _ in range(8)]

        def take(ids: IdSource) -> None:
            time.sleep(max(0.0, start_at - time.time()))
            taken.append(ids.take(n))

        threads = [threading.Thread(target=take, args=(s,)) for s in sources]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        taken += [np.array(ids) for ids in pending.get(60)]
    salts = [salt_of(ids) for ids in taken]
    assert all(len(s) == 1 for s in salts)
    assert sorted(s.pop() for s in salts) == list(range(16))
    every = np.concatenate(taken)
    assert len(np.unique(every)) == 16 * n
    with engine.connect() as conn:
        assert len(conn.execute(select(LEASES.c.salt)).all()) == 16


def test_a_lapsed_lease_is_taken_over_in_later_milliseconds(engine: Engine) -> None:
    """A's lease lapses (no renewal for 10 minutes) and C takes its salt: A, whose
    clock may be behind, keeps below the expiry it wrote, C starts there; A learns
    at its next renewal and takes another salt, its ids still increasing."""
    clock = Clock()
    a, b = source(engine, clock), source(engine, clock)
    first_a, first_b = a.take(3), b.take(3)
    assert (salt_of(first_a), salt_of(first_b)) == ({0}, {1})
    clock.now_us += LEASE_US + 1_000_000
    c = source(engine, clock)
    taken_by_c = c.take(5, now_us=T0)  # C's clock is 10 minutes behind
    assert salt_of(taken_by_c) == {0}
    assert ms_of(taken_by_c).min() == (T0 + LEASE_US) // 1000
    late_a = a.take(5, now_us=T0 + LEASE_US - 2000)  # A's clock is behind
    assert salt_of(late_a) == {0}
    assert ms_of(late_a).max() < ms_of(taken_by_c).min()
    moved_a = a.take(5)  # its lease has ended: the renewal finds it taken
    assert salt_of(moved_a) == {1}  # B's lapsed too
    assert moved_a.min() > late_a.max()
    every = np.concatenate([first_a, first_b, taken_by_c, late_a, moved_a])
    assert len(np.unique(every)) == len(every)


def test_a_renewed_lease_is_kept(engine: Engine) -> None:
    clock = Clock()
    a = source(engine, clock)
    assert salt_of(a.take(1)) == {0}
    clock.now_us += LEASE_US // 2
    a.renew_now()
    clock.now_us += LEASE_US // 2 + 1_000_000  # past the first lease, within the second
    assert salt_of(source(engine, clock).take(1)) == {1}
    assert salt_of(a.take(1)) == {0}


def test_the_renewal_thread_keeps_the_lease(engine: Engine) -> None:
    clock = Clock()
    a = IdSource(SaltLease(engine, clock=clock), renew_s=0.02)
    a.take(1)
    expiries = select(LEASES.c.expires_us)
    clock.now_us += LEASE_US // 2
    deadline = time.monotonic() + 10
    while True:  # each look a short transaction: on SQLite it takes the write lock
        with engine.connect() as conn:
            if conn.execute(expiries).scalar_one() == clock.now_us + LEASE_US:
                break
        assert time.monotonic() < deadline, "not renewed"
        time.sleep(0.1)
    a.release()


def test_a_take_at_the_end_of_its_lease_renews_it(engine: Engine) -> None:
    clock = Clock()
    a = source(engine, clock)
    a.take(1)
    clock.now_us += LEASE_US
    assert salt_of(a.take(1)) == {0}
    clock.now_us += LEASE_US - 1_000_000
    assert salt_of(source(engine, clock).take(1)) == {1}


def test_a_released_salt_is_taken_from_the_next_millisecond(engine: Engine) -> None:
    clock = Clock()
    a = source(engine, clock)
    last = a.take(10_000)  # three milliseconds' worth
    a.release()
    b = source(engine, clock)
    taken = b.take(1)
    assert salt_of(taken) == {0}
    assert ms_of(taken)[0] == ms_of(last).max() + 1


def test_salts_run_out_rather_than_repeat(engine: Engine) -> None:
    clock = Clock()
    for salt in range(3):
        assert salt_of(source(engine, clock, salts=3).take(1)) == {salt}
    with pytest.raises(SaltsExhausted):
        source(engine, clock, salts=3).take(1)
    clock.now_us += LEASE_US
    assert salt_of(source(engine, clock, salts=3).take(1)) == {0}


def _child_salt(ids: IdSource, out: multiprocessing.queues.Queue[int]) -> None:
    out.put(int(ids.take(1)[0] >> 12) & 1023)


def test_a_forked_child_claims_its_own_salt(engine: Engine) -> None:
    ids = IdSource(SaltLease(engine), renew_s=None)
    assert salt_of(ids.take(1)) == {0}
    context = multiprocessing.get_context("fork")
    out: multiprocessing.queues.Queue[int] = context.Queue()
    child = context.Process(target=_child_salt, args=(ids, out))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert out.get(timeout=5) == 1
    assert salt_of(ids.take(1)) == {0}


def test_the_api_claims_at_startup_and_releases_at_shutdown(
    database: str, engine: Engine, settings: Settings, chdb_url: str
) -> None:
    app = create_app(
        settings.model_copy(update={"database_url": database, "clickhouse_url": chdb_url})
    )
    holders = select(LEASES.c.salt, LEASES.c.holder)
    with TestClient(app):
        with engine.connect() as conn:
            [(salt, holder)] = conn.execute(holders).all()
        assert salt == 0 and holder
    with engine.connect() as conn:
        assert conn.execute(holders).all() == [(0, "")]
