"""Whole-body fast path for NDJSON: one msgspec call decodes every line, and the
rows are built as tuples straight from the structs.

The per-line path (`body.split_records` + the service's per-item validation) stays
the definition of what a body means: this path answers only for a body in which
every line is a record that the fast path accepts, and then gives exactly the
rows that path would. For anything else (a malformed line, a record the fast path
declines, a payload a per-item hook converts, which has fields a contract record
lacks) it answers None and the caller takes the per-line path, which decides and
explains each line.

Lines and values: `Decoder.decode_lines` splits values on any JSON whitespace, so
a value could span lines or a line hold two. The body is trusted only when every
newline sits between a `}` and a `{` (a CRLF allowed): a raw newline cannot be in
a JSON string, and `}` then `{` is valid JSON only between top-level values, so
every line starts a value; with as many values as lines, each line is exactly one.
"""

from collections.abc import Iterator
from typing import Any

from service.ingest.fast import LineRecord, decode_lines, finish_line, record_values

_WHITESPACE = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"


class NotBulk(Exception):
    """A record of the body turned out not to be one the fast path accepts: the
    caller undoes what it stored of the body and takes the per-line path."""


def bulk_values(data: bytes | bytearray, received_us: int) -> list[tuple[Any, ...]] | None:
    """The rows of an NDJSON body (or single-line object) whose every line the fast
    path accepts, in body order, as `fast.record_values` tuples; None otherwise."""
    rows = bulk_rows(data, received_us)
    if rows is None:
        return None
    try:
        return list(rows)
    except NotBulk:
        return None


def bulk_rows(data: bytes | bytearray, received_us: int) -> Iterator[tuple[Any, ...]] | None:
    """`bulk_values`, lazily: None when the body is not NDJSON of one object a line
    (checked, and the whole body decoded, before this returns), else the rows as
    they are built, raising NotBulk at the first record the fast path declines. So
    the database can take the first rows while the later ones are being built
    (PostgreSQL's COPY runs in its own process, on another core)."""
    text = bytes(data).lstrip(_WHITESPACE).removeprefix(_BOM).lstrip(_WHITESPACE)
    text = text.rstrip(_WHITESPACE)
    if not (text.startswith(b"{") and text.endswith(b"}")):
        return None  # arrays, blank bodies, lines that are not objects
    newlines = text.count(b"\n")
    separators = text.count(b"}\n{")
    if b"\r" in text:  # each scan of a 350 KiB body costs 0.1 us a record: skip it
        separators += text.count(b"}\r\n{")
    if newlines != separators:
        return None  # blank or indented lines, a value across lines: per line
    records = decode_lines(text)
    if records is None or len(records) != newlines + 1:
        return None
    # NUL can only be in a JSON string as the escape \u0000 (raw control characters
    # are invalid JSON): without one, no field holds NUL and no record needs the check.
    check_nul = b"\\" in text and b"\\u0000" in text
    return _rows(records, received_us, check_nul)


def _rows(
    records: list[LineRecord], received_us: int, check_nul: bool
) -> Iterator[tuple[Any, ...]]:
    for record in records:
        if not finish_line(record):
            raise NotBulk
        values = record_values(record, received_us, check_nul=check_nul)
        if values is None:
            raise NotBulk
        yield values
