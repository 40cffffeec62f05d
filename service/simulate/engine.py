"""The event loop: sessions arrive, each turn builds a prompt, is routed to a
replica, is served from that replica's cache, and becomes a usage record.

Events are processed in time order (timeline changes before requests at the
same instant). Nothing depends on dict order of unordered data or on Python's
salted hash(): the output is a function of the scenario and the seed alone.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.analytics.definitions import ratios
from service.ingest.records import UsageRecordIn
from service.simulate.cache import ReplicaCache, key_hash
from service.simulate.diagnostics import TurnView, diagnosis
from service.simulate.managed import PromptCache, Served, anthropic_usage, split_prompt
from service.simulate.prompt import EMPTY, Hashed, Piece, hash_prompt, mix64
from service.simulate.releases import PromptMode, Release, check_rollouts
from service.simulate.scenario import (
    CACHE_TTL_S,
    PROMPT_ACTIONS,
    AgentSession,
    CacheTtl,
    Change,
    Fanout,
    HistoryRewrite,
    KvBudget,
    PromptStructure,
    Routing,
    ScaleReplicas,
    Scenario,
    Service,
    TrafficMultiplier,
)
from service.simulate.state import Segment, ServiceState, message
from service.simulate.timefmt import TsFormatter
from service.simulate.traffic import geometric, poisson_arrivals, sample_length

Record = dict[str, Any]
_MASK64 = (1 << 64) - 1
_CHANGE, _TURN, _CALL = 0, 1, 2
_REPLICA_ACTIONS = (ScaleReplicas, Routing, KvBudget)
MAX_BLOCK_HASHES = 8192  # the contract's limit; longer prompts send their first blocks


@dataclass
class SimulationResult:
    """Records in time order and the posted change events. Records of one run
    share their static `segments` entries: copy one before changing it."""

    records: list[Record]
    events: list[dict[str, Any]]

    def hit_rate(self) -> float:
        """The hit rate (RATIOS["hit_rate"]) of every simulated request; 0.0 for none."""
        counts = [token_counts(r) for r in self.records]
        sums = {
            "prompt_tokens": sum(prompt for prompt, _ in counts),
            "cached_tokens": sum(cached for _, cached in counts),
        }
        return ratios(sums, ["hit_rate"])["hit_rate"] or 0.0


def token_counts(record: Record) -> tuple[int, int]:
    """A record's (prompt_tokens, cached_tokens) as ingest reads them (contract
    section 1): its own fields, else ingest's reading of its provider `usage`."""
    if "prompt_tokens" in record:
        return int(record["prompt_tokens"]), int(record.get("cached_tokens", 0))
    parsed = UsageRecordIn.model_validate(record)
    return parsed.prompt_tokens, parsed.cached_tokens


@dataclass(slots=True)
class _Session:
    sid: str
    user: int
    key: int | None  # hashed cache_key, for routing
    key_str: str | None
    turns_left: int
    history: list[Piece]  # append-only truth: query, reply, query, reply...
    history_segments: list[Segment]  # segments of the first messages of `history`
    last: Hashed  # the previous turn's prompt, base of incremental hashing
    last_turn_start: int = 0  # index in `history` of the last exchange's first piece
    rendering: int = 0  # which of the service's renderings its prompts take
    tenant: str | None = None
    prompt: PromptStructure | None = None  # lengths of its own (an AgentSession's)
    rewrite: HistoryRewrite | None = None  # summarizes its history whatever the release
    view: TurnView | None = None  # the previous turn as its provider's diagnostics saw it
    diagnosis: dict[str, Any] | None = None  # this turn's, by them (managed, when asked)


class Engine:
    """Runs one scenario with one seed; iterate `records()` once."""

    def __init__(self, scenario: Scenario, seed: int | None = None) -> None:
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.run_id = scenario.run_id or f"{scenario.name}-s{self.seed}"
        self.fmt = TsFormatter(scenario.start)
        self.start_epoch = self.fmt.start_us / 1e6
        self.services = [ServiceState(s, i, self.seed) for i, s in enumerate(scenario.services)]
        self.by_name = {s.name: s for s in self.services}
        for change in scenario.timeline:
            _check_change(change, self.by_name)
        ordered = sorted(scenario.timeline, key=lambda c: c.at_s)
        for spec in scenario.services:
            check_rollouts(spec.name, spec.deploy, [c for c in ordered if c.service == spec.name])
        self.prompt_caches = _prompt_caches(scenario)
        self._uid_salt = mix64(self.seed ^ 0x5EED)
        self._uid_counter = 0
        self._agents = 0
        self._seq = 0
        self._requests = 0
        self._sessions = 0
        self._heap: list[tuple[float, int, int, int, Any]] = []

    def _uid(self) -> int:
        """A fresh content id (a new message, summary or context)."""
        self._uid_counter += 1
        return mix64((self._uid_salt + self._uid_counter) & _MASK64)

    def _push(self, t: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, kind, payload))

    def _arrivals(self) -> tuple[np.ndarray, np.ndarray]:
        times: list[np.ndarray] = []
        owners: list[np.ndarray] = []
        sc = self.scenario
        for state in self.services:
            spec = state.spec
            steps = sorted(
                (c.at_s, c.action.factor)
                for c in sc.timeline
                if c.service == spec.name and isinstance(c.action, TrafficMultiplier)
            )
            rng = np.random.default_rng([self.seed, state.index, 0xA771])
            sessions_rate = spec.peak_rate / _turns_per_session(spec)
            t = poisson_arrivals(rng, sc.duration_s, sessions_rate, spec.curve, sc.start, steps)
            times.append(t)
            owners.append(np.full(len(t), state.index, dtype=np.int64))
        all_t = np.concatenate(times) if times else np.empty(0)
        all_o = np.concatenate(owners) if owners else np.empty(0, dtype=np.int64)
        order = np.argsort(all_t, kind="stable")
        return all_t[order], all_o[order]

    def records(self) -> Iterator[Record]:
        for change in sorted(self.scenario.timeline, key=lambda c: c.at_s):
            self._push(change.at_s, _CHANGE, change)
        starts, owners = self._arrivals()
        start_list: list[float] = starts.tolist()
        owner_list: list[int] = owners.tolist()
        duration = self.scenario.duration_s
        heap = self._heap
        i, n = 0, len(start_list)
        while True:
            if i < n and (not heap or start_list[i] < heap[0][0]):
                t = start_list[i]
                state = self.services[owner_list[i]]
                i += 1
                yield self._turn(state, self._new_session(state), t)
                continue
            if not heap:
                return
            t, _, _, kind, payload = heapq.heappop(heap)
            if t >= duration:
                if i >= n:
                    return
                continue
            if kind == _CHANGE:
                self._apply(payload)
            elif kind == _TURN:
                state, session = payload
                yield self._turn(state, session, t)
            else:
                state, session, task = payload
                yield self._call(state, session, task, t)

    # -- requests ------------------------------------------------------------

    def _new_session(self, state: ServiceState) -> _Session:
        spec = state.spec
        rnd = state.rnd
        self._sessions += 1
        sid = f"{self.run_id}-{state.name}-{self._sessions}"
        user = rnd.randrange(max(spec.users, 1))
        key_str: str | None = None
        if spec.cache_key == "session":
            key_str = sid
        elif spec.cache_key == "user":
            key_str = f"{state.name}-u{user}"
        # The rendering and the tenant come from streams of their own.
        rendering = state.draw_rendering()
        prompt = state.prompt_of(rendering)
        turns = geometric(rnd, prompt.turns_mean, prompt.max_turns)
        key = key_hash(key_str) if key_str is not None else None
        return _Session(
            sid,
            user,
            key,
            key_str,
            turns,
            [],
            [],
            EMPTY,
            rendering=rendering,
            tenant=state.draw_tenant(),
        )

    def _turn(self, state: ServiceState, session: _Session, t: float) -> Record:
        """One turn of a session: its prompt is built and served, the exchange is
        appended to the session's history, and what follows is scheduled (the
        fanned-out calls and the next turn start when this one ends)."""
        release = state.releases.pick()
        hashed, segments, query = self._turn_prompt(state, session, t, release)
        completion = sample_length(state.normals, _prompt(state, session).reply)
        record, latency_s = self._serve(
            state, t, hashed, session.key, completion, segments, release.tag
        )
        record["session_id"] = session.sid
        if session.diagnosis is not None:
            record["diagnostics"] = session.diagnosis
        if session.key_str is not None:
            record["cache_key"] = session.key_str
        _tag_groups(state, session, record)
        self._extend_history(state, session, query, completion)
        session.turns_left -= 1
        end = t + latency_s
        self._schedule_fanout(state, session, end)
        self._schedule_next_turn(state, session, end)
        return record

    def _turn_prompt(
        self, state: ServiceState, session: _Session, t: float, release: Release
    ) -> tuple[Hashed, list[Segment], Piece]:
        """The turn's prompt (static start, user context, the history it carries, a
        new query) as the release serving it builds it, hashed from the session's
        previous prompt when there is one (the shared start is not hashed again),
        its listed segments, and the query."""
        mode = state.mode_of(release, session.rendering, session.tenant)
        static_pieces, static_segments, base = state.static(
            self.start_epoch + t, session.user, session.rendering, mode
        )
        user_pieces, user_segments = state.user_context(session.user, session.rendering)
        prompt = _prompt(state, session)
        query: Piece = (self._uid(), sample_length(state.normals, prompt.query))
        history, history_segments = self._prompt_history(session, mode)
        if session.last is not EMPTY:
            base = session.last
        pieces = [*static_pieces, *user_pieces, *history, query]
        self._diagnose(state, session, [*static_segments, *user_segments], [*history, query])
        hashed = hash_prompt(pieces, state.block_size, base)
        session.last = hashed
        segments = _listed_segments(
            [*static_segments, *user_segments],
            history,
            history_segments,
            query,
            state.spec.max_message_segments,
        )
        return hashed, segments, query

    def _diagnose(
        self, state: ServiceState, session: _Session, static: list[Segment], messages: list[Piece]
    ) -> None:
        """The turn's diagnosis by its provider, for a managed service whose callers
        ask for it (`ManagedProvider.diagnostics`): against the session's previous
        turn (`service.simulate.diagnostics`)."""
        managed = state.spec.managed
        if managed is None or not managed.diagnostics:
            return
        view = TurnView.of(state.spec.model, static, messages)
        session.diagnosis = diagnosis(session.view, view)
        session.view = view

    def _prompt_history(
        self, session: _Session, mode: PromptMode
    ) -> tuple[list[Piece], list[Segment]]:
        """The history the prompt carries and its segments: the session's own
        (append-only), or under HistoryRewrite, once there is an earlier exchange,
        a fresh summary of all but the last exchange followed by that exchange."""
        last_turn = session.last_turn_start
        rewrite = mode.rewrite or session.rewrite
        if rewrite is None or last_turn <= 0:
            return session.history, session.history_segments
        earlier = sum(tokens for _, tokens in session.history[:last_turn])
        summary: Piece = (self._uid(), max(1, round(rewrite.summary_ratio * earlier)))
        history = [summary, *session.history[last_turn:]]
        return history, [message(f"message[{i}]", pc) for i, pc in enumerate(history)]

    def _extend_history(
        self, state: ServiceState, session: _Session, query: Piece, completion: int
    ) -> None:
        """The session's history grows by this turn's query, its tool result (when
        the prompt structure has one) and the reply; the first messages, up to the
        service's `max_message_segments`, are also kept as segments."""
        tool_result = _prompt(state, session).tool_result
        added = [query]
        if tool_result is not None:
            added.append((self._uid(), sample_length(state.normals, tool_result)))
        added.append((self._uid(), completion))
        session.last_turn_start = len(session.history)
        limit = state.spec.max_message_segments
        for piece in added:
            if len(session.history) < limit:
                name = f"message[{len(session.history)}]"
                session.history_segments.append(message(name, piece))
            session.history.append(piece)

    def _schedule_fanout(self, state: ServiceState, session: _Session, end: float) -> None:
        """With the service's fanout share, the turn's end starts a task of K calls
        spread over `spread_ms`. The K calls share one context; the first call
        hashes it for all."""
        fan = state.fanout
        if fan is None or state.rnd.random() >= fan.share:
            return
        task: list[Any] = [(self._uid(), fan.context_tokens), None]
        offsets = sorted(state.rnd.uniform(0.0, fan.spread_ms / 1000.0) for _ in range(fan.k))
        for offset in offsets:
            self._push(end + offset, _CALL, (state, session, task))

    def _schedule_next_turn(self, state: ServiceState, session: _Session, end: float) -> None:
        """A session with turns left comes back after a think time."""
        if session.turns_left > 0:
            think = sample_length(state.normals, _prompt(state, session).think_time_s)
            self._push(end + think, _TURN, (state, session))

    def _call(self, state: ServiceState, session: _Session, task: list[Any], t: float) -> Record:
        """One of the K parallel calls of a fanned-out task (no session history).
        `task` is [context piece, hashed start shared by the K calls or None]."""
        fan = state.fanout
        reply_dist = fan.reply if fan is not None else _prompt(state, session).reply
        call_tokens = fan.call_tokens if fan is not None else 60
        release = state.releases.pick()
        mode = state.mode_of(release, session.rendering, session.tenant)
        static_pieces, static_segments, base = state.static(
            self.start_epoch + t, session.user, session.rendering, mode
        )
        user_pieces, user_segments = state.user_context(session.user, session.rendering)
        context: Piece = task[0]
        shared = [*static_pieces, *user_pieces, context]
        if task[1] is not None and task[1].pieces == shared:
            base = task[1]
        else:
            base = hash_prompt(shared, state.block_size, base)
            task[1] = base
        instruction: Piece = (self._uid(), call_tokens)
        hashed = hash_prompt([*shared, instruction], state.block_size, base)
        segments = [
            *static_segments,
            *user_segments,
            message("message[0]", context),
            message("message[1]", instruction),
        ]
        completion = sample_length(state.normals, reply_dist)
        record, _ = self._serve(state, t, hashed, session.key, completion, segments, release.tag)
        if session.key_str is not None:
            record["cache_key"] = session.key_str
        _tag_groups(state, session, record)
        return record

    def _serve(
        self,
        state: ServiceState,
        t: float,
        hashed: Hashed,
        key: int | None,
        completion: int,
        segments: list[Segment],
        tag: str | None,
    ) -> tuple[Record, float]:
        """Serve one request from the service's replicas, or from its managed
        provider's prompt cache; returns its record (carrying the deploy `tag` of
        the release that sent it) and its latency in seconds."""
        if state.spec.managed is not None:
            return self._serve_managed(state, t, hashed, completion, segments, tag)
        hashes = hashed.hashes
        replica: ReplicaCache = state.pool.route(hashes, key, t)
        run = state.short_read(replica.hit(hashes, t))
        prompt = hashed.tokens
        cached = min(prompt, run * state.block_size)
        ttft = self._ttft(state, prompt, cached)
        # In-flight prefill: the new blocks are reusable only after this TTFT.
        replica.admit(hashes, run, t + ttft / 1000.0, touched=True)
        latency = ttft + completion * state.spec.latency.per_output_token_ms
        replica.start(t + latency / 1000.0)
        record = self._record_head(state, t)
        record["prompt_tokens"] = prompt
        record["cached_tokens"] = cached
        record["completion_tokens"] = completion
        record["ttft_ms"] = round(ttft, 2)
        record["latency_ms"] = round(latency, 2)
        record["replica"] = replica.name
        self._record_tail(state, record, hashes, segments, tag)
        return record, latency / 1000.0

    def _serve_managed(
        self,
        state: ServiceState,
        t: float,
        hashed: Hashed,
        completion: int,
        segments: list[Segment],
        tag: str | None,
    ) -> tuple[Record, float]:
        """A request to a managed API: read and written as its prompt cache rules
        say, reported as the provider reports it (its `usage` object), with the
        TTL the caller asked for and no replica."""
        managed = state.spec.managed
        assert managed is not None and state.ttl is not None
        cache = self.prompt_caches[(managed.name, state.spec.model)]
        hashes = hashed.hashes
        served = _short_read(state, cache, cache.read(hashes, hashed.tokens, state.block_size, t))
        ttft = self._ttft(state, hashed.tokens, served.read)
        ttl_s = CACHE_TTL_S[state.ttl]
        cache.write(hashes, served, state.block_size, t, t + ttft / 1000.0, ttl_s)
        latency = ttft + completion * state.spec.latency.per_output_token_ms
        record = self._record_head(state, t)
        record["provider"] = managed.name
        record["usage"] = anthropic_usage(served, ttl_s, completion)
        record["cache_ttl_s"] = ttl_s
        record["ttft_ms"] = round(ttft, 2)
        record["latency_ms"] = round(latency, 2)
        self._record_tail(state, record, hashes, segments, tag)
        return record, latency / 1000.0

    def _ttft(self, state: ServiceState, prompt: int, cached: int) -> float:
        lat = state.spec.latency
        ttft = lat.base_ms + lat.per_uncached_token_ms * (prompt - cached)
        ttft += lat.per_cached_token_ms * cached
        if lat.jitter_sigma > 0:
            ttft *= math.exp(lat.jitter_sigma * state.normals())
        return ttft

    def _record_head(self, state: ServiceState, t: float) -> Record:
        self._requests += 1
        return {
            "request_id": f"{self.run_id}-{self._requests}",
            "ts": self.fmt(t),
            "service": state.name,
            "model": state.spec.model,
        }

    def _record_tail(
        self,
        state: ServiceState,
        record: Record,
        hashes: list[int],
        segments: list[Segment],
        tag: str | None,
    ) -> None:
        if tag is not None:
            record["deploy"] = tag
        record["block_size"] = state.block_size
        emitted = hashes[:MAX_BLOCK_HASHES]  # a copy: consumers may mutate records
        if self.scenario.hash_format == "hex":
            record["block_hashes"] = [f"{h:016x}" for h in emitted]
        else:
            record["block_hashes"] = emitted
        record["segments"] = segments

    def _agent_session(self, state: ServiceState, agent: AgentSession) -> _Session:
        """The session an AgentSession starts: on the service's first rendering, a
        user of its own, the agent's turns, lengths and history rewrite. Takes no
        draw from the service's streams."""
        self._agents += 1
        sid = f"{self.run_id}-{state.name}-agent{self._agents}"
        user = state.spec.users + self._agents
        key_str = {"session": sid, "user": f"{state.name}-u{user}"}.get(state.spec.cache_key or "")
        own = replace(
            state.prompt_of(0),
            query=agent.query,
            tool_result=agent.tool_result,
            reply=agent.reply,
            think_time_s=agent.think_time_s,
        )
        return _Session(
            sid,
            user,
            None if key_str is None else key_hash(key_str),
            key_str,
            agent.turns,
            [],
            [],
            EMPTY,
            tenant=agent.tenant,
            prompt=own,
            rewrite=agent.rewrite,
        )

    # -- timeline ------------------------------------------------------------

    def _apply(self, change: Change) -> None:
        state = self.by_name[change.service]
        action = change.action
        if change.tenant is not None:
            named = change.scenario
            index = None if named is None else state.spec.scenario_index(named)
            state.tenant_actions.setdefault(change.tenant, []).append((action, index))
            return
        if change.deploy is not None or isinstance(action, PROMPT_ACTIONS):
            named = change.scenario
            index = None if named is None else state.spec.scenario_index(named)
            state.releases.apply(change, index)
        match action:
            case ScaleReplicas():
                state.pool.resize(action.replicas)
                if action.routing is not None:
                    state.pool.set_policy(action.routing)
            case Routing():
                state.pool.set_policy(action.policy)
            case KvBudget():
                state.pool.set_kv_tokens(action.tokens_per_replica)
            case Fanout():
                state.fanout = action if action.k > 1 and action.share > 0 else None
            case CacheTtl():
                state.ttl = action.ttl
            case AgentSession():
                self._push(change.at_s, _TURN, (state, self._agent_session(state, action)))
            case _:
                pass  # a prompt action (applied above), or traffic (applied up front)


def _turns_per_session(spec: Service) -> float:
    """The mean turns of a session of the service, over its scenarios by their
    shares: sessions open at peak_rate / this, so that `peak_rate` stays the user
    turns per second whatever the scenarios' own turns."""
    own = [r for r in spec.renderings if r.prompt is not None]
    if not own:
        return max(spec.prompt.turns_mean, 1.0)
    total = sum(r.share for r in spec.renderings)
    return sum(
        r.share / total * max((r.prompt or spec.prompt).turns_mean, 1.0) for r in spec.renderings
    )


def _short_read(state: ServiceState, cache: PromptCache, served: Served) -> Served:
    """A managed read as served, or (read_miss_rate) a shorter one: the provider read
    fewer leading blocks and the request writes the rest."""
    if not served.read or state.spec.read_miss_rate <= 0.0:
        return served
    run = -(-served.read // state.block_size)
    short = state.short_read(run)
    if short >= run:
        return served
    return split_prompt(served.prompt_tokens, short, state.block_size, cache.min_prompt_tokens)


def _prompt(state: ServiceState, session: _Session) -> PromptStructure:
    """The lengths of a session's turns: its own (an agent's), else its rendering's."""
    return session.prompt if session.prompt is not None else state.prompt_of(session.rendering)


def _tag_groups(state: ServiceState, session: _Session, record: Record) -> None:
    """The record names its session's `scenario` and `tenant`, when the service has them."""
    scenario = state.scenario_of(session.rendering)
    if scenario is not None:
        record["scenario"] = scenario
    if session.tenant is not None:
        record["tenant"] = session.tenant


def _check_change(change: Change, services: dict[str, ServiceState]) -> None:
    """A timeline change must name a service, and act on what that service has:
    replicas for a self-hosted one, a cache lifetime for a managed one."""
    state = services.get(change.service)
    if state is None:
        raise ValueError(f"timeline names unknown service {change.service!r}")
    if change.scenario is not None:
        state.spec.scenario_index(change.scenario)
    if change.tenant is not None and not state.spec.has_tenant(change.tenant):
        raise ValueError(f"service {change.service!r} has no tenant {change.tenant!r}")
    managed = state.spec.managed is not None
    if managed and isinstance(change.action, _REPLICA_ACTIONS):
        raise ValueError(f"{change.service!r} is served by a managed API: it has no replicas")
    if not managed and isinstance(change.action, CacheTtl):
        raise ValueError(f"{change.service!r} has no managed provider to set a cache TTL for")


def _prompt_caches(scenario: Scenario) -> dict[tuple[str, str], PromptCache]:
    """One prompt cache per (provider, model): services sending the same prefix
    to the same managed model share it, as they share the provider's account."""
    caches: dict[tuple[str, str], PromptCache] = {}
    for spec in scenario.services:
        if spec.managed is not None:
            key = (spec.managed.name, spec.model)
            caches.setdefault(key, PromptCache(spec.managed.min_prompt_tokens))
    return caches


def _listed_segments(
    start: list[Segment],
    history: list[Piece],
    history_segments: list[Segment],
    query: Piece,
    limit: int,
) -> list[Segment]:
    """A turn's segments: the static start and user context, then the messages of
    the history and the query, at most `limit` message[i] entries (a long session
    lists its first messages only)."""
    segments = [*start, *history_segments]
    if len(history) < limit:
        segments.append(message(f"message[{len(history)}]", query))
    if len(history_segments) > limit:
        del segments[len(segments) - len(history_segments) + limit :]
    return segments


def iter_records(scenario: Scenario, seed: int | None = None) -> Iterator[Record]:
    """Stream the scenario's usage records in time order (bounded memory)."""
    return Engine(scenario, seed).records()


def simulate(scenario: Scenario, seed: int | None = None) -> SimulationResult:
    """Run the scenario: all its usage records and its posted change events."""
    from service.simulate.events import scenario_events

    return SimulationResult(list(iter_records(scenario, seed)), scenario_events(scenario))
