"""Frames as tab-separated text, the bulk-load format ClickHouse (`TabSeparated`)
and PostgreSQL (`COPY ... FROM STDIN`, text format) share: one row a line, columns
split by tabs, `\\N` for null, and in strings the backslash, tab, newline and
carriage return escaped with a backslash. Built column-wise by Polars, so a
million rows cost a Polars write, not a Python step per row.

What each side reads besides: lists of numbers as `[1,2]` (ClickHouse arrays;
PostgreSQL gets none), bytes as `\\\\x` and hex (PostgreSQL's bytea in COPY's text,
its backslash escaped; ClickHouse gets none), booleans as 0/1 (both), floats as
Polars writes them (`NaN`, `inf`, exponents: both read them back exactly)."""

from __future__ import annotations

import polars as pl

#: The escapes, applied in one pass (so no escape's backslash is escaped again).
_RAW = ["\\", "\t", "\n", "\r"]
_ESCAPED = ["\\\\", "\\t", "\\n", "\\r"]
#: Any of them, as a regular expression.
_ANY_RAW = r"[\\\t\n\r]"


def tab_separated(frame: pl.DataFrame) -> bytes:
    """`frame`'s rows as tab-separated text (module docstring). A string `\\N` is
    escaped to `\\\\N`, so it never reads back as null. Only the string columns
    holding a character to escape are rewritten (`_escaping`)."""
    escape = _escaping(frame)
    columns = [
        _text(pl.col(name), name, dtype, name in escape) for name, dtype in frame.schema.items()
    ]
    text = frame.select(columns).write_csv(
        separator="\t", quote_style="never", null_value="\\N", include_header=False
    )
    return text.encode()


def _escaping(frame: pl.DataFrame) -> set[str]:
    """The string columns holding a backslash, tab, newline or carriage return:
    one scan each, a third of rewriting every value (most hold none)."""
    strings = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    if not strings:
        return set()
    found = frame.select(pl.col(name).str.contains(_ANY_RAW).any() for name in strings).row(0)
    return {name for name, hit in zip(strings, found, strict=True) if hit}


def _text(column: pl.Expr, name: str, dtype: pl.DataType, escape: bool) -> pl.Expr:
    if dtype == pl.String:
        if escape:
            column = column.str.replace_many(_RAW, _ESCAPED)
    elif dtype == pl.Boolean:
        column = column.cast(pl.UInt8)
    elif dtype == pl.Binary:
        column = pl.concat_str(pl.lit("\\\\x"), column.bin.encode("hex"))
    elif isinstance(dtype, pl.List):
        if not dtype.inner.is_numeric():
            raise TypeError(f"{name}: only lists of numbers go as tab-separated text")
        column = pl.concat_str(
            pl.lit("["), column.cast(pl.List(pl.String)).list.join(","), pl.lit("]")
        )
    return column.alias(name)
