"""Request bodies: bounded gunzip and detection of NDJSON, array or single object.

The shape is read from the body itself: some shippers label NDJSON as
`application/x-www-form-urlencoded`, so Content-Type is never trusted."""

import re
import zlib
from collections.abc import Callable, Collection, Generator, Iterator
from typing import Any

import orjson

from service.ingest.fast import FastRecord, decode_line

_GZIP_MAGIC = b"\x1f\x8b"
#: `Content-Encoding` values of a gzipped body, and of one sent as it is ("" is none);
#: any letter case, surrounding whitespace stripped. Anything else is refused (400).
GZIP_ENCODINGS = ("gzip", "x-gzip")
PLAIN_ENCODINGS = ("", "identity")
_WHITESPACE = b" \t\r\n"
_INFLATE_PIECE = 1 << 20


class BodyTooLarge(Exception):
    """The body, as sent or decompressed, is over its limit (answer 413)."""


class UndecodableBody(Exception):
    """The body cannot be decoded at all (answer 400, keep it as rejected)."""


_UNPARSED: Any = object()


class BodyItem:
    """One record position in the body: the decoded value, or why the line is not JSON.

    `raw` is the exact line for NDJSON; for arrays and single objects it is None and
    the value is re-serialized only if the record is rejected. `record` is set when
    the fast path decoded the line (see `service.ingest.fast`): the line is then
    valid JSON, and `value` is decoded from `raw` only if something asks for it."""

    __slots__ = ("_value", "error", "index", "raw", "record")

    def __init__(
        self,
        index: int,
        value: Any = None,
        raw: bytes | None = None,
        error: str | None = None,
        record: FastRecord | None = None,
    ) -> None:
        self.index = index
        self._value = value
        self.raw = raw
        self.error = error
        self.record = record

    @classmethod
    def decoded(cls, index: int, raw: bytes, record: FastRecord) -> "BodyItem":
        return cls(index, _UNPARSED, raw=raw, record=record)

    @property
    def value(self) -> Any:
        if self._value is _UNPARSED:
            self._value = orjson.loads(self.raw)  # type: ignore[arg-type]  # raw is set
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        self._value = value

    def __repr__(self) -> str:
        return f"BodyItem(index={self.index}, raw={self.raw!r}, error={self.error!r})"

    def verbatim(self) -> bytes:
        return self.raw if self.raw is not None else orjson.dumps(self.value)


def decompress(
    body: bytes,
    content_encoding: str | None,
    limit: int,
    admit: Callable[[int], None] = lambda size: None,
) -> bytes:
    """Gunzip when the header says gzip or the body starts with the gzip magic,
    never producing more than `limit` bytes (a gzip bomb stops at the limit).
    `admit(size)` is asked before more than `_KEPT_UNADMITTED` inflated bytes are
    kept (`inflight.Reservation.charge_inflated` raises Busy when the memory budget
    cannot take them); see `_gunzip_admitted`."""
    encoding = _encoding(content_encoding)
    if encoding not in PLAIN_ENCODINGS and encoding not in GZIP_ENCODINGS:
        raise UndecodableBody(f"unsupported Content-Encoding {content_encoding!r}; use gzip")
    if is_gzip(body, content_encoding):
        return _gunzip_admitted(body, limit, admit)
    if len(body) > limit:
        raise BodyTooLarge(f"body is over {limit} bytes")
    return body


# Inflated bytes kept before their size is known and admitted: as much as one piece
# of the counting pass holds anyway.
_KEPT_UNADMITTED = 1 << 20


def _gunzip_admitted(body: bytes, limit: int, admit: Callable[[int], None]) -> bytes:
    """The inflated body, as bytes (the decoders take bytes; from a bytearray each
    made a copy), taken all at once or not at all.

    A body that inflates to at most `_KEPT_UNADMITTED` is kept as it inflates and
    admitted at the end. A larger one is inflated a first time only to count its
    bytes, keeping none: a gzip bomb is refused (413) having held one piece at a
    time, and the memory is admitted before any of it is kept; then again, to keep
    it. Charged as they inflated instead, parallel bodies each got part of the
    budget, then all failed and were retried together, and the memory freed that
    way stayed with the process."""
    kept: list[bytes] = []
    size = 0
    pieces = _gunzip_pieces(body, limit)
    for piece in pieces:
        size += len(piece)
        if size > _KEPT_UNADMITTED:
            kept.clear()
            admit(size + sum(len(rest) for rest in pieces))
            return b"".join(_gunzip_pieces(body, limit))
        kept.append(piece)
    admit(size)
    return b"".join(kept)


def is_gzip(body: bytes, content_encoding: str | None) -> bool:
    """Whether `decompress` gunzips this body."""
    return _encoding(content_encoding) in GZIP_ENCODINGS or body.startswith(_GZIP_MAGIC)


def _encoding(content_encoding: str | None) -> str:
    return (content_encoding or "").strip().lower()


def _gunzip_pieces(data: bytes, limit: int) -> Iterator[bytes]:
    """The inflated body in pieces of at most `_INFLATE_PIECE`. Concatenated gzip
    members are one stream (RFC 1952), NUL padding between or after them skipped.
    Linear in the body: each member is handed the input a window at a time
    (`_member_pieces`), so what zlib copies out as unused or unconsumed input is at
    most a window, never the rest of the body: 500,000 empty members in 10 MiB took
    minutes when each one re-copied the remainder."""
    view = memoryview(data)
    position = 0
    room = limit  # what the limit still allows
    try:
        while position < len(data):
            end, room = yield from _member_pieces(view, position, room, limit)
            position = _after_padding(data, end)
    except zlib.error as exc:
        raise UndecodableBody(f"body is not valid gzip: {exc}") from None


_FIRST_WINDOW = 256  # an empty member is 20 bytes: a small start wastes nothing
_MAX_WINDOW = 64 * 1024
_NOT_NUL = re.compile(rb"[^\x00]")


def _member_pieces(
    view: memoryview, start: int, room: int, limit: int
) -> Generator[bytes, None, tuple[int, int]]:
    """Inflate the member starting at `start`; returns where it ends and the room
    left under the limit.

    The input goes in windows doubling from `_FIRST_WINDOW` to `_MAX_WINDOW`: a
    tiny member costs a tiny copy, a large one few calls. The output comes in
    `_INFLATE_PIECE`s: a whole-limit piece would be a copy of the whole body, and
    the cap stays exact (at most one byte past the limit is ever inflated, to tell
    "at" from "over")."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    fed = start  # input handed to zlib so far ends here
    window = _FIRST_WINDOW
    pending: bytes | memoryview = b""  # input given to zlib, not yet consumed
    while not inflater.eof:
        if not pending:
            if fed == len(view):
                raise UndecodableBody("gzip stream is truncated")
            pending = view[fed : fed + window]
            fed += len(pending)
            window = min(2 * window, _MAX_WINDOW)
        piece = inflater.decompress(pending, min(_INFLATE_PIECE, room + 1))
        room -= len(piece)
        if room < 0:
            raise BodyTooLarge(f"decompressed body is over {limit} bytes")
        pending = inflater.unconsumed_tail
        if piece:
            yield piece
    return fed - len(inflater.unused_data), room


def _after_padding(data: bytes, position: int) -> int:
    """The first byte at or after `position` that is not NUL padding (some writers
    pad members to a block size), or the end."""
    found = _NOT_NUL.search(data, position)
    return len(data) if found is None else found.start()


def split_records(data: bytes | bytearray) -> list[BodyItem]:
    """A JSON array, one JSON object, or NDJSON (one record per line; blank lines
    are skipped and do not count as indexes). All at once: see `iter_records`."""
    return list(iter_records(data))


def iter_records(
    data: bytes | bytearray, known: Collection[bytes] = frozenset()
) -> Iterator[BodyItem]:
    """The items of `split_records`, made as they are asked for, so that a caller
    that handles each in turn never holds them all: NDJSON lines are cut from the
    body one at a time, and an array's values are let go as their items are taken.
    UndecodableBody is raised here, before the first item: a body of which not one
    line is JSON is found out by a first look that stops at the first JSON line.
    An NDJSON line in `known` (the caller's, which it may fill as it goes: lines it
    has judged already) is given undecoded: its `value` is decoded only if asked."""
    text = bytes(data)  # no copy for bytes, which `decompress` gives
    start = _content_start(text)
    if start == len(text):
        raise UndecodableBody("empty body")
    content = memoryview(text)[start:]  # parsed in place, not copied
    if content[:1] == b"[":
        try:
            values = orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            raise UndecodableBody(
                f"body starts as a JSON array but is not valid JSON: {exc}"
            ) from None
        return _array_items(values)
    if content[:1] == b"{":
        try:
            value = orjson.loads(content)
        except orjson.JSONDecodeError:
            pass  # several objects: NDJSON
        else:
            return iter([BodyItem(0, value, raw=text[start:] if start else text)])
    _check_some_line_is_json(text, start)
    return _ndjson_items(text, start, known)


def _content_start(text: bytes) -> int:
    """Where the content starts: after leading whitespace, a UTF-8 BOM and more
    whitespace (an offset: stripping would copy the body)."""
    found = _LEADING.match(text)
    assert found is not None  # the pattern matches the empty string
    return found.end()


_LEADING = re.compile(rb"[ \t\r\n]*(?:\xef\xbb\xbf)?[ \t\r\n]*")  # the BOM in UTF-8


def _array_items(values: list[Any]) -> Iterator[BodyItem]:
    for i, value in enumerate(values):
        values[i] = None  # the item holds it now, and frees it when it is done
        yield BodyItem(i, value)


def _ndjson_lines(text: bytes, start: int) -> Iterator[bytes]:
    """The body's non-blank lines from `start`, without their CR (the rest of the
    line is kept verbatim), each cut out when it is reached."""
    end_of_text = len(text)
    while start < end_of_text:
        end = text.find(b"\n", start)
        if end == -1:
            end = end_of_text
        line = text[start:end].removesuffix(b"\r")
        start = end + 1
        if line.strip(_WHITESPACE):
            yield line


def _check_some_line_is_json(text: bytes, start: int) -> None:
    """UndecodableBody unless some line is JSON: a body of which not one line is
    JSON is not NDJSON but something else, answered 400 and kept whole."""
    first: str | None = None
    for line in _ndjson_lines(text, start):
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            first = first or f"line is not valid JSON: {exc}"
        else:
            return
    raise UndecodableBody(f"body is not JSON, a JSON array or NDJSON ({first or 'no content'})")


def _ndjson_items(text: bytes, start: int, known: Collection[bytes]) -> Iterator[BodyItem]:
    for index, line in enumerate(_ndjson_lines(text, start)):
        if known and line in known:  # empty until a line is rejected: no hashing
            yield BodyItem(index, _UNPARSED, raw=line)
            continue
        record = decode_line(line)
        if record is not None:  # the hot path: no dict, no second decode
            yield BodyItem.decoded(index, line, record)
            continue
        item = BodyItem(index, raw=line)
        try:
            item.value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            item.error = f"line is not valid JSON: {exc}"
        yield item
