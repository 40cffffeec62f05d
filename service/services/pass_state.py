"""What both analytics passes (the relational one, service.services.analytics_pass,
and ClickHouse's, service.services.clickhouse_pass) share: the names of their
cursor and state, the report of a pass, and the first hour a pass can rebuild
exactly. Here so that neither pass imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from service.analytics._arrays import UNBOUNDED_US
from service.repository import retention as retention_repo
from service.timeunits import HOUR_US as _HOUR_US

CURSOR = "usage"
STATE = "reuse"


@dataclass(frozen=True)
class PassReport:
    records: int
    #: The first hour whose rollups were rebuilt (None: only forward records).
    recomputed_from_us: int | None
    #: Records committed before the step began (up to `until_id`) are left for
    #: another step.
    more: bool = False
    #: The highest id the step aimed at: pass it as the next step's `until_id` to
    #: stop at the records committed before the first step began.
    until_id: int = field(default=0, compare=False)

    def plus(self, step: PassReport) -> PassReport:
        """This report followed by the next step's: records added, the earliest
        rebuilt hour, and whether that step left more."""
        rebuilt = [h for h in (self.recomputed_from_us, step.recomputed_from_us) if h is not None]
        return PassReport(
            self.records + step.records, min(rebuilt, default=None), step.more, step.until_id
        )


def exact_from_us(session: Session, window_us: int) -> int | None:
    """The first hour whose results can still be rebuilt exactly: every record from
    W before it is on record (retention deletes only before its horizon). None:
    retention never ran, every record can be (those before 1970 too)."""
    horizon = retention_repo.get_horizon(session)
    if horizon is None:
        return None
    if window_us >= UNBOUNDED_US:  # W made unbounded after retention ran: best effort
        window_us = 0
    return -(-(horizon + window_us) // _HOUR_US) * _HOUR_US
