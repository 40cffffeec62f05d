"""Query parameters shared by the read endpoints."""

from typing import Annotated, Any

from fastapi import HTTPException, Query

from service.ingest.timestamps import parse_ts_text

# No stored text holds a NUL (PostgreSQL refuses one), so a parameter with one can
# match nothing: refused by validation (422) instead of failing inside the query.
_NO_NUL = r"^[^\x00]*$"


def _text(max_length: int, alias: str | None = None) -> Any:
    return Query(alias=alias, max_length=max_length, pattern=_NO_NUL)


ServiceParam = Annotated[str | None, _text(100)]
ModelParam = Annotated[str | None, _text(200)]
# `from` is a Python keyword, hence the alias.
TimeParam = Annotated[str | None, _text(64, alias="from")]
ToParam = Annotated[str | None, _text(64)]


def parse_time_param(name: str, value: str | None) -> int | None:
    """`from`/`to` take the same forms as `ts`: RFC 3339 or an epoch number."""
    if value is None or value == "":
        return None
    try:
        return parse_ts_text(value)
    except ValueError as exc:
        raise HTTPException(422, f"`{name}`: {exc}") from None
