"""A regression's episode: a further drop while the series is still down becomes a
regression of its own only when a change event explains it."""

from service.detection.changepoints import Drop, Segment, separate_episodes


def drop(at: int, recovered_at: int | None, level_before: float = 0.7) -> Drop:
    return Drop(
        at,
        Segment(at - 10, at, level_before, 10.0),
        Segment(at, at + 10, level_before - 0.3, 10.0),
        recovered_at,
    )


def test_a_deeper_unexplained_drop_inside_an_open_regression_is_the_same_episode() -> None:
    kv_cut, night = drop(100, None), drop(150, None, level_before=0.4)
    assert separate_episodes([kv_cut, night], explained=lambda d: False) == [kv_cut]


def test_an_explained_drop_inside_an_open_regression_is_its_own() -> None:
    kv_cut, deploy = drop(100, None), drop(150, None, level_before=0.4)
    assert separate_episodes([kv_cut, deploy], explained=lambda d: d.at == 150) == [
        kv_cut,
        deploy,
    ]


def test_a_drop_after_recovery_is_new_even_without_an_event() -> None:
    first, second = drop(100, 140), drop(150, None)
    assert separate_episodes([first, second], explained=lambda d: False) == [first, second]


def test_recovery_after_the_second_drop_keeps_it_in_the_episode() -> None:
    first, second = drop(100, 160), drop(150, None)
    assert separate_episodes([first, second], explained=lambda d: False) == [first]


def test_the_first_drop_needs_no_event() -> None:
    only = drop(100, None)
    assert separate_episodes([only], explained=lambda d: False) == [only]
