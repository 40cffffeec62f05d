"""Pages of an ordered read (`GET /v1/groups`, `GET /v1/findings`, the dashboard's
lists): which entries to answer and how many the whole list holds, so a caller can
ask for the next page (docs/groups.md, "Pages")."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Page:
    """Which entries of an ordered list to answer: `limit` of them after the first
    `offset`."""

    limit: int
    offset: int = 0

    def of(self, items: Sequence[T]) -> list[T]:
        """This page of a list held whole."""
        return list(items[self.offset : self.offset + self.limit])


@dataclass(frozen=True)
class Paged:
    """One page of an ordered list and how many entries the whole list holds."""

    entries: list[Any]
    total: int
    page: Page

    @property
    def next_offset(self) -> int | None:
        """The offset of the next page, None at the end."""
        end = self.page.offset + len(self.entries)
        return end if self.entries and end < self.total else None
