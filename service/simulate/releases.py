"""The releases that serve a service's requests, and how each builds the prompts of
each of its scenarios.

A service serves one release at a time: its deploy tag and, per scenario, a
`PromptMode` (what the timeline's prompt actions did to that scenario's prompt).
During a canary it serves two side by side, in the same minutes: the stable release
and the canary, which takes a share of the requests (drawn request by request, as a
load balancer's weights split them) with its own tag and prompts. Rolling the canary
out to all the traffic makes it the stable release; rolling it back drops it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from service.simulate.scenario import (
    Action,
    AppendOnlyHistory,
    CanonicalTools,
    Change,
    DynamicSystemPrefix,
    HistoryRewrite,
    ShuffledTools,
    StaticSystemPrefix,
)


@dataclass(frozen=True, slots=True)
class PromptMode:
    """How one scenario's prompts are built: something variable at the top of the
    system prompt, tools in a floating order, the history summarized each turn."""

    dynamic: DynamicSystemPrefix | None = None
    shuffled: bool = False
    rewrite: HistoryRewrite | None = None

    @property
    def static_start(self) -> bool:
        """Nothing varies the start: it is the same text for every request."""
        return self.dynamic is None and not self.shuffled

    def apply(self, action: Action) -> PromptMode:
        """This mode after the action (an action on serving leaves it as it is)."""
        match action:
            case DynamicSystemPrefix():
                return replace(self, dynamic=action)
            case StaticSystemPrefix():
                return replace(self, dynamic=None)
            case ShuffledTools():
                return replace(self, shuffled=True)
            case CanonicalTools():
                return replace(self, shuffled=False)
            case HistoryRewrite():
                return replace(self, rewrite=action)
            case AppendOnlyHistory():
                return replace(self, rewrite=None)
        return self


@dataclass(frozen=True, slots=True)
class Release:
    """A deploy tag, the prompt mode of each scenario under it (by the index of the
    service's renderings), and the share of the requests it serves."""

    tag: str | None
    modes: tuple[PromptMode, ...]
    share: float = 1.0

    def changed(self, action: Action, scenario: int | None) -> Release:
        """The release with the action applied to one scenario, or to all (None)."""
        modes = tuple(
            mode.apply(action) if scenario is None or i == scenario else mode
            for i, mode in enumerate(self.modes)
        )
        return replace(self, modes=modes)


class Releases:
    """What serves a service's requests: the stable release and, during a canary,
    the canary. Without a canary no draw is taken: a run without rollouts draws
    what it drew before they existed."""

    def __init__(self, tag: str | None, scenarios: int, rnd: random.Random) -> None:
        self.stable = Release(tag, (PromptMode(),) * scenarios)
        self.canary: Release | None = None
        self._rnd = rnd

    def pick(self) -> Release:
        """The release serving the next request."""
        canary = self.canary
        if canary is None or self._rnd.random() >= canary.share:
            return self.stable
        return canary

    def apply(self, change: Change, scenario: int | None) -> None:
        """A timeline change: without a tag it acts on every release that serves;
        with one it starts, widens, completes or (share 0) rolls back a rollout."""
        action = change.action
        if change.deploy is None:
            self.stable = self.stable.changed(action, scenario)
            if self.canary is not None:
                self.canary = self.canary.changed(action, scenario)
            return
        share = 1.0 if change.share is None else change.share
        if share <= 0.0:
            self.canary = None
            return
        canary = self.canary
        base = canary if canary is not None and canary.tag == change.deploy else self.stable
        release = replace(base.changed(action, scenario), tag=change.deploy, share=share)
        if share >= 1.0:
            self.stable, self.canary = release, None
        else:
            self.canary = release


def check_rollouts(service: str, initial_tag: str | None, changes: Sequence[Change]) -> None:
    """A service's tagged changes (in time order) must make sense as rollouts: a
    canary takes a tag that is not the stable one, and a rollback names the canary
    that runs."""
    stable, canary = initial_tag, None
    for change in changes:
        if change.deploy is None:
            continue
        share = 1.0 if change.share is None else change.share
        if share <= 0.0:
            if change.deploy != canary:
                raise ValueError(
                    f"{service!r}: rollback of {change.deploy!r}, which is no running canary"
                )
            canary = None
        elif share < 1.0:
            if change.deploy == stable:
                raise ValueError(f"{service!r}: canary {change.deploy!r} is already the stable tag")
            canary = change.deploy
        else:
            stable, canary = change.deploy, None
