"""GET /v1/sessions: conversations (records with a `session_id`) in a range, most
spend first, each with its hit rate, dollars and the cache writes nobody read
(`service.analytics.session_report`). Read from the raw records, so the range
reaches back as far as retention keeps them (`CACHEWATCH_RETENTION_DAYS`), and the
cost grows with the calls in the range."""

from typing import Any

from sqlalchemy.orm import Session

from service.analytics import session_report
from service.profiles import profiles_for
from service.repository import sessions as sessions_repo
from service.repository.sessions import CallFilter
from service.rfc3339 import us_to_rfc3339
from service.services.paging import Page, Paged
from service.settings import Settings

#: The fields of each answered session, in order.
FIELDS: tuple[str, ...] = (
    "session_id",
    "service",
    "models",
    "tenant",
    "requests",
    "first_ts",
    "last_ts",
    "prompt_tokens",
    "cached_tokens",
    "hit_rate",
    "cache_write_tokens",
    "unread_write_tokens",
    "spend_usd",
    "unread_write_usd",
)


def sessions(session: Session, settings: Settings, where: CallFilter, page: Page) -> Paged:
    """One page of the sessions with calls in the range, and how many there are."""
    calls = sessions_repo.session_calls(session, where)
    if calls.is_empty():
        return Paged([], 0, page)
    totals = session_report.session_totals(profiles_for(settings).annotate(calls))
    rows = totals.slice(page.offset, page.limit).iter_rows(named=True)
    return Paged([_entry(row) for row in rows], totals.height, page)


def _entry(row: dict[str, Any]) -> dict[str, Any]:
    row = {
        **row,
        "first_ts": us_to_rfc3339(row["first_us"]),
        "last_ts": us_to_rfc3339(row["last_us"]),
    }
    return {name: row[name] for name in FIELDS}
