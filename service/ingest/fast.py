"""Fast path of record validation: msgspec instead of orjson + pydantic.

`UsageRecordIn` (pydantic) stays the definition of a valid record and the only
source of error messages. This module accepts a subset of what it accepts and
builds the very same row as `records.to_row`; for anything else it answers None
and the caller falls back to the pydantic path, which then accepts or rejects the
record and says why. So the fast path may decline a valid record (a feature it
does not cover) but never accepts an invalid one nor builds a different row.

Two entry points:

- `decode_line`: an NDJSON line, decoded from its bytes into a struct without
  building a dict (the hot path). It must also only succeed on lines that orjson
  decodes, to the same values:
  - unknown fields are refused (`forbid_unknown_fields`), also inside segments:
    msgspec skips them without the checks orjson makes (UTF-8, numbers out of
    range), so a record with unknown fields takes the `convert_value` path;
  - every int is bounded to int64 in the type, or checked here: orjson turns an
    int outside [-2**63, 2**64 - 1] into a float, which pydantic then refuses;
  - `usage` is kept as raw JSON and decoded by orjson itself.
- `convert_value`: a record already decoded by orjson (array bodies, single
  objects, lines with unknown fields): `msgspec.convert` onto the same fields.
"""

import struct
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import orjson
from msgspec import UNSET, Meta, UnsetType

from service.ingest.hashing import hash_key, pack_block_hashes
from service.ingest.records import MAX_ATTRIBUTES, MAX_BLOCKS, MAX_SEGMENTS, provider_usage_fields
from service.ingest.timestamps import parse_ts

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1  # orjson's largest int; beyond it gives a float

# msgspec bounds ints to int64 at most: a count in [2**63, 2**64) falls back.
Int64 = Annotated[int, Meta(ge=_INT64_MIN, le=_INT64_MAX)]
Count = Annotated[int, Meta(ge=0, le=_INT64_MAX)]
Millis = Annotated[int, Meta(ge=0, le=_INT64_MAX)] | Annotated[float, Meta(ge=0)]
Label = Annotated[str, Meta(max_length=200)]
Name100 = Annotated[str, Meta(min_length=1, max_length=100)]
Name200 = Annotated[str, Meta(min_length=1, max_length=200)]
# Hash ints are unbounded here (uint64 hashes are common) and range-checked below.
HashValue = Label | int
Attributes = Annotated[dict[str, str | bool | Int64 | float], Meta(max_length=MAX_ATTRIBUTES)]
BlockHashes = Annotated[list[HashValue], Meta(max_length=MAX_BLOCKS)]


class _Segment(msgspec.Struct, gc=False):
    name: Name200
    hash: HashValue
    tokens: Count


class _LineSegment(_Segment, forbid_unknown_fields=True):
    pass


class _Fields(msgspec.Struct, gc=False):
    """The fields of `UsageRecordIn`, in its order (which is the row's). The three
    a provider `usage` can supply are UNSET when absent, as fields on the record
    win over `usage` even when null."""

    request_id: Name200
    ts: str | Int64 | float
    service: Name100
    model: Name200
    prompt_tokens: Count | UnsetType = UNSET
    cached_tokens: Count | UnsetType = UNSET
    completion_tokens: Count | UnsetType | None = UNSET
    ttft_ms: Millis | None = None
    latency_ms: Millis | None = None
    replica: Label | None = None
    deploy: Label | None = None
    session_id: Label | None = None
    cache_key: Label | None = None
    tenant: Label | None = None
    block_size: Annotated[int, Meta(gt=0, le=_INT64_MAX)] | None = None
    block_hashes: BlockHashes | None = None
    prefix_hash: Name200 | None = None
    prefix_tokens: Count | None = None
    attributes: Attributes | None = None


class _LineRecord(_Fields, forbid_unknown_fields=True):
    segments: Annotated[list[_LineSegment], Meta(max_length=MAX_SEGMENTS)] | None = None
    usage: msgspec.Raw | UnsetType = UNSET


class _ValueRecord(_Fields):
    segments: Annotated[list[_Segment], Meta(max_length=MAX_SEGMENTS)] | None = None
    usage: Any = None


FastRecord = _LineRecord | _ValueRecord

_line_decoder = msgspec.json.Decoder(_LineRecord)


def decode_line(line: bytes) -> _LineRecord | None:
    """The record on one NDJSON line, or None: not covered here (fall back)."""
    try:
        record = _line_decoder.decode(line)
    except (msgspec.DecodeError, RecursionError):  # DecodeError: also ValidationError
        return None  # RecursionError: a deep `usage` (orjson then says if it is JSON)
    if record.usage is not UNSET:
        try:
            usage = orjson.loads(memoryview(record.usage))  # Raw is a buffer
        except orjson.JSONDecodeError:
            return None  # the line is not JSON to orjson either
        record.usage = UNSET
        if not _apply_usage(record, usage):
            return None
    return record


def convert_value(value: dict[str, Any]) -> _ValueRecord | None:
    """The record from a value decoded by orjson, or None: not covered here."""
    try:
        record = msgspec.convert(value, _ValueRecord)
    except (msgspec.ValidationError, RecursionError):
        return None
    usage, record.usage = record.usage, None
    return record if _apply_usage(record, usage) else None


def _apply_usage(record: FastRecord, usage: Any) -> bool:
    """`UsageRecordIn._from_provider_usage`: the provider's fields under the
    record's own. False when one of them is not a valid count."""
    if type(usage) is not dict:
        return True  # ignored, like any unknown field
    fields = provider_usage_fields(usage)
    for name in ("prompt_tokens", "cached_tokens", "completion_tokens"):
        if name in fields and getattr(record, name) is UNSET:
            value = fields[name]
            # A JSON int from orjson, >= 0: what pydantic's strict count accepts.
            if type(value) is not int or value < 0:
                return False
            setattr(record, name, value)
    return True


def record_row(record: FastRecord, received_us: int) -> dict[str, Any] | None:
    """`to_row(UsageRecordIn.model_validate(...))` for a decoded record, or None
    when pydantic's cross-field checks (or anything else) would refuse it."""
    prompt_tokens = record.prompt_tokens
    if prompt_tokens is UNSET:
        return None
    cached_tokens = record.cached_tokens
    if cached_tokens is UNSET:
        cached_tokens = 0
    elif cached_tokens > prompt_tokens:
        return None
    completion_tokens = record.completion_tokens
    if completion_tokens is UNSET:
        completion_tokens = None
    request_id, service, model = record.request_id, record.service, record.model
    replica, deploy, session_id = record.replica, record.deploy, record.session_id
    cache_key, tenant, prefix_hash = record.cache_key, record.tenant, record.prefix_hash
    # PostgreSQL text cannot hold NUL: UsageRecordIn refuses it in these fields.
    if (
        "\x00" in request_id
        or "\x00" in service
        or "\x00" in model
        or (replica is not None and "\x00" in replica)
        or (deploy is not None and "\x00" in deploy)
        or (session_id is not None and "\x00" in session_id)
        or (cache_key is not None and "\x00" in cache_key)
        or (tenant is not None and "\x00" in tenant)
        or (prefix_hash is not None and "\x00" in prefix_hash)
    ):
        return None
    block_size, block_hashes = record.block_size, record.block_hashes
    packed: bytes | None = None
    if block_hashes is not None:
        if block_size is None:
            return None
        packed = _pack(block_hashes)
        if packed is None:
            return None
    prefix_key: int | None = None
    prefix_tokens = record.prefix_tokens
    if prefix_hash is not None:
        if prefix_tokens is None:
            return None
        prefix_key = hash_key(prefix_hash)
    segments: list[dict[str, Any]] | None = None
    if record.segments is not None:
        segments = []
        for segment in record.segments:
            value = segment.hash
            if type(value) is int and not _INT64_MIN <= value <= _UINT64_MAX:
                return None  # orjson would have made it a float
            segments.append({"name": segment.name, "hash": value, "tokens": segment.tokens})
    try:
        ts_us = parse_ts(record.ts)
    except Exception:  # pydantic's path says why (or raises the same)
        return None
    # Copying a template and setting the values costs a third of a 22-key literal.
    row = _ROW_TEMPLATE.copy()
    row["request_id"] = request_id
    row["service"] = service
    row["model"] = model
    row["prompt_tokens"] = prompt_tokens
    row["cached_tokens"] = cached_tokens
    row["completion_tokens"] = completion_tokens
    row["ttft_ms"] = record.ttft_ms
    row["latency_ms"] = record.latency_ms
    row["replica"] = replica
    row["deploy"] = deploy
    row["session_id"] = session_id
    row["cache_key"] = cache_key
    row["tenant"] = tenant
    row["block_size"] = block_size
    row["block_hashes"] = packed
    row["prefix_hash"] = prefix_hash
    row["prefix_tokens"] = prefix_tokens
    row["segments"] = segments
    row["attributes"] = record.attributes
    row["ts_us"] = ts_us
    row["received_us"] = received_us
    row["prefix_key"] = prefix_key
    return row


# The keys of `to_row`, in its order: the model's fields (`ts` left out), then
# ts_us, received_us, prefix_key.
_ROW_TEMPLATE: dict[str, Any] = dict.fromkeys(
    (
        "request_id",
        "service",
        "model",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "ttft_ms",
        "latency_ms",
        "replica",
        "deploy",
        "session_id",
        "cache_key",
        "tenant",
        "block_size",
        "block_hashes",
        "prefix_hash",
        "prefix_tokens",
        "segments",
        "attributes",
        "ts_us",
        "received_us",
        "prefix_key",
    )
)


def _pack(hashes: list[str | int]) -> bytes | None:
    """`pack_block_hashes`, or None when an int is one orjson would make a float."""
    count = len(hashes)
    packer = _PACKERS.get(count)
    if packer is None:  # at most MAX_BLOCKS + 1 of them; the format is parsed once
        packer = _PACKERS[count] = struct.Struct(f"<{count}q").pack
    try:
        return packer(*hashes)  # all int64 (Mooncake-style ids): the common case
    except struct.error:
        pass
    for value in hashes:
        if type(value) is int and not _INT64_MIN <= value <= _UINT64_MAX:
            return None
    return pack_block_hashes(hashes)


_PACKERS: dict[int, Callable[..., bytes]] = {}
