"""Two ways to talk to ClickHouse, one interface: `command`, `query` (a Polars
frame back) and `insert` (a Polars frame in).

- `chdb:///path/to/dir[?database=name]`: the ClickHouse engine in-process (PyPI
  `chdb`), its data under the directory. For one machine, the demo and the tests.
  chdb allows one data directory per process; several clients of one process share
  it, each in its own database.
- `http://[user[:password]@]host:8123[/database]` (or `https://`): a server, over
  its HTTP interface (https://clickhouse.com/docs/interfaces/http) with httpx.
  Inserts ask for `async_insert=1, wait_for_async_insert=1` where the server has
  them (21.11 and newer): the server batches small inserts itself and answers only
  once the rows are written, so an accepted batch is durable when the answer comes.
  Older servers (Debian's 18.16) insert synchronously, which is durable too.

Formats: frames come back as Arrow from chdb and servers 23 and newer, and as
JSONEachRow from older ones (64-bit integers unquoted); inserts go as Arrow to
chdb and as TabSeparated to servers (`tab_separated`: every version reads it,
async inserts take it, and 18.16 parses it faster than JSONEachRow). Only chdb and
Debian's 18.16 are tested; the Arrow and async-insert requests to a current server
are written from ClickHouse's documentation.
"""

from __future__ import annotations

import atexit
import io
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import polars as pl

from service.tab_separated import tab_separated

#: An insert is answered once the server has written it (module docstring).
ASYNC_INSERT = {"async_insert": 1, "wait_for_async_insert": 1}
#: Frames come back as Arrow from this server version on (strings as strings, not
#: binary: that setting is 23's), as JSONEachRow before.
ARROW_FROM = (23,)


#: Current servers refuse an insert whose rows fall in more than 100 partitions (days
#: here): replayed history, or a pass deriving a year's late records, does. Lifted
#: on every statement of the servers that have the setting (18.16 has no limit).
UNLIMITED_PARTITIONS = "max_partitions_per_insert_block"


class ClickHouseError(RuntimeError):
    """The server refused a statement (its message attached)."""


class ClickHouseUnavailable(ClickHouseError):
    """The server is not serving: unreachable, gone mid-answer, too slow, or an
    answer of 502, 503 or 504 (a proxy's, or ClickHouse's own for a socket timeout).
    The API answers 503 with Retry-After (service.api.errors): retried later, the
    statement may succeed. A 500 is ClickHouse's answer to a statement it failed
    (18.16 gives it for a syntax error too): not this. `reason` is short and names
    no host, for answers anyone may read (/healthz)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class ClickHouse(Protocol):
    database: str

    def command(self, sql: str) -> None: ...

    def query(self, sql: str, schema: Mapping[str, pl.DataType] | None = None) -> pl.DataFrame: ...

    def query_in(
        self, sql: str, values: Sequence[str], schema: Mapping[str, pl.DataType]
    ) -> pl.DataFrame:
        """`query` of `sql` whose `{values}` stands for the set of strings `values`
        (`x IN {values}`): a server gets them as external data, not as literals
        in the statement (`HttpClient.query_in`)."""
        ...

    def insert(self, table: str, frame: pl.DataFrame) -> None: ...

    def version(self) -> tuple[int, ...]: ...

    def close(self) -> None: ...


def connect(url: str, cluster: str | None = None) -> ClickHouse:
    """A client for `url` (see the module docstring for the two forms); `cluster`:
    the server's tables are Distributed over that cluster (docs/deployment.md,
    "Sharding"), so its inserts are synchronous (`HttpClient._statement_settings`)."""
    parts = urlsplit(url)
    if cluster and parts.scheme == "chdb":
        raise ValueError("chdb is one process on one machine: it has no cluster")
    if parts.scheme == "chdb":
        database = parse_qs(parts.query).get("database", ["cachewatch"])[0]
        return ChdbClient(Path(unquote(parts.path) or "./cachewatch-clickhouse"), database)
    if parts.scheme in ("http", "https"):
        database = parts.path.strip("/") or "default"
        base = f"{parts.scheme}://{parts.hostname}:{parts.port or 8123}/"
        auth = (unquote(parts.username), unquote(parts.password or "")) if parts.username else None
        return HttpClient(base, database, auth, cluster=cluster)
    raise ValueError(f"a ClickHouse URL is chdb:///dir or http(s)://host[:port]/db, not {url!r}")


def _with_schema(frame: pl.DataFrame, schema: Mapping[str, pl.DataType] | None) -> pl.DataFrame:
    if schema is None:
        return frame
    if frame.width == 0:
        return pl.DataFrame(schema=dict(schema))
    return frame.cast({k: v for k, v in schema.items() if k in frame.columns})


#: Every open chdb client of the process: closed at exit, before chdb's own
#: shutdown, which crashes (SIGSEGV) with a connection still open.
_OPEN: weakref.WeakSet[ChdbClient] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for client in list(_OPEN):
        client.close()


class ChdbDirectoryBusy(RuntimeError):
    """Another process holds chdb's data directory. chdb is the ClickHouse server
    inside the process, and like a server it locks its directory (an exclusive
    `flock` on `status`, which names the holder's PID): a second process cannot
    open it. chdb itself then raises a bare "Error initializing EmbeddedServer" and
    prints the real cause on stderr, so the holder is looked up here first and the
    commands can say in one line what to do instead."""

    def __init__(self, path: Path, pid: int) -> None:
        holder = f"process {pid}" if pid else "another process"
        super().__init__(
            f"chdb runs in one process only: its directory {path} is held by {holder}. "
            "`cachewatch serve` runs the worker's jobs (analytics, detection, alerts, "
            "retention) in-process and migrates at start, so no other cachewatch "
            "command can open it meanwhile; stop it first, or use a ClickHouse server "
            "(CACHEWATCH_CLICKHOUSE_URL=http://host:8123/db) to run several processes"
        )
        self.path, self.pid = path, pid

    @staticmethod
    def holder_of(path: Path) -> int | None:
        """The PID of another process holding the directory (0 when its status file
        does not say), or None when it is free or held by this very process (whose
        clients share it)."""
        import fcntl
        import os

        try:
            fd = os.open(path / "status", os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            status = os.read(fd, 4096).decode(errors="replace")
        finally:
            os.close(fd)
        pid = next((int(w) for w in status.split()[1:2] if w.isdigit()), 0)
        return None if pid == os.getpid() else pid


class ChdbClient:
    """The in-process engine. One connection per client, used by one thread at a
    time (chdb connections are not thread-safe; the API answers on a thread pool).
    One process only: ChdbDirectoryBusy when another one holds the directory."""

    def __init__(self, path: Path, database: str) -> None:
        import chdb

        self.database = database
        self._lock = threading.Lock()
        holder = ChdbDirectoryBusy.holder_of(path)
        if holder is not None:
            raise ChdbDirectoryBusy(path, holder)
        try:
            self._conn = chdb.connect(str(path))
        except RuntimeError:
            # Taken between the look and the connect.
            holder = ChdbDirectoryBusy.holder_of(path)
            if holder is None:
                raise
            raise ChdbDirectoryBusy(path, holder) from None
        _OPEN.add(self)
        self._conn.query(f"CREATE DATABASE IF NOT EXISTS {database}")
        self._conn.query(f"USE {database}")
        self._conn.query(f"SET {UNLIMITED_PARTITIONS} = 0")

    def command(self, sql: str) -> None:
        with self._lock:
            self._conn.query(sql)

    def query(self, sql: str, schema: Mapping[str, pl.DataType] | None = None) -> pl.DataFrame:
        with self._lock:
            result = self._conn.query(sql, "ArrowStream")
        data = result.bytes()
        frame = pl.read_ipc_stream(io.BytesIO(data)) if data else pl.DataFrame()
        return _with_schema(frame, schema)

    def query_in(
        self, sql: str, values: Sequence[str], schema: Mapping[str, pl.DataType]
    ) -> pl.DataFrame:
        """In-process, the set goes as literals: there is no statement to send."""
        return self.query(sql.replace("{values}", _literal_set(values)), schema)

    def insert(self, table: str, frame: pl.DataFrame) -> None:
        if frame.is_empty():
            return
        arrow = frame.to_arrow()  # noqa: F841 - read by name by chdb's Python() table
        columns = ", ".join(frame.columns)
        with self._lock:
            self._conn.query(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM Python(arrow)")

    def version(self) -> tuple[int, ...]:
        return _version_of(self.query("SELECT version() AS v")["v"][0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        _OPEN.discard(self)


#: Answers of a server (or a proxy before it) that is not serving now.
_NOT_SERVING = frozenset({502, 503, 504})
#: ClickHouse's codes for a server it could not reach (a shard of a Distributed
#: table down): NETWORK_ERROR, SOCKET_TIMEOUT, ALL_CONNECTION_TRIES_FAILED.
_UNREACHABLE_CODES = ("Code: 210,", "Code: 209,", "Code: 279,")


def _unreachable_shard(response: httpx.Response) -> bool:
    """A 500 that says a shard could not be reached: the cluster is not serving
    (a retry stores what the live shards did not; their rows are duplicates)."""
    return response.status_code == 500 and response.text.startswith(_UNREACHABLE_CODES)


@dataclass
class HttpClient:
    """A ClickHouse server over HTTP. Thread-safe (httpx.Client is)."""

    base_url: str
    database: str
    auth: tuple[str, str] | None = None
    timeout_s: float = 300.0
    cluster: str | None = None
    #: On a cluster, every shard's URL (`migrate.shard_urls`): what is done shard by
    #: shard (the migrations, retention's partition drops) goes there.
    shard_urls: tuple[str, ...] = ()
    _client: httpx.Client = field(init=False)
    _version: tuple[int, ...] | None = field(init=False, default=None)
    _settings: dict[str, Any] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._client = httpx.Client(base_url=self.base_url, auth=self.auth, timeout=self.timeout_s)
        self._post("CREATE DATABASE IF NOT EXISTS " + self.database, database="default")

    def _post(self, sql: str, body: bytes | None = None, files: Any = None, **params: Any) -> bytes:
        query = {"database": self.database, **params}
        try:
            if files is not None:
                response = self._client.post("/", params={**query, "query": sql}, files=files)
            elif body is None:
                response = self._client.post("/", params=query, content=sql.encode())
            else:
                response = self._client.post("/", params={**query, "query": sql}, content=body)
        except httpx.TransportError as exc:  # refused, reset, timed out, gone mid-answer
            raise ClickHouseUnavailable(type(exc).__name__, str(exc)) from exc
        if response.status_code in _NOT_SERVING or _unreachable_shard(response):
            raise ClickHouseUnavailable(f"HTTP {response.status_code}", response.text[:2000])
        if response.status_code != 200:
            raise ClickHouseError(response.text.strip()[:2000])
        return response.content

    def version(self) -> tuple[int, ...]:
        if self._version is None:
            self._version = _version_of(self._post("SELECT version()").decode().strip())
        return self._version

    def command(self, sql: str) -> None:
        self._post(sql, **self._statement_settings())

    def _statement_settings(self) -> dict[str, Any]:
        """`UNLIMITED_PARTITIONS` where the server knows it; on a cluster,
        `insert_distributed_sync`: an insert into a Distributed table (and an
        INSERT ... SELECT, the pass's) answers once every shard has written its
        rows, not once they are queued on this server for a later send, so a 200
        stays durable and the pass's next statement reads what it wrote."""
        if self._settings is None:
            known = self._post(
                f"SELECT count() FROM system.settings WHERE name = '{UNLIMITED_PARTITIONS}'"
            )
            self._settings = {UNLIMITED_PARTITIONS: 0} if known.strip() == b"1" else {}
            if self.cluster:
                self._settings["insert_distributed_sync"] = 1
        return self._settings

    def query(self, sql: str, schema: Mapping[str, pl.DataType] | None = None) -> pl.DataFrame:
        if self.version() >= ARROW_FROM:
            data = self._post(sql + " FORMAT ArrowStream", output_format_arrow_string_as_string=1)
            frame = pl.read_ipc_stream(io.BytesIO(data)) if data else pl.DataFrame()
            return _with_schema(frame, schema)
        if schema is not None and (as_csv := self._query_csv(sql, schema)) is not None:
            return as_csv
        data = self._post(sql + " FORMAT JSONEachRow", output_format_json_quote_64bit_integers=0)
        if not data.strip():
            return pl.DataFrame(schema=dict(schema) if schema else None)
        return _with_schema(pl.read_ndjson(io.BytesIO(data), infer_schema_length=None), schema)

    def _query_csv(self, sql: str, schema: Mapping[str, pl.DataType]) -> pl.DataFrame | None:
        """The answer as CSV, parsed with `schema`'s types, when they are all flat
        (polars reads no list from CSV) and name every column (None otherwise: CSV
        says no types, and inferring them would read a string of digits as a
        number). Polars parses CSV on every core: in a profile of the pass, whose
        answer is a row per record, 0.26 s against 1.8 s of JSON lines for 200,000."""
        if any(dtype.is_nested() for dtype in schema.values()):
            return None
        return _read_csv(self._post(sql + " FORMAT CSVWithNames"), schema)

    def query_in(
        self, sql: str, values: Sequence[str], schema: Mapping[str, pl.DataType]
    ) -> pl.DataFrame:
        """The set as a table of external data (ClickHouse's "External Data for
        Query Processing"), sent with the query, not parsed from it: a duplicate
        check of 1,000 ids took 2.6 ms against 7.9 ms as literals on 18.16 (a
        scratch timing). The
        primary key reads it as it reads a literal set; on a cluster the table
        goes to every shard with the query. Answered as CSV (`_query_csv`'s rules:
        a flat `schema` naming every column)."""
        if any(dtype.is_nested() for dtype in schema.values()):
            raise TypeError("query_in answers flat columns only")
        rows = tab_separated(pl.DataFrame({"value": list(values)}, schema={"value": pl.String}))
        table: dict[str, Any] = {
            f"{_EXTERNAL}_structure": "value String",
            f"{_EXTERNAL}_format": "TabSeparated",
        }
        sql = sql.replace("{values}", _EXTERNAL) + " FORMAT CSVWithNames"
        data = self._post(sql, files={_EXTERNAL: ("values.tsv", rows)}, **table)
        frame = _read_csv(data, schema)
        if frame is None:
            raise ClickHouseError(f"query_in: the answer has columns {schema} does not name")
        return frame

    def insert(self, table: str, frame: pl.DataFrame) -> None:
        if frame.is_empty():
            return
        settings = ASYNC_INSERT if self.version() >= (21, 11) else {}
        settings = {**settings, **self._statement_settings()}
        columns = ", ".join(frame.columns)
        body = tab_separated(frame)
        self._post(f"INSERT INTO {table} ({columns}) FORMAT TabSeparated", body=body, **settings)

    def close(self) -> None:
        self._client.close()


#: The name of `query_in`'s table of external data.
_EXTERNAL = "_cw_values"


def _read_csv(data: bytes, schema: Mapping[str, pl.DataType]) -> pl.DataFrame | None:
    """A CSVWithNames answer parsed with `schema`'s types (None when the header
    names a column `schema` does not: CSV says no types)."""
    header = data.split(b"\n", 1)[0].decode()
    names = [n.strip('"') for n in header.split(",")] if header else []
    if not names or any(n not in schema for n in names):
        return None if names else pl.DataFrame(schema=dict(schema))
    return pl.read_csv(io.BytesIO(data), schema={n: schema[n] for n in names}, null_values=["\\N"])


def quote(text: str) -> str:
    """A ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _literal_set(values: Sequence[str]) -> str:
    """`values` as a ClickHouse set of string literals."""
    return "(" + ", ".join(quote(v) for v in values) + ")"


def _version_of(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.strip().strip('"').split(".") if p.isdigit())
