"""The lab's phases, and what cachewatch is expected to say about each.

Each phase lasts several detection buckets (60 s in the lab) so a lasting drop
can be told from noise: the lab compresses a day into half an hour, so its minimum
duration of a drop is 3 buckets (`CACHEWATCH_DETECT_MIN_DURATION_S`=180, `MIN_DURATION_S`
in `service.lab.run`) where production's is 30 minutes:

1. `healthy`: one replica, release v1;
2. `v2-timestamp`: release v2 puts the current time and company at the top of
   the system prompt (a deploy event is posted, as a CI pipeline would);
3. `v3-fix`: release v3 takes it out again;
4. `scale-4-round-robin`: four replicas behind `round_robin` (no event posted:
   cachewatch must infer the replica change from the records);
5. `cache-aware`: the router switched to `cache_aware` (a posted `config` event);
6. `fanout-cold` then `fanout-warm`: batches of identical requests on a new
   shared start, fired at once (cold), then the same with the start warmed by
   one request first. They are a service of their own (`digest-batch`), beside
   the assistant's sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ASSISTANT: Final = "corporate-assistant"
FANOUT: Final = "digest-batch"


@dataclass(frozen=True)
class Phase:
    key: str
    minutes: float
    release: str  # the assistant's deploy tag
    replicas: int
    policy: str  # the router's
    fanout: str | None = None  # "cold" or "warm"
    event: str | None = None  # the change event the phase posts: deploy | config


PHASES: Final = (
    Phase("healthy", 5, "v1", 1, "round_robin"),
    Phase("v2-timestamp", 4, "v2", 1, "round_robin", event="deploy"),
    Phase("v3-fix", 4, "v3", 1, "round_robin", event="deploy"),
    Phase("scale-4-round-robin", 5, "v3", 4, "round_robin"),
    Phase("cache-aware", 4, "v3", 4, "cache_aware", event="config"),
    Phase("fanout-cold", 3, "v3", 4, "cache_aware", fanout="cold"),
    Phase("fanout-warm", 3, "v3", 4, "cache_aware", fanout="warm"),
)


@dataclass(frozen=True)
class Expected:
    """A regression the lab's phases must produce: opened by `opens` with `cause`,
    attributed to an event of `kind`, and resolved by `resolves`."""

    opens: str
    cause: str
    kind: str
    resolves: str


EXPECTED: Final = (
    Expected("v2-timestamp", "prefix_instability", "deploy", "v3-fix"),
    Expected("scale-4-round-robin", "routing", "replicas", "cache-aware"),
)


def scaled(phases: tuple[Phase, ...], factor: float) -> tuple[Phase, ...]:
    """The same plan with every phase `factor` times as long, in whole minutes (at
    least one): cachewatch reads whole minutes, so phases start and end on them."""
    return tuple(
        Phase(p.key, max(1, round(p.minutes * factor)), p.release, p.replicas, p.policy,
              p.fanout, p.event)
        for p in phases
    )  # fmt: skip
