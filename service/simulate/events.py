"""The contract change events (section 3) that a scenario's timeline posts."""

from __future__ import annotations

from typing import Any

from service.simulate.scenario import (
    AgentSession,
    AppendOnlyHistory,
    CacheTtl,
    CanonicalTools,
    Change,
    Deploy,
    DynamicSystemPrefix,
    Fanout,
    HistoryRewrite,
    KvBudget,
    Routing,
    ScaleReplicas,
    Scenario,
    ShuffledTools,
    StaticSystemPrefix,
    TrafficMultiplier,
)
from service.simulate.timefmt import TsFormatter

ChangeEvent = dict[str, Any]


def _budget(tokens: int | None) -> str:
    return "unbounded" if tokens is None else f"{tokens} tokens"


def describe(change: Change, kv: int | None, routing: str, replicas: int) -> str:
    """A human description of a change, given the service's state before it: what
    it does, to which scenario, and to which share of the requests."""
    text = _describe_action(change, kv, routing, replicas)
    if change.scenario is not None:
        text = f"scenario {change.scenario}: {text}"
    if change.tenant is not None:
        text = f"tenant {change.tenant}: {text}"
    if change.share is not None and change.share < 1.0:
        text += " (rolled back)" if change.share <= 0.0 else f" ({change.share:.0%} of requests)"
    return text


def _describe_action(change: Change, kv: int | None, routing: str, replicas: int) -> str:
    action = change.action
    match action:
        case Deploy():
            return "release with no serving or prompt change"
        case DynamicSystemPrefix():
            what = {"time": "the current time", "user": "the user name", "request": "a request id"}
            return f"system prompt now starts with {what[action.source]}"
        case StaticSystemPrefix():
            return "system prompt is static again"
        case ShuffledTools():
            return "tools serialized in random order"
        case CanonicalTools():
            return "tools serialized in canonical order"
        case HistoryRewrite():
            return "conversation history summarized on every turn"
        case AppendOnlyHistory():
            return "conversation history appended to again"
        case ScaleReplicas():
            text = f"replicas {replicas} -> {action.replicas}"
            if action.routing is not None and action.routing != routing:
                text += f", routing {routing} -> {action.routing}"
            return text
        case Routing():
            return f"routing policy {routing} -> {action.policy}"
        case KvBudget():
            return (
                f"KV cache budget per replica {_budget(kv)} -> {_budget(action.tokens_per_replica)}"
            )
        case Fanout():
            if action.k <= 1 or action.share <= 0:
                return "parallel fan-out calls turned off"
            return f"agent fans out {action.k} parallel calls sharing a fresh context"
        case TrafficMultiplier():
            return f"traffic x{action.factor:g}"
        case CacheTtl():
            return f"callers ask for a {action.ttl} cache TTL"
        case AgentSession():
            rewrite = ", summarizing its history every turn" if action.rewrite else ""
            return f"one agent session of {action.turns} turns{rewrite}"
    return type(action).__name__


def walk_timeline(scenario: Scenario) -> list[tuple[Change, str]]:
    """Each change in time order with the truth about it (its `describe`)."""
    state = {s.name: (s.kv_tokens, s.routing, s.replicas) for s in scenario.services}
    out: list[tuple[Change, str]] = []
    for change in sorted(scenario.timeline, key=lambda c: c.at_s):
        if change.service not in state:
            raise ValueError(f"timeline names unknown service {change.service!r}")
        kv, routing, replicas = state[change.service]
        out.append((change, describe(change, kv, routing, replicas)))
        action = change.action
        if isinstance(action, KvBudget):
            kv = action.tokens_per_replica
        elif isinstance(action, Routing):
            routing = action.policy
        elif isinstance(action, ScaleReplicas):
            replicas = action.replicas
            routing = action.routing or routing
        state[change.service] = (kv, routing, replicas)
    return out


def _rollout_note(change: Change, canary: str | None) -> str | None:
    """How far a release goes: to a share of the requests (a canary), or to all of
    them after a canary of the same tag; None for a plain release."""
    if change.partial and change.share is not None:
        return f"canary: {change.share:.0%} of requests"
    if change.deploy == canary and (change.share is None or change.share >= 1.0):
        return "rolled out to all requests"
    return None


def scenario_events(scenario: Scenario) -> list[ChangeEvent]:
    """Posted events of the timeline, in time order: `deploy` when a change sets
    a release tag (a canary's at its start, and again when it goes to all the
    requests; a rollback posts none), `config` for routing, KV-budget and cache TTL
    changes, `replicas` or `note` only when a change asks for posting explicitly. A
    release's description names only the release (as a deploy tool would) and how
    far it goes, not what it broke; config events say what changed (a tenant's own
    prompt change, posted, is a `config` event too)."""
    fmt = TsFormatter(scenario.start)
    models = {s.name: s.model for s in scenario.services}
    canaries: dict[str, str | None] = {}
    events: list[ChangeEvent] = []
    for change, truth in walk_timeline(scenario):
        action = change.action
        canary = canaries.get(change.service)
        if change.deploy is not None:
            canaries[change.service] = change.deploy if change.partial else None
        rollback = change.share is not None and change.share <= 0.0
        post = change.post
        if post is None:
            tagged = change.deploy is not None and not rollback
            post = tagged or isinstance(action, Routing | KvBudget | CacheTtl)
        if not post or change.at_s >= scenario.duration_s:
            continue
        if change.deploy is not None:
            kind = "deploy"
            description = change.description or f"release {change.deploy}"
            note = _rollout_note(change, canary)
            if note is not None:
                description = f"{description} ({note})"
        else:
            if isinstance(action, ScaleReplicas):
                kind = "replicas"
            elif change.tenant is not None or isinstance(
                action, Routing | KvBudget | Fanout | CacheTtl
            ):
                kind = "config"
            else:
                kind = "note"
            description = change.description or truth
        events.append(
            {
                "ts": fmt(change.at_s),
                "service": change.service,
                "kind": kind,
                "model": models[change.service],
                "deploy": change.deploy,
                "replicas": action.replicas if isinstance(action, ScaleReplicas) else None,
                "description": description,
            }
        )
    return events
