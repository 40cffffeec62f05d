"""service.repository.groups on the real database: the values detection may watch
never include the rest of an hour's values (`OTHER`), which the chart rows hold."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import ChartRollup
from service.repository import groups as groups_repo
from service.rollups import chart, groups
from service.services.analytics_pass import catch_up
from service.settings import Settings
from tests.services.traffic import T0, rec, store


def test_detection_never_watches_the_rest_of_the_values(
    session: Session, settings: Settings
) -> None:
    settings = settings.model_copy(update={"group_values_kept": 2})
    store(
        session,
        [rec(f"r{i}", T0 + i, [1, 2], tenant=f"t{i}", prompt_tokens=100 + i) for i in range(5)],
    )
    catch_up(session, settings)
    charted = set(
        session.scalars(
            select(ChartRollup.group_value).where(ChartRollup.group_by == "tenant").distinct()
        )
    )
    assert charted == {"t3", "t4", groups.OTHER}  # the read side lists the rest
    scope = chart.Scope(0, "assistant", "m")
    values = groups_repo.group_values(session, scope, "tenant", 3600, None, None)
    assert sorted(values["value"]) == ["t3", "t4"]
