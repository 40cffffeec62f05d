"""Writing records as NDJSON, and posting them to a cachewatch server in
batches the way a log shipper does (retrying 503/429 after Retry-After, and
connection errors with exponential backoff). Retrying is safe: the server
deduplicates on `request_id` and events on their content."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

import httpx
import orjson

from cachewatch_client.shipper import retry_after_s

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
MAX_BODY_BYTES = 8 * 1024 * 1024  # under the server's 10 MiB default limit


class PostError(RuntimeError):
    """A batch that the server refused for good, or that never got through."""


@dataclass
class PostStats:
    batches: int = 0
    records: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    retries: int = 0

    def add(self, other: PostStats) -> None:
        """Count `other`'s posts in these (several runs of `post_records`)."""
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def write_ndjson(records: Iterable[dict[str, Any]], out: str | Path | IO[bytes]) -> int:
    """Write one JSON object per line; returns the count. Streams: bounded memory."""
    if isinstance(out, str | Path):
        with Path(out).open("wb") as handle:
            return write_ndjson(records, handle)
    count = 0
    dumps = orjson.dumps
    option = orjson.OPT_APPEND_NEWLINE
    buffer: list[bytes] = []
    for record in records:
        buffer.append(dumps(record, option=option))
        count += 1
        if len(buffer) >= 4096:
            out.write(b"".join(buffer))
            buffer.clear()
    out.write(b"".join(buffer))
    return count


def write_events(events: list[dict[str, Any]], path: str | Path) -> None:
    """Events as one JSON array: the body `POST /v1/events` accepts as is."""
    Path(path).write_bytes(orjson.dumps(events, option=orjson.OPT_INDENT_2) + b"\n")


def ndjson_batches(
    records: Iterable[dict[str, Any]], batch_size: int, max_bytes: int = MAX_BODY_BYTES
) -> Iterator[tuple[int, bytes]]:
    """(record count, NDJSON body) batches of at most `batch_size` records and
    about `max_bytes` bytes (a single larger record still goes alone)."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    lines: list[bytes] = []
    size = 0
    for record in records:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        if lines and (len(lines) >= batch_size or size + len(line) > max_bytes):
            yield len(lines), b"".join(lines)
            lines, size = [], 0
        lines.append(line)
        size += len(line)
    if lines:
        yield len(lines), b"".join(lines)


@dataclass
class _Sender:
    client: httpx.Client
    headers: dict[str, str]
    max_attempts: int
    max_wait_s: float
    backoff_s: float
    sleep: Callable[[float], None]
    stats: PostStats

    def send(self, url: str, body: bytes) -> httpx.Response:
        """POST until a non-retryable answer; returns the 2xx response."""
        attempt = 0
        while True:
            attempt += 1
            wait: float | None
            try:
                response = self.client.post(url, content=body, headers=self.headers)
            except httpx.TransportError as exc:
                # Connection refused/reset, timeouts: the server may be restarting.
                problem = f"{type(exc).__name__}: {exc}"
                wait = None
            else:
                if response.is_success:
                    return response
                problem = f"HTTP {response.status_code}: {response.text[:500]}"
                if response.status_code not in RETRYABLE_STATUS:
                    raise PostError(f"{url} refused the batch: {problem}")
                wait = retry_after_s(response.headers.get("Retry-After"))
            if attempt >= self.max_attempts:
                raise PostError(f"{url}: gave up after {attempt} attempts ({problem})")
            if wait is None:
                wait = self.backoff_s * 2 ** (attempt - 1)
            self.stats.retries += 1
            self.sleep(min(wait, self.max_wait_s))


def _sender(
    token: str,
    client: httpx.Client | None,
    timeout_s: float,
    max_attempts: int,
    max_wait_s: float,
    backoff_s: float,
    sleep: Callable[[float], None],
    content_type: str,
) -> tuple[_Sender, httpx.Client | None]:
    owned = None
    if client is None:
        owned = client = httpx.Client(timeout=timeout_s)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
    sender = _Sender(client, headers, max_attempts, max_wait_s, backoff_s, sleep, PostStats())
    return sender, owned


def post_records(
    base_url: str,
    token: str,
    records: Iterable[dict[str, Any]],
    batch_size: int = 1000,
    *,
    client: httpx.Client | None = None,
    timeout_s: float = 60.0,
    max_attempts: int = 30,
    max_wait_s: float = 60.0,
    backoff_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> PostStats:
    """POST records to `{base_url}/v1/usage` as NDJSON batches, in order.

    503/429/502/504 are retried after Retry-After (else exponential backoff
    from `backoff_s`, capped at `max_wait_s`), as are connection errors; any
    other non-2xx answer raises PostError, as does exhausting `max_attempts`.
    """
    sender, owned = _sender(
        token, client, timeout_s, max_attempts, max_wait_s, backoff_s, sleep, "application/x-ndjson"
    )
    url = base_url.rstrip("/") + "/v1/usage"
    stats = sender.stats
    try:
        for count, body in ndjson_batches(records, batch_size):
            answer = sender.send(url, body).json()
            stats.batches += 1
            stats.records += count
            stats.accepted += int(answer.get("accepted", 0))
            stats.duplicates += int(answer.get("duplicates", 0))
            stats.rejected += int(answer.get("rejected", 0))
    finally:
        if owned is not None:
            owned.close()
    return stats


def post_events(
    base_url: str,
    token: str,
    events: list[dict[str, Any]],
    *,
    client: httpx.Client | None = None,
    timeout_s: float = 60.0,
    max_attempts: int = 30,
    max_wait_s: float = 60.0,
    backoff_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> PostStats:
    """POST change events to `{base_url}/v1/events` as one JSON array, with the
    same retries as `post_records`."""
    sender, owned = _sender(
        token, client, timeout_s, max_attempts, max_wait_s, backoff_s, sleep, "application/json"
    )
    stats = sender.stats
    try:
        if events:
            sender.send(base_url.rstrip("/") + "/v1/events", orjson.dumps(events))
            stats.batches = 1
            stats.records = stats.accepted = len(events)
    finally:
        if owned is not None:
            owned.close()
    return stats
