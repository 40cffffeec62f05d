"""An httpx transport that watches the SDK's calls on their way through.

Both SDKs (`openai`, `anthropic`) send every call through one `httpx.Client` (or
`AsyncClient`; current releases use its successor `httpx2`, same interface).
`instrument()` wraps that client's transport in `Tap`, so every
way of calling is seen the same way: `create()` streamed or not, the `.stream()`
helpers, `with_raw_response`, the SDK's own retries (each attempt passes here;
only the one answered 200 is recorded).

For a call to a recorded API (`replies.api_of`) the tap keeps the request's body
bytes, exactly as the SDK serialised them, notes the time and the labels in
force, and wraps the answer's byte stream: the time of its first chunk is the
time to first token (streamed answers; a whole answer's first byte comes with the
last, so it gets only a latency), and its bytes are kept (a whole answer) or
scanned for the usage events (a stream). When the SDK closes the answer, the call
goes to the shipper's queue. Nothing here parses JSON or fingerprints, and every
fault is caught and counted: the application's call sees the answer's bytes
unchanged, at the time it would have.

One change to the request: `Accept-Encoding` asks only for what the standard
library decodes (gzip, deflate), in case brotli or zstandard is installed.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .calls import Call
from .context import Labels, current
from .replies import ENCODINGS, Decoder, SseUsage, api_of
from .shipper import Shipper


@dataclass
class Tap:
    """What an instrumented client records with: where to, its own labels (over
    those of the `session()` block in force) and the settings' (under them)."""

    shipper: Shipper
    service: str
    block_size: int
    labels: Labels = field(default_factory=Labels)
    defaults: Labels = field(default_factory=Labels)

    def start(self, request: Any) -> _Watch | None:
        """A watch over `request` when it calls a recorded API, else None."""
        try:
            api = api_of(request.method, request.url.path)
            if api is None:
                return None
            if "accept-encoding" in request.headers:
                request.headers["Accept-Encoding"] = ENCODINGS
            call = Call(
                request=request.content,
                started=time.time(),
                labels=self.labels.over(current()).over(self.defaults),
                service=self.service,
                block_size=self.block_size,
                api=api,
            )
            return _Watch(self.shipper, call)
        except Exception:
            self.shipper.count(errors=1)
            return None

    def answered(self, watch: _Watch | None, response: Any) -> bool:
        """Whether to watch the answer's stream: the call succeeded."""
        if watch is None or response.status_code != 200:
            return False
        try:
            watch.begin(response)
            return True
        except Exception:
            watch.shipper.count(errors=1)
            return False


class _Watch:
    """One call's answer, chunk by chunk (module docstring)."""

    def __init__(self, shipper: Shipper, call: Call) -> None:
        self.shipper = shipper
        self.call = call
        self._decoder = Decoder("")
        self._sse: SseUsage | None = None
        self._body: list[bytes] = []
        self._done = False

    def begin(self, response: Any) -> None:
        self._decoder = Decoder(response.headers.get("content-encoding", ""))
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            self._sse = SseUsage()

    def chunk(self, raw: bytes) -> None:
        try:
            if self.call.first_token is None:
                self.call.first_token = time.time()
            data = self._decoder.decode(raw)
            if self._sse is not None:
                self._sse.feed(data)
            else:
                self._body.append(data)
        except Exception:
            self._decoder.failed = True

    def whole(self, content: bytes) -> None:
        """An answer whose bytes were all read, and decoded, before the tap saw it."""
        self._decoder = Decoder("")
        self.chunk(content)
        self.close()

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._finish()
        except Exception:
            self.shipper.count(errors=1)

    def _finish(self) -> None:
        call = self.call
        call.finished = time.time()
        if self._decoder.failed:
            self.shipper.count(skipped=1)
            return
        if self._sse is not None:
            self._sse.close()
            call.events = self._sse.events
        else:
            call.body = b"".join(self._body)
            call.first_token = None  # a whole answer: its first byte came with its last
        self.shipper.submit(call)


class _WatchedStream:
    """The answer's byte stream, seen chunk by chunk (a sync stream class of the
    client's httpx module is derived from it by `tap_classes`)."""

    def __init__(self, inner: Any, watch: _Watch) -> None:
        self._inner = inner
        self._watch = watch

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._watch.chunk(chunk)
            yield chunk

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._watch.close()


class _AsyncWatchedStream:
    def __init__(self, inner: Any, watch: _Watch) -> None:
        self._inner = inner
        self._watch = watch

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._watch.chunk(chunk)
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._watch.close()


class _TapTransport:
    """A sync transport that lets `tap` watch the calls through `inner`."""

    stream_class: Any = None

    def __init__(self, inner: Any, tap: Tap) -> None:
        self.inner = inner
        self.tap = tap

    def handle_request(self, request: Any) -> Any:
        watch = self.tap.start(request)
        response = self.inner.handle_request(request)
        if watch is not None and self.tap.answered(watch, response):
            _follow(response, watch, self.stream_class)
        return response

    def close(self) -> None:
        self.inner.close()


class _AsyncTapTransport:
    """The same for an async client."""

    stream_class: Any = None

    def __init__(self, inner: Any, tap: Tap) -> None:
        self.inner = inner
        self.tap = tap

    async def handle_async_request(self, request: Any) -> Any:
        watch = self.tap.start(request)
        response = await self.inner.handle_async_request(request)
        if watch is not None and self.tap.answered(watch, response):
            _follow(response, watch, self.stream_class)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _follow(response: Any, watch: _Watch, stream_class: Any) -> None:
    """Watch the answer's bytes as the SDK reads them; an answer read already (a
    stub's `Response(content=...)` or `json=`, decoded by httpx) is taken whole."""
    content = getattr(response, "_content", None)
    if isinstance(content, bytes):
        watch.whole(content)
    else:
        response.stream = stream_class(response.stream, watch)


@dataclass(frozen=True)
class TapClasses:
    sync: type[_TapTransport]
    async_: type[_AsyncTapTransport]


@functools.cache
def tap_classes(module: ModuleType) -> TapClasses:
    """The tap transports for one httpx module: `httpx`, or `httpx2`, which current
    SDKs use. Its clients check that transports and streams are its own classes,
    so ours derive from them."""
    stream = type("WatchedStream", (_WatchedStream, module.SyncByteStream), {})
    async_stream = type("AsyncWatchedStream", (_AsyncWatchedStream, module.AsyncByteStream), {})
    sync = type("TapTransport", (_TapTransport, module.BaseTransport), {"stream_class": stream})
    async_ = type(
        "AsyncTapTransport",
        (_AsyncTapTransport, module.AsyncBaseTransport),
        {"stream_class": async_stream},
    )
    return TapClasses(sync, async_)


def is_tap(transport: Any) -> bool:
    return isinstance(transport, _TapTransport | _AsyncTapTransport)
