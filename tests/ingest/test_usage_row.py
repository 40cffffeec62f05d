"""`service.usage_row` against both ingest paths: the validated path (pydantic,
`to_row` + `usage_row_values`) and the fast path (msgspec, `fast.record_values`)
build the same stored tuple, and both enforce every text field's limits.

The fast path writes out two things the table describes, for speed (see
`service.ingest.fast`): the order of its tuple and the NUL check. The random
equivalence tests of test_fast.py would catch a swap of two columns only when the
two happen to differ, so here every column of one record holds a value of its own,
and every text field is tried at, and one past, each of its limits."""

from typing import Any

import orjson
import pytest
from pydantic import ValidationError
from sqlalchemy import String

from service.ingest import fast
from service.ingest.records import (
    MAX_HASH_LENGTH,
    UsageRecordIn,
    format_validation_error,
    received_context,
    to_row,
)
from service.usage_row import (
    JSON_COLUMNS,
    TEXT_FIELDS,
    USAGE_COLUMNS,
    USAGE_TABLE,
    TextField,
    usage_row_values,
)

RECEIVED_US = 1_764_410_400_000_000

# Every field set, every text to a value no other column holds.
EVERY_FIELD: dict[str, Any] = {
    "request_id": "req-1",
    "ts": 1_714_564_800.25,
    "service": "svc",
    "model": "llama",
    "prompt_tokens": 1000,
    "cached_tokens": 512,
    "completion_tokens": 7,
    "ttft_ms": 120.5,
    "latency_ms": 900.25,
    "replica": "pod-1",
    "deploy": "v2",
    "session_id": "sess",
    "cache_key": "key",
    "tenant": "acme",
    "block_size": 16,
    "block_hashes": [11, 12, 13],
    "prefix_hash": "sys-v1",
    "prefix_tokens": 64,
    "segments": [
        {"name": "system", "hash": "abc", "tokens": 64, "norm_hash": "norm-abc"},
        {"name": "message[0]", "hash": 2**64 - 1, "tokens": 8, "norm_hash": 2**63},
        {"name": "message[1]", "hash": -5, "tokens": 9},
    ],
    "attributes": {"route": "/x", "n": 3},
    "cache_write_tokens": 300,
    "cache_ttl_s": 3600.5,
    "provider": "anthropic",
    "scenario": "ticket-summary",
}


def validated_row(record: dict[str, Any]) -> tuple[Any, ...] | str:
    """The validated path's stored tuple, or its error text."""
    try:
        validated = UsageRecordIn.model_validate(record, context=received_context(RECEIVED_US))
    except ValidationError as exc:
        return format_validation_error(exc)
    return usage_row_values(to_row(validated, RECEIVED_US))


def fast_rows(record: dict[str, Any]) -> list[tuple[Any, ...] | None]:
    """The fast path's tuple from the record as an NDJSON line and as a decoded
    value (None: declined), checking NUL as the service does."""
    rows: list[tuple[Any, ...] | None] = []
    for decoded in (fast.decode_line(orjson.dumps(record)), fast.convert_value(record)):
        rows.append(None if decoded is None else fast.record_values(decoded, RECEIVED_US))
    return rows


def test_every_string_column_is_a_text_field() -> None:
    """A text column added to the table without an entry in TEXT_FIELDS would get
    no NUL check and no limit on either path."""
    strings = {c.name for c in USAGE_TABLE.columns if isinstance(c.type, String)}
    assert {field.name for field in TEXT_FIELDS} == strings


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"segments": None},
        {"attributes": None},
        {"segments": None, "attributes": None},
        {"segments": [{"name": "system", "hash": "abc", "tokens": 64}]},  # as before norm_hash
        {"segments": [{"name": "system", "hash": "abc", "tokens": 64, "norm_hash": None}]},
        {"segments": [{"name": "s", "hash": "h", "tokens": 1, "norm_hash": -(2**63)}]},
        {"segments": [{"name": "s", "hash": "h", "tokens": 1, "norm_hash": ""}]},
    ],
)
def test_both_paths_store_the_same_tuple_column_by_column(change: dict[str, Any]) -> None:
    record = {k: v for k, v in {**EVERY_FIELD, **change}.items() if v is not None}
    expected = validated_row(record)
    assert isinstance(expected, tuple)
    for row in fast_rows(record):
        assert row is not None
        assert [(name, repr(value)) for name, value in zip(USAGE_COLUMNS, row, strict=True)] == [
            (name, repr(value)) for name, value in zip(USAGE_COLUMNS, expected, strict=True)
        ]
    stored = dict(zip(USAGE_COLUMNS, expected, strict=True))
    names = ("request_id", "service", "model", "replica", "tenant", "prefix_tokens")
    for name in (*names, "cache_write_tokens", "cache_ttl_s", "provider", "scenario"):
        assert stored[name] == record[name]  # by name, not only alike
    for name in JSON_COLUMNS:
        value = stored[name]
        assert (None if value is None else orjson.loads(value)) == _as_stored(name, record)


def _as_stored(column: str, record: dict[str, Any]) -> Any:
    """A JSON column's value as the record sent it, but for a segment's null
    norm_hash, which is not stored (a segment without one is stored as before)."""
    value = record.get(column)
    if column != "segments" or value is None:
        return value
    return [{k: v for k, v in s.items() if not (k == "norm_hash" and v is None)} for s in value]


def _with_norm_hash(value: Any) -> dict[str, Any]:
    segment = {"name": "system", "hash": "abc", "tokens": 64, "norm_hash": value}
    return {**EVERY_FIELD, "segments": [segment]}


@pytest.mark.parametrize("char", ["a", "😀"])
def test_a_norm_hash_at_the_hash_limit_is_stored_alike_by_both_paths(char: str) -> None:
    record = _with_norm_hash(char * MAX_HASH_LENGTH)
    expected = validated_row(record)
    assert isinstance(expected, tuple), expected
    assert [repr(row) for row in fast_rows(record)] == [repr(expected)] * 2
    segments = orjson.loads(dict(zip(USAGE_COLUMNS, expected, strict=True))["segments"])
    assert segments[0]["norm_hash"] == char * MAX_HASH_LENGTH


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("😀" * (MAX_HASH_LENGTH + 1), f"String should have at most {MAX_HASH_LENGTH} characters"),
        (True, "Input should be a valid string"),
        (1.5, "Input should be a valid string"),
        (["h"], "Input should be a valid string"),
    ],
)
def test_a_bad_norm_hash_is_refused_by_both_paths_and_named(value: Any, error: str) -> None:
    """As a bad `hash` is: the validated path's reason names the field."""
    record = _with_norm_hash(value)
    reason = validated_row(record)
    assert isinstance(reason, str) and reason.startswith("segments.0.norm_hash"), reason
    assert error in reason
    assert fast_rows(record) == [None, None]
    swapped = {"name": "system", "hash": value, "tokens": 64, "norm_hash": "abc"}
    bad_hash = validated_row({**record, "segments": [swapped]})
    assert bad_hash == reason.replace("norm_hash", "hash")


def _with(field: TextField, value: str) -> dict[str, Any]:
    return {**EVERY_FIELD, field.name: value}


def _field_id(field: TextField) -> str:
    return field.name


@pytest.mark.parametrize("field", TEXT_FIELDS, ids=_field_id)
def test_a_text_field_at_its_longest_is_stored_by_both_paths(field: TextField) -> None:
    """Lengths are in code points on both paths: an astral character counts one."""
    for char in ("a", "😀"):
        record = _with(field, char * field.max_length)
        expected = validated_row(record)
        assert isinstance(expected, tuple), expected
        assert [repr(row) for row in fast_rows(record)] == [repr(expected)] * 2


@pytest.mark.parametrize("field", TEXT_FIELDS, ids=_field_id)
def test_a_text_field_one_too_long_is_refused_by_both_paths(field: TextField) -> None:
    record = _with(field, "😀" * (field.max_length + 1))
    assert validated_row(record) == (
        f"{field.name}: String should have at most {field.max_length} characters"
    )
    assert fast_rows(record) == [None, None]


@pytest.mark.parametrize("field", TEXT_FIELDS, ids=_field_id)
def test_an_empty_text_field_is_refused_by_both_paths_or_by_neither(field: TextField) -> None:
    record = _with(field, "")
    if field.min_length == 0:
        expected = validated_row(record)
        assert isinstance(expected, tuple), expected
        assert [repr(row) for row in fast_rows(record)] == [repr(expected)] * 2
    else:
        assert validated_row(record) == f"{field.name}: String should have at least 1 character"
        assert fast_rows(record) == [None, None]


@pytest.mark.parametrize("field", TEXT_FIELDS, ids=_field_id)
def test_nul_in_a_text_field_is_refused_by_both_paths(field: TextField) -> None:
    record = _with(field, "a\x00b")
    assert validated_row(record) == f"{field.name} must not contain NUL characters"
    assert fast_rows(record) == [None, None]


def test_the_first_text_field_holding_nul_is_named() -> None:
    """The validated path checks TEXT_FIELDS in their order."""
    record = {**EVERY_FIELD, **{field.name: "\x00" for field in TEXT_FIELDS[1:]}}
    assert validated_row(record) == f"{TEXT_FIELDS[1].name} must not contain NUL characters"
    assert fast_rows(record) == [None, None]
