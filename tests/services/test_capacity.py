"""services.capacity on the real database: which model's records are replayed
(the one there is, the one named, none: refused when several), only the records
with block hashes inside [from, to), and the answer's shape.
(tests/analytics/test_capacity.py checks the LRU replay itself.)"""

import pytest
from sqlalchemy.orm import Session

from service.services.capacity import AmbiguousModel, capacity
from tests.services.traffic import T0, US, rec, store


def answer(session: Session, model: str | None = None, **bounds: int) -> dict[str, object]:
    return capacity(
        session,
        model=model,
        from_us=bounds.get("from_us"),
        to_us=bounds.get("to_us"),
        sizes=[100, 200, 400],
    )


def test_the_only_model_is_replayed_without_naming_it(session: Session) -> None:
    """[1,2] is evicted by [3,4] from 2 blocks of capacity; 4 blocks keep it."""
    store(
        session,
        [
            rec("a", T0, [1, 2]),
            rec("b", T0 + 1, [3, 4]),
            rec("c", T0 + 2, [1, 2]),
            rec("no-blocks", T0 + 3, None, prompt_tokens=5000),  # not replayed
        ],
    )
    assert answer(session) == {
        "model": "m",
        "requests": 3,
        "block_size": 100,
        "ceiling": pytest.approx(200 / 600),
        "points": [
            {"tokens": 100, "hit_rate": 0.0},
            {"tokens": 200, "hit_rate": 0.0},
            {"tokens": 400, "hit_rate": pytest.approx(200 / 600)},
        ],
    }


def test_several_models_need_a_name_and_the_range_bounds_the_replay(session: Session) -> None:
    store(
        session,
        [
            rec("a", T0, [1, 2]),
            rec("b", T0 + 10, [1, 2]),
            rec("c", T0 + 20, [1, 2]),
            rec("other", T0 + 5, [1, 2], model="m2"),
        ],
    )
    with pytest.raises(AmbiguousModel):
        answer(session)
    assert answer(session, "m")["ceiling"] == pytest.approx(400 / 600)
    assert answer(session, "m2")["requests"] == 1 and answer(session, "m2")["ceiling"] == 0
    # [from, to): b alone, so nothing is reused.
    bounded = answer(session, "m", from_us=(T0 + 10) * US, to_us=(T0 + 20) * US)
    assert bounded["requests"] == 1 and bounded["ceiling"] == 0
    assert answer(session, "m", from_us=(T0 + 10) * US)["ceiling"] == pytest.approx(200 / 400)


def test_no_records_is_an_empty_curve(session: Session) -> None:
    assert answer(session) == {
        "model": None,
        "requests": 0,
        "block_size": None,
        "ceiling": None,
        "points": [{"tokens": t, "hit_rate": None} for t in (100, 200, 400)],
    }
