"""Request bodies: bounded gunzip and detection of NDJSON, array or single object.

The shape is read from the body itself: some shippers label NDJSON as
`application/x-www-form-urlencoded`, so Content-Type is never trusted."""

import re
import zlib
from typing import Any

import orjson

from service.ingest.fast import FastRecord, decode_line

_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
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


def decompress(body: bytes, content_encoding: str | None, limit: int) -> bytes | bytearray:
    """Gunzip when the header says gzip or the body starts with the gzip magic,
    never producing more than `limit` bytes (a gzip bomb stops at the limit)."""
    encoding = (content_encoding or "").strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise UndecodableBody(f"unsupported Content-Encoding {content_encoding!r}; use gzip")
    if encoding in ("gzip", "x-gzip") or body.startswith(_GZIP_MAGIC):
        return _gunzip_bounded(body, limit)
    if len(body) > limit:
        raise BodyTooLarge(f"body is over {limit} bytes")
    return body


def _gunzip_bounded(data: bytes, limit: int) -> bytearray:
    """Concatenated gzip members are one stream (RFC 1952), NUL padding between or
    after them skipped. Linear in the body: each member is handed the input a
    window at a time (`_inflate_member`), so what zlib copies out as unused or
    unconsumed input is at most a window, never the rest of the body: 500,000
    empty members in 10 MiB took minutes when each one re-copied the remainder."""
    out = bytearray()
    view = memoryview(data)
    position = 0
    try:
        while position < len(data):
            position = _after_padding(data, _inflate_member(view, position, out, limit))
    except zlib.error as exc:
        raise UndecodableBody(f"body is not valid gzip: {exc}") from None
    return out


_FIRST_WINDOW = 256  # an empty member is 20 bytes: a small start wastes nothing
_MAX_WINDOW = 64 * 1024
_NOT_NUL = re.compile(rb"[^\x00]")


def _inflate_member(view: memoryview, start: int, out: bytearray, limit: int) -> int:
    """Inflate the member starting at `start` onto `out`; returns where it ends.

    The input goes in windows doubling from `_FIRST_WINDOW` to `_MAX_WINDOW`: a
    tiny member costs a tiny copy, a large one few calls. The output comes in
    `_INFLATE_PIECE`s appended in place: a whole-limit piece would be a second
    copy, doubling the peak memory of a gzip bomb, and the cap stays exact (at most
    one byte past the limit is ever inflated, to tell "at" from "over")."""
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
        piece = inflater.decompress(pending, min(_INFLATE_PIECE, limit + 1 - len(out)))
        out += piece
        if len(out) > limit:
            raise BodyTooLarge(f"decompressed body is over {limit} bytes")
        pending = inflater.unconsumed_tail
    return fed - len(inflater.unused_data)


def _after_padding(data: bytes, position: int) -> int:
    """The first byte at or after `position` that is not NUL padding (some writers
    pad members to a block size), or the end."""
    found = _NOT_NUL.search(data, position)
    return len(data) if found is None else found.start()


def split_records(data: bytes | bytearray) -> list[BodyItem]:
    """A JSON array, one JSON object, or NDJSON (one record per line; blank lines
    are skipped and do not count as indexes)."""
    text = bytes(data).lstrip(_WHITESPACE)
    text = text.removeprefix(_BOM).lstrip(_WHITESPACE)
    if not text:
        raise UndecodableBody("empty body")
    if text.startswith(b"["):
        try:
            values = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise UndecodableBody(
                f"body starts as a JSON array but is not valid JSON: {exc}"
            ) from None
        return [BodyItem(i, value) for i, value in enumerate(values)]
    if text.startswith(b"{"):
        try:
            return [BodyItem(0, orjson.loads(text), raw=text)]
        except orjson.JSONDecodeError:
            pass  # several objects: NDJSON
    return _split_ndjson(text)


def _split_ndjson(text: bytes) -> list[BodyItem]:
    items: list[BodyItem] = []
    for line in text.split(b"\n"):
        line = line.removesuffix(b"\r")  # the rest of the line is kept verbatim
        if not line.strip(_WHITESPACE):
            continue
        record = decode_line(line)
        if record is not None:  # the hot path: no dict, no second decode
            items.append(BodyItem.decoded(len(items), line, record))
            continue
        item = BodyItem(len(items), raw=line)
        try:
            item.value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            item.error = f"line is not valid JSON: {exc}"
        items.append(item)
    if all(item.error for item in items):
        first = items[0].error if items else "no content"
        raise UndecodableBody(f"body is not JSON, a JSON array or NDJSON ({first})")
    return items
