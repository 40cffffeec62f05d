"""Request bodies: bounded gunzip and detection of NDJSON, array or single object.

The shape is read from the body itself: some shippers label NDJSON as
`application/x-www-form-urlencoded`, so Content-Type is never trusted."""

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
    out = bytearray()
    remaining = data
    try:
        while remaining:  # concatenated gzip members are one stream (RFC 1952)
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pending = remaining
            while not inflater.eof:
                # Inflate in small pieces appended in place: a whole-limit piece
                # would be a second copy, doubling the peak memory of a gzip bomb.
                piece = inflater.decompress(pending, min(_INFLATE_PIECE, limit + 1 - len(out)))
                out += piece
                if len(out) > limit:
                    raise BodyTooLarge(f"decompressed body is over {limit} bytes")
                progressed = piece or len(inflater.unconsumed_tail) < len(pending)
                pending = inflater.unconsumed_tail
                if not progressed:
                    break  # input used up before the end of the stream
            if not inflater.eof:
                raise UndecodableBody("gzip stream is truncated")
            remaining = inflater.unused_data.lstrip(b"\x00")
    except zlib.error as exc:
        raise UndecodableBody(f"body is not valid gzip: {exc}") from None
    return out


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
