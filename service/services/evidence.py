"""A lasting drop checked on its records (`service.detection.evidence`): the
sessions of its opening hours must show it, not one session of a quiet hour."""

from sqlalchemy.orm import Session

from service.detection.changepoints import Drop
from service.detection.evidence import SessionSums, sessions_show_drop
from service.detection.series import Series
from service.repository import detection as detection_repo
from service.rollups.chart import Group
from service.services.regression_records import rule_of
from service.settings import Settings

_US = 1_000_000


def sessions_show(
    session: Session,
    settings: Settings,
    key: tuple[str, str],
    series: Series,
    drop: Drop,
    group: Group | None = None,
) -> bool:
    """Whether the records of the drop's opening hours (of the group's records only,
    for a group) show it session by session."""
    opening = drop.opening
    if opening is None:  # not judged on its buckets: nothing to check it against
        return True
    start = int(series.bucket_us[opening.start])
    end = int(series.bucket_us[opening.end - 1]) + settings.detect_bucket_s * _US
    where = None if group is None else (group.by, group.value)
    prompt, cached = detection_repo.session_sums(session, key[0], key[1], start, end, where)
    return sessions_show_drop(SessionSums(prompt, cached), opening.expected, rule_of(settings))
