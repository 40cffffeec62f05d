"""Labels a block of code gives to every call made inside it: the conversation, the
customer, the kind of request.

    with cachewatch_client.session("conv-42", tenant="acme", scenario="triage"):
        client.chat.completions.create(...)

The labels live in a `ContextVar`, so they follow the code that set them: a thread
sees its own, an asyncio task the ones of the code that created it. Nested blocks
add to the outer one (a given value wins, attributes merge). A call's labels are
read when it starts, in the caller's context.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Labels:
    """What a record says about who made a call (contract section 1's fields)."""

    session_id: str | None = None
    tenant: str | None = None
    scenario: str | None = None
    deploy: str | None = None
    attributes: Mapping[str, str | int | float | bool] = field(default_factory=dict)

    def over(self, outer: Labels) -> Labels:
        """These labels, with `outer`'s where these have none."""
        return Labels(
            session_id=self.session_id or outer.session_id,
            tenant=self.tenant or outer.tenant,
            scenario=self.scenario or outer.scenario,
            deploy=self.deploy or outer.deploy,
            attributes={**outer.attributes, **self.attributes},
        )


_NONE = Labels()
_current: ContextVar[Labels] = ContextVar("cachewatch_labels", default=_NONE)


def current() -> Labels:
    """The labels of the code running now."""
    return _current.get()


@contextmanager
def session(
    session_id: str | None = None,
    *,
    tenant: str | None = None,
    scenario: str | None = None,
    deploy: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Labels]:
    """Label every call made inside the block (module docstring)."""
    labels = Labels(session_id, tenant, scenario, deploy, dict(attributes or {}))
    token = _current.set(labels.over(_current.get()))
    try:
        yield _current.get()
    finally:
        _current.reset(token)
