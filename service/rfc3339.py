"""How every answer writes a time: RFC 3339 in UTC with a `Z` (contract section 6).
Shared by the read API, the services, Slack messages and the dashboard; what the
ingest side accepts as a time is `service.ingest.timestamps`."""

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def us_to_rfc3339(ts_us: int) -> str:
    """Epoch microseconds -> RFC 3339 in UTC with a `Z`, as every answer gives times.
    Times outside what a datetime holds (only in a database written before the
    accepted range of `service.ingest.timestamps` was enforced) are written at the
    nearest end of it."""
    try:
        moment = _EPOCH + timedelta(microseconds=ts_us)
    except OverflowError:
        moment = (datetime.max if ts_us > 0 else datetime.min).replace(tzinfo=UTC)
    return moment.isoformat().replace("+00:00", "Z")
