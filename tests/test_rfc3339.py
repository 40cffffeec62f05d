"""How answers write times (`service.rfc3339`)."""

from service.ingest.timestamps import parse_ts
from service.rfc3339 import us_to_rfc3339


def test_every_int64_formats() -> None:
    """Times stored before the range was enforced still format (at the ends)."""
    assert us_to_rfc3339(-(2**63)) == "0001-01-01T00:00:00Z"
    assert us_to_rfc3339(2**63 - 1) == "9999-12-31T23:59:59.999999Z"


def test_rfc3339_output() -> None:
    assert us_to_rfc3339(parse_ts("2023-11-14T22:13:20Z")) == "2023-11-14T22:13:20Z"
    assert us_to_rfc3339(parse_ts("2023-11-14T22:13:20Z") + 5) == "2023-11-14T22:13:20.000005Z"
