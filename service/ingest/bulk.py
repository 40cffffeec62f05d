"""Whole-body fast path for NDJSON: msgspec decodes the lines, one call per chunk
of them, and the rows are built as tuples straight from the structs.

The per-line path (`body.split_records` + the service's per-item validation) stays
the definition of what a body means: this path answers only for a body in which
every line is a record that the fast path accepts, and then gives exactly the
rows that path would. For anything else (a malformed line, a record the fast path
declines, a payload a per-item hook converts, which has fields a contract record
lacks) it answers None, or raises NotBulk once its rows are under way, and the
caller takes the per-line path, which decides and explains each line.

Lines and values: `Decoder.decode_lines` splits values on any JSON whitespace, so
a value could span lines or a line hold two. The body is trusted only when every
newline sits between a `}` and a `{` (a CRLF allowed): a raw newline cannot be in
a JSON string, and `}` then `{` is valid JSON only between top-level values, so
every line starts a value; with as many values as lines (counted per chunk), each
line is exactly one.
"""

from bisect import bisect_left
from collections.abc import Iterator
from itertools import chain
from typing import Any

from service.ingest.fast import LineRecord, decode_lines, finish_line, record_values

_WHITESPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"


class NotBulk(Exception):
    """A record of the body turned out not to be one the fast path accepts: the
    caller undoes what it stored of the body and takes the per-line path."""


def bulk_rows(data: bytes | bytearray, received_us: int) -> Iterator[tuple[Any, ...]] | None:
    """The rows of an NDJSON body (or single-line object) whose every line the fast
    path accepts, in body order, as `fast.record_values` tuples, lazily. None when
    the body is not NDJSON of one object a line (its shape checked, and its first
    chunk decoded, before this returns); else the rows as they are built, raising
    NotBulk at the first record the fast path declines. The body is decoded chunk
    by chunk as the rows are asked for, so the database takes the first rows while
    the later ones are decoded and built (PostgreSQL's COPY runs in its own
    process, on another core)."""
    text = bytes(data).lstrip(_WHITESPACE).removeprefix(_BOM).lstrip(_WHITESPACE)
    text = text.rstrip(_WHITESPACE)
    if not (text.startswith(b"{") and text.endswith(b"}")):
        return None  # arrays, blank bodies, lines that are not objects
    ends = _line_ends(text)
    if ends is None:
        return None  # blank or indented lines, a value across lines: per line
    chunks = _decoded_chunks(text, ends)
    first = next(chunks)
    if first is None:
        return None
    # NUL can only be in a JSON string as the escape \u0000 (raw control characters
    # are invalid JSON): without one, no field holds NUL and no record needs the check.
    check_nul = b"\\" in text and b"\\u0000" in text
    return _rows(chain((first,), chunks), received_us, check_nul)


# About what psycopg sends PostgreSQL at a time during a COPY (32 KiB): ~90 bench
# records. Small enough that the first rows reach the database early, large enough
# that a call's fixed cost does not show.
CHUNK_BYTES = 32 * 1024


def _line_ends(text: bytes) -> list[int] | None:
    """Where each line but the last of `text` ends (its newline), or None when a
    newline does not sit between a `}` and a `{` (a CRLF allowed). `text` starts
    with `{` and ends with `}`. One `find` (memchr) a line: on long lines 40 times
    faster than counting newlines and separators over the whole body."""
    ends: list[int] = []
    find = text.find
    at = find(b"\n")
    while at != -1:
        before = text[at - 1]
        if before == _CR:
            before = text[at - 2]
        if before != _CLOSE or text[at + 1] != _OPEN:
            return None
        ends.append(at)
        at = find(b"\n", at + 1)
    return ends


_CR, _CLOSE, _OPEN = b"\r}{"


def _decoded_chunks(text: bytes, ends: list[int]) -> Iterator[list[LineRecord] | None]:
    """The records of the text, a chunk of whole lines at a time (`ends`: its lines'
    newlines, each between two top-level values); None for a chunk that does not
    decode to one record a line, after which nothing more is decoded."""
    view = memoryview(text)
    start = 0
    first_line = 0  # the index in `ends` of the chunk's first line's newline
    while start < len(text):
        last_line = bisect_left(ends, start + CHUNK_BYTES, lo=first_line)
        end = ends[last_line] if last_line < len(ends) else len(text)
        records = decode_lines(view[start:end])
        if records is None or len(records) != last_line - first_line + 1:
            yield None
            return
        yield records
        start, first_line = end + 1, last_line + 1


def _rows(
    chunks: Iterator[list[LineRecord] | None], received_us: int, check_nul: bool
) -> Iterator[tuple[Any, ...]]:
    for records in chunks:
        if records is None:
            raise NotBulk
        for record in records:
            if not finish_line(record):
                raise NotBulk
            values = record_values(record, received_us, check_nul=check_nul)
            if values is None:
                raise NotBulk
            yield values
