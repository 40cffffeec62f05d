"""The stored usage row: one description of a `usage_records` row that the
validated path (`ingest.records`, pydantic), the fast path (`ingest.fast`,
msgspec) and the repository all build from.

What is described here, once:

- the column order of the insert tuple, taken from the table in `service.models`
  (every column but `id`, in table order): the SQLite INSERTs and the PostgreSQL
  COPY name the columns in this order, and both ingest paths give tuples in it;
- which columns are JSON (those whose type is `JSON`), also from the table: they
  go to the database as JSON text, made by orjson in `json_as_text`, since both
  drivers are handed text and SQLAlchemy's per-row JSON processing is bypassed;
- the text fields a record sends with their limits (`TEXT_FIELDS`): the longest
  value is the column's width in the table (a longer one could not be stored on
  PostgreSQL anyway), the shortest is declared here, and every one refuses NUL,
  which PostgreSQL text cannot hold. pydantic's and msgspec's length constraints
  and the validated path's NUL check are built from this table; the fast path
  writes its NUL check out, for speed, and tests/ingest/test_usage_row.py tries
  every field's limits and NUL on both paths. So changing a limit is one edit,
  of the model's column (with its migration), and a String column the table
  lacks fails that test.

Why a module of its own, beside `models.py`: the row is shared by ingestion and
storage, and either home would make one depend on the other. In
`service.repository` it would make record validation (used by the LiteLLM and
OTLP mappings too) import the whole repository and the database drivers; in
`service.ingest` it would make the repository depend on validation. The schema
module itself stays declarations only.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

import orjson
from sqlalchemy import JSON, String, Table

from service.models import UsageRecord

Row = tuple[Any, ...]

USAGE_TABLE = cast(Table, UsageRecord.__table__)
USAGE_COLUMNS: tuple[str, ...] = tuple(c.name for c in USAGE_TABLE.columns if c.name != "id")
JSON_COLUMNS: tuple[str, ...] = tuple(
    c.name for c in USAGE_TABLE.columns if isinstance(c.type, JSON)
)


@dataclass(frozen=True)
class TextField:
    """A text column as a record sends it: its length in code points (what both
    pydantic and msgspec count) must be within [min_length, max_length]."""

    name: str
    min_length: int
    max_length: int


def _text_field(name: str, *, may_be_empty: bool = False) -> TextField:
    """The field of column `name`, as long as the column is wide. Raises at import
    for a name that is not a String column of a declared width."""
    column_type = USAGE_TABLE.columns[name].type
    if not isinstance(column_type, String) or column_type.length is None:
        raise TypeError(f"usage_records.{name} is not a text column of a fixed width")
    return TextField(name, 0 if may_be_empty else 1, column_type.length)


# In this order the validated path names the first field holding NUL.
TEXT_FIELDS: tuple[TextField, ...] = (
    _text_field("request_id"),
    _text_field("service"),
    _text_field("model"),
    _text_field("replica", may_be_empty=True),
    _text_field("deploy", may_be_empty=True),
    _text_field("session_id", may_be_empty=True),
    _text_field("cache_key", may_be_empty=True),
    _text_field("tenant", may_be_empty=True),
    _text_field("prefix_hash"),
    _text_field("provider"),
    _text_field("scenario"),
    _text_field("provider_miss_reason"),
)
TEXT_FIELD_NAMES: tuple[str, ...] = tuple(field.name for field in TEXT_FIELDS)
TEXT_FIELDS_BY_NAME: dict[str, TextField] = {field.name: field for field in TEXT_FIELDS}

_JSON_POSITIONS = tuple(USAGE_COLUMNS.index(name) for name in JSON_COLUMNS)
_row_values: Callable[[Mapping[str, Any]], Row] = itemgetter(*USAGE_COLUMNS)


def usage_row_values(row: Mapping[str, Any]) -> Row:
    """A row mapping (column name to value, JSON columns as values) as the tuple
    both the SQLite INSERTs and the PostgreSQL COPY take: USAGE_COLUMNS order,
    JSON columns as JSON text, None as SQL NULL. Most rows have no JSON value: a
    loop over the positions answers that fastest (all(genexpr) took five times as
    long, an itemgetter compared with a tuple of Nones half as long again)."""
    values: Row = _row_values(row)
    for i in _JSON_POSITIONS:
        if values[i] is not None:
            return json_as_text(values)
    return values


def json_as_text(values: Row) -> Row:
    """`values` (USAGE_COLUMNS order) with its JSON columns' values as JSON text.
    It copies the row: callers skip it when the row holds no JSON value."""
    patched = list(values)
    for i in _JSON_POSITIONS:
        if patched[i] is not None:
            patched[i] = orjson.dumps(patched[i]).decode()
    return tuple(patched)
