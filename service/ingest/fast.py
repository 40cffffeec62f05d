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
  - a provider usage object (`usage`, Gemini's `usageMetadata` or
    `usage_metadata`) is kept as raw JSON and decoded by orjson itself;
  - `block_hashes` is kept as raw JSON and keyed by `finish_line`, which decodes
    it to its type (a session's next array only past the last one's text, a long
    one in runs of hashes other arrays held: `service.ingest.array_memos`): an
    array that is not valid there, or not to orjson (invalid UTF-8, a number out
    of range), sends the line to orjson, as a line msgspec could not decode.
- `convert_value`: a record already decoded by orjson (array bodies, single
  objects, lines with unknown fields): `msgspec.convert` onto the same fields.

`decode_lines` decodes a whole NDJSON body at once for `service.ingest.bulk`, and
`record_values` builds the row as the tuple the database takes, skipping the dict.

What the row is comes from `service.usage_row`, as on the validated path: the
text fields' lengths (`_text`) and how JSON columns are written (`json_as_text`).
Two things are written out in `record_values` instead, for speed, and
tests/ingest/test_usage_row.py holds both to `usage_row`: the order of the tuple
(built from locals; a dict to pick the columns from cost seven times as much) and
the NUL check of `usage_row.TEXT_FIELDS` (a loop over them cost three times as
much: a tenth of the per-line path).
"""

import struct
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

import msgspec
import orjson
from msgspec import UNSET, Meta, UnsetType

from service.ingest.array_memos import ARRAY_CHUNKS, SESSION_PROMPTS
from service.ingest.diagnoses import MISSED, diagnosis_fields
from service.ingest.hashing import KEY_BYTES, MEMO, hash_key
from service.ingest.records import (
    MAX_ATTRIBUTES,
    MAX_BLOCK_SIZE,
    MAX_BLOCKS,
    MAX_HASH_LENGTH,
    MAX_MS,
    MAX_SEGMENT_NAME_LENGTH,
    MAX_SEGMENTS,
    MAX_TOKENS,
    MAX_TTL_S,
)
from service.ingest.shapes import (
    DERIVED_COUNTS,
    DERIVED_FIELDS,
    USAGE_KEYS,
    Invalid,
    request_ttl,
    usage_fields,
)
from service.ingest.timestamps import END_S, MAX_FUTURE_US, parse_ts
from service.usage_row import TEXT_FIELDS_BY_NAME, json_as_text

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1  # orjson's largest int; beyond it gives a float

# msgspec bounds ints to int64 at most: a count in [2**63, 2**64) falls back.
# A TTFT or latency beyond a year is not a measurement; the bound keeps absurd values
# (2^63 ms) out of the percentiles.
_MAX_MS = float(MAX_MS)
Int64 = Annotated[int, Meta(ge=_INT64_MIN, le=_INT64_MAX)]
# A token count above records.MAX_TOKENS is declined: pydantic says why.
Count = Annotated[int, Meta(ge=0, le=MAX_TOKENS)]
Millis = Annotated[int, Meta(ge=0, le=MAX_MS)] | Annotated[float, Meta(ge=0, le=_MAX_MS)]
Seconds = Annotated[int, Meta(gt=0, le=MAX_TTL_S)] | Annotated[float, Meta(gt=0, le=MAX_TTL_S)]
# Hash ints are unbounded here (uint64 hashes are common) and range-checked below.
HashValue = Annotated[str, Meta(max_length=MAX_HASH_LENGTH)] | int
Attributes = Annotated[dict[str, str | bool | Int64 | float], Meta(max_length=MAX_ATTRIBUTES)]
BlockHashes = Annotated[list[HashValue], Meta(max_length=MAX_BLOCKS)]


def _text(name: str) -> Meta:
    """The length constraint of the text field `name` (`usage_row.TEXT_FIELDS`),
    as `records._text` gives it to pydantic."""
    field = TEXT_FIELDS_BY_NAME[name]
    return Meta(min_length=field.min_length or None, max_length=field.max_length)


class _Segment(msgspec.Struct, gc=False):
    name: Annotated[str, Meta(min_length=1, max_length=MAX_SEGMENT_NAME_LENGTH)]
    hash: HashValue
    tokens: Count
    norm_hash: HashValue | None = None  # `records.Segment.norm_hash`


class _LineSegment(_Segment, forbid_unknown_fields=True):
    pass


class _Fields(msgspec.Struct, gc=False):
    """The fields of `UsageRecordIn`, in its order (which is the row's). Those a
    provider usage object can supply (`shapes.DERIVED_FIELDS`) are UNSET when
    absent, as fields on the record win over `usage` even when null."""

    request_id: Annotated[str, _text("request_id")]
    ts: str | Int64 | float
    service: Annotated[str, _text("service")]
    model: Annotated[str, _text("model")]
    prompt_tokens: Count | UnsetType = UNSET
    cached_tokens: Count | UnsetType = UNSET
    completion_tokens: Count | UnsetType | None = UNSET
    ttft_ms: Millis | None = None
    latency_ms: Millis | None = None
    replica: Annotated[str, _text("replica")] | None = None
    deploy: Annotated[str, _text("deploy")] | None = None
    session_id: Annotated[str, _text("session_id")] | None = None
    cache_key: Annotated[str, _text("cache_key")] | None = None
    tenant: Annotated[str, _text("tenant")] | None = None
    block_size: Annotated[int, Meta(gt=0, le=MAX_BLOCK_SIZE)] | None = None
    block_hashes: BlockHashes | None = None
    prefix_hash: Annotated[str, _text("prefix_hash")] | None = None
    prefix_tokens: Count | None = None
    attributes: Attributes | None = None
    cache_write_tokens: Count | UnsetType = UNSET
    cache_ttl_s: Seconds | UnsetType | None = UNSET
    provider: Annotated[str, _text("provider")] | UnsetType | None = UNSET
    scenario: Annotated[str, _text("scenario")] | None = None
    cache_write_1h_tokens: Count | UnsetType | None = UNSET
    provider_miss_reason: Annotated[str, _text("provider_miss_reason")] | UnsetType | None = UNSET
    provider_missed_tokens: Count | UnsetType | None = UNSET


class _LineRecord(_Fields, forbid_unknown_fields=True):
    # The array's JSON text, keyed by `finish_line` (then its packed keys): a
    # session's next turn repeats most of its last one's
    # (service.ingest.array_memos).
    block_hashes: msgspec.Raw | UnsetType = UNSET  # type: ignore[assignment]
    segments: Annotated[list[_LineSegment], Meta(max_length=MAX_SEGMENTS)] | None = None
    # shapes.USAGE_KEYS, in their order
    usage: msgspec.Raw | UnsetType = UNSET
    usageMetadata: msgspec.Raw | UnsetType = UNSET
    usage_metadata: msgspec.Raw | UnsetType = UNSET
    # shapes.REQUEST_OPTION_KEYS
    prompt_cache_retention: Any = UNSET
    prompt_cache_options: Any = UNSET
    # diagnoses.DIAGNOSIS_KEYS
    diagnostics: Any = UNSET
    prompt_cache_diagnostics: Any = UNSET


class _ValueRecord(_Fields):
    segments: Annotated[list[_Segment], Meta(max_length=MAX_SEGMENTS)] | None = None
    usage: Any = UNSET
    usageMetadata: Any = UNSET
    usage_metadata: Any = UNSET
    prompt_cache_retention: Any = UNSET
    prompt_cache_options: Any = UNSET
    # diagnoses.DIAGNOSIS_KEYS
    diagnostics: Any = UNSET
    prompt_cache_diagnostics: Any = UNSET


FastRecord = _LineRecord | _ValueRecord
LineRecord = _LineRecord  # what `decode_lines` gives

_line_decoder = msgspec.json.Decoder(_LineRecord)


def decode_line(line: bytes) -> _LineRecord | None:
    """The record on one NDJSON line, or None: not covered here (fall back)."""
    try:
        record = _line_decoder.decode(line)
    except (msgspec.DecodeError, RecursionError):  # DecodeError: also ValidationError
        return None  # RecursionError: a deep `usage` (orjson then says if it is JSON)
    return record if finish_line(record) else None


def decode_lines(text: bytes | memoryview) -> list[_LineRecord] | None:
    """Every value of an NDJSON text in one msgspec call (no per-line Python), or
    None when one is not a `_LineRecord`. msgspec does not tie values to lines
    (a value may span lines, a line may hold two): `service.ingest.bulk` checks
    that before trusting the count. `finish_line` is still to be applied."""
    try:
        return _line_decoder.decode_lines(text)
    except (msgspec.DecodeError, RecursionError):
        return None


def finish_line(record: _LineRecord) -> bool:
    """Apply a decoded line's raw usage object; False when orjson finds one is not
    JSON or a field it gives is invalid (the line then takes the fallback)."""
    if type(record.block_hashes) is msgspec.Raw and not _key_line_hashes(record):
        return False
    if record.usage is UNSET and record.usageMetadata is UNSET and record.usage_metadata is UNSET:
        return _apply_request_options(record) and _apply_diagnosis(record)  # the common case
    values = []
    for key in USAGE_KEYS:
        raw = getattr(record, key)
        if raw is UNSET:
            values.append(UNSET)
            continue
        try:  # every one: orjson reads the whole line, also the objects not used
            values.append(orjson.loads(memoryview(raw)))  # Raw is a buffer
        except orjson.JSONDecodeError:
            return False  # the line is not JSON to orjson either
        setattr(record, key, UNSET)
    return (
        _apply_usage(record, values) and _apply_request_options(record) and _apply_diagnosis(record)
    )


def convert_value(value: dict[str, Any]) -> _ValueRecord | None:
    """The record from a value decoded by orjson, or None: not covered here."""
    try:
        record = msgspec.convert(value, _ValueRecord)
    except (msgspec.ValidationError, RecursionError):
        return None
    values = [getattr(record, key) for key in USAGE_KEYS]
    record.usage = record.usageMetadata = record.usage_metadata = UNSET
    applied = _apply_usage(record, values) and _apply_request_options(record)
    return record if applied and _apply_diagnosis(record) else None


def _apply_diagnosis(record: FastRecord) -> bool:
    """`UsageRecordIn._from_diagnosis`: the provider's own diagnosis of a miss,
    where the record gives neither of its fields. False when it is not valid
    (pydantic then says why)."""
    anthropic, openai = record.diagnostics, record.prompt_cache_diagnostics
    if anthropic is UNSET and openai is UNSET:
        return True
    record.diagnostics = record.prompt_cache_diagnostics = UNSET
    if record.provider_miss_reason is not UNSET or record.provider_missed_tokens is not UNSET:
        return True
    fields = diagnosis_fields(
        None if anthropic is UNSET else anthropic, None if openai is UNSET else openai
    )
    if isinstance(fields, Invalid):
        return False
    missed = fields.get(MISSED)
    if missed is not None and missed > MAX_TOKENS:
        return False
    for name, value in fields.items():
        setattr(record, name, value)
    return True


def _apply_request_options(record: FastRecord) -> bool:
    """`UsageRecordIn._from_request_options`: the lifetime OpenAI's request
    parameters ask for, where neither the record nor its usage gave one. False
    when one is not valid (pydantic then says why)."""
    retention, options = record.prompt_cache_retention, record.prompt_cache_options
    if retention is UNSET and options is UNSET:
        return True
    record.prompt_cache_retention = record.prompt_cache_options = UNSET
    if record.cache_ttl_s is not UNSET:
        return True
    ttl = request_ttl(
        None if retention is UNSET else retention, None if options is UNSET else options
    )
    if isinstance(ttl, Invalid):
        return False
    if ttl is not None:
        record.cache_ttl_s = ttl
    return True


def _apply_usage(record: FastRecord, values: list[Any]) -> bool:
    """`UsageRecordIn._from_provider_usage`: the fields of the first usage object
    (`values`: the record's USAGE_KEYS, UNSET when absent) under the record's own.
    False when one of them is not valid (pydantic then says why)."""
    objects = [(k, v) for k, v in zip(USAGE_KEYS, values, strict=True) if type(v) is dict]
    if not objects:
        return True  # none: the others are ignored, like any unknown field
    key, usage = objects[0]
    fields = usage_fields(usage, key, record.replica, record.cache_write_tokens is not UNSET)
    for name in DERIVED_FIELDS:
        if name in fields and getattr(record, name) is UNSET:
            value = fields[name]
            if type(value) is Invalid:
                return False
            # A JSON int from orjson, >= 0: what pydantic's strict count accepts.
            if name in DERIVED_COUNTS and (type(value) is not int or not 0 <= value <= MAX_TOKENS):
                return False
            setattr(record, name, value)
    return True


def record_values(
    record: FastRecord, received_us: int, *, check_nul: bool = True
) -> tuple[Any, ...] | None:
    """The row as a tuple in `usage_row.USAGE_COLUMNS` order with JSON columns as
    JSON text, what `usage_row_values(to_row(UsageRecordIn.model_validate(...)))`
    gives, or None when pydantic's cross-field checks (or anything else) would refuse it.
    `check_nul=False` only when the caller knows no string can hold NUL. One
    function, the checks the types left and the row: a call per record costs 4%."""
    prompt_tokens = record.prompt_tokens
    if prompt_tokens is UNSET:
        return None
    cached_tokens = record.cached_tokens
    if cached_tokens is UNSET:
        cached_tokens = 0
    elif cached_tokens > prompt_tokens:
        return None
    cache_write_tokens = record.cache_write_tokens
    if cache_write_tokens is UNSET:
        cache_write_tokens = 0
    elif cache_write_tokens > prompt_tokens - cached_tokens:
        return None
    one_hour = record.cache_write_1h_tokens
    if one_hour is UNSET:
        one_hour = None
    elif one_hour is not None and one_hour > cache_write_tokens:
        return None
    miss_reason, missed = record.provider_miss_reason, record.provider_missed_tokens
    if miss_reason is UNSET:
        miss_reason = None
    if missed is UNSET:
        missed = None
    completion_tokens = record.completion_tokens
    if completion_tokens is UNSET:
        completion_tokens = None
    cache_ttl_s = record.cache_ttl_s
    if cache_ttl_s is UNSET:
        cache_ttl_s = None
    provider = record.provider
    if provider is UNSET:
        provider = None
    request_id, service, model = record.request_id, record.service, record.model
    replica, deploy, session_id = record.replica, record.deploy, record.session_id
    cache_key, tenant, prefix_hash = record.cache_key, record.tenant, record.prefix_hash
    scenario = record.scenario
    # PostgreSQL text cannot hold NUL: every one of `usage_row.TEXT_FIELDS`, in
    # its order, written out (see the module's docstring).
    if check_nul and (
        "\x00" in request_id
        or "\x00" in service
        or "\x00" in model
        or (replica is not None and "\x00" in replica)
        or (deploy is not None and "\x00" in deploy)
        or (session_id is not None and "\x00" in session_id)
        or (cache_key is not None and "\x00" in cache_key)
        or (tenant is not None and "\x00" in tenant)
        or (prefix_hash is not None and "\x00" in prefix_hash)
        or (provider is not None and "\x00" in provider)
        or (scenario is not None and "\x00" in scenario)
        or (miss_reason is not None and "\x00" in miss_reason)
    ):
        return None
    block_size = record.block_size
    packed = _block_keys(record.block_hashes)
    if packed is False or (packed is not None and block_size is None):
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
        segment_tokens = 0  # all of them together: at most MAX_TOKENS
        for segment in record.segments:
            segment_tokens += segment.tokens
            value, norm = segment.hash, segment.norm_hash
            if type(value) is int and not _INT64_MIN <= value <= _UINT64_MAX:
                return None  # orjson would have made it a float
            if norm is None:  # `records.segment_row`: norm_hash only when sent
                segments.append({"name": segment.name, "hash": value, "tokens": segment.tokens})
                continue
            if type(norm) is int and not _INT64_MIN <= norm <= _UINT64_MAX:
                return None
            segments.append(
                {"name": segment.name, "hash": value, "tokens": segment.tokens, "norm_hash": norm}
            )
        if segment_tokens > MAX_TOKENS:
            return None
    ts = record.ts
    try:
        # A plain number of seconds (the common case) inline; the rest in parse_ts.
        ts_us = round(ts * 1_000_000) if type(ts) is float and 0 <= ts < END_S else parse_ts(ts)
    except Exception:  # pydantic's path says why (or raises the same)
        return None
    if ts_us - received_us > MAX_FUTURE_US:
        return None  # UsageRecordIn, given the received time, says why
    attributes = record.attributes
    row = (  # in USAGE_COLUMNS order
        request_id,
        ts_us,
        received_us,
        service,
        model,
        prompt_tokens,
        cached_tokens,
        completion_tokens,
        record.ttft_ms,
        record.latency_ms,
        replica,
        deploy,
        session_id,
        cache_key,
        tenant,
        block_size,
        packed,
        prefix_hash,
        prefix_key,
        prefix_tokens,
        segments,
        attributes,
        cache_write_tokens,
        cache_ttl_s,
        provider,
        scenario,
        one_hour,
        miss_reason,
        missed,
    )
    if segments is None and attributes is None:
        return row  # no JSON to write as text (most records): no call
    return json_as_text(row)


def _block_keys(
    hashes: msgspec.Raw | UnsetType | bytes | list[str | int] | None,
) -> bytes | Literal[False] | None:
    """The record's block hashes packed (a line's were by `finish_line`); None when
    it has none, False when it is not one the fast path takes."""
    if type(hashes) is bytes:
        return hashes
    if hashes is None or hashes is UNSET:
        return None
    packed = _pack(cast(list[str | int], hashes))
    return False if packed is None else packed


def _key_line_hashes(record: _LineRecord) -> bool:
    """Replace a line's block-hash array (its JSON text) by its packed keys; False
    when it is not an array the fast path takes, orjson-valid JSON included (the
    text was skipped, not checked, by msgspec), so the line then goes to orjson."""
    text = bytes(cast(msgspec.Raw, record.block_hashes))
    if text == _NULL:
        record.block_hashes = UNSET
        return True
    packed = _pack_text(text, record.session_id)
    if packed is None:
        return False
    record.block_hashes = packed  # type: ignore[assignment]  # what _block_keys reads
    return True


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
    return MEMO.pack(hashes, _orjson_keeps_int)


def _pack_text(text: bytes, session_id: str | None) -> bytes | None:
    """`_pack` of a line's array, given as its JSON text; None also when it is not
    an array of at most MAX_BLOCKS hashes. The text is looked up whole where it
    can be (`service.ingest.array_memos`): as its session's last array continued,
    or in runs other arrays held."""
    if session_id is None:
        packed = _pack_array(text)
    else:
        packed = SESSION_PROMPTS.pack(session_id, text, _pack_array)
    return None if packed is None or len(packed) > _MAX_PACKED else packed


def _pack_array(text: bytes) -> bytes | None:
    return ARRAY_CHUNKS.pack(text, _decode_hashes, _pack)


def _decode_hashes(text: bytes) -> list[str | int] | None:
    try:
        return _hashes_decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None


_hashes_decoder = msgspec.json.Decoder(BlockHashes)
_NULL = b"null"
_MAX_PACKED = MAX_BLOCKS * KEY_BYTES


def _orjson_keeps_int(value: str | int) -> bool:
    """False for an int orjson would make a float (no such hash is remembered)."""
    return type(value) is not int or _INT64_MIN <= value <= _UINT64_MAX


_PACKERS: dict[int, Callable[..., bytes]] = {}
