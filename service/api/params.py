"""Query parameters shared by the read endpoints."""

from typing import Annotated

from fastapi import HTTPException, Query

from service.ingest.timestamps import parse_ts

# `from` is a Python keyword, hence the alias.
TimeParam = Annotated[str | None, Query(alias="from", max_length=64)]


def parse_time_param(name: str, value: str | None) -> int | None:
    """`from`/`to` take the same forms as `ts`: RFC 3339 or an epoch number."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        number = None
    try:
        if number is not None:
            return parse_ts(int(number) if number.is_integer() else number)
        return parse_ts(value)
    except (ValueError, OverflowError) as exc:
        raise HTTPException(422, f"`{name}`: {exc}") from None
