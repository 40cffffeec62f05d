"""A service's mutable state during a run (the releases serving it, replicas,
fan-out, cache TTL), and how it renders the static start of its prompts.

A service with `renderings` renders its start one way per rendering (a session
keeps the one it drew, `draw_rendering`): the system prompt is the rendering's own
text, and every segment of the start also carries `norm_hash`, the hash of the part
as normalized: the service's canonical system text for `system` (what the renderings
share), the part itself for the others (tools in a floating order are no rendering
of one text: normalizing keeps their order). A rendering with a prompt of its own (a
scenario such as `ticket-summary`) has its own parts, each its own norm.

How a request's start is built also depends on the release serving it and on its
scenario (`releases.PromptMode`): a canary's prompt change, or one scenario's."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from service.simulate.cache import ReplicaPool
from service.simulate.prompt import EMPTY, Hashed, Piece, hash_prompt, label_cid, mix64
from service.simulate.prompt import segment_hash as seg_hash
from service.simulate.releases import PromptMode, Release, Releases
from service.simulate.scenario import (
    Action,
    CacheTtlChoice,
    Fanout,
    PromptStructure,
    Rendering,
    Service,
)
from service.simulate.traffic import Normals, TenantDraws

Segment = dict[str, Any]


def segment(name: str, pieces: list[Piece], norm: list[Piece] | None = None) -> Segment:
    """A segment of the start; with `norm` (the part as normalized), its `norm_hash`."""
    described: Segment = {
        "name": name,
        "hash": seg_hash(pieces),
        "tokens": sum(t for _, t in pieces),
    }
    if norm is not None:
        described["norm_hash"] = seg_hash(norm)
    return described


def message(name: str, piece: Piece) -> Segment:
    # A message's content id is already unique to its content: no hashing needed.
    return {"name": name, "hash": f"{piece[0]:016x}", "tokens": piece[1]}


class ServiceState:
    """A service's mutable state: the releases serving it, replicas, fan-out."""

    def __init__(self, spec: Service, index: int, seed: int) -> None:
        self.spec = spec
        self.index = index
        self.name = spec.name
        self.block_size = spec.block_size
        self.rnd = random.Random(mix64(seed * 1_000_003 + index))
        self.normals = Normals(np.random.default_rng([seed, index, 0x5A]))
        self.pool = ReplicaPool(
            spec.name,
            spec.replicas,
            spec.kv_tokens,
            spec.block_size,
            spec.routing,
            spec.affinity_blocks,
        )
        self.fanout: Fanout | None = None
        # What a managed service's callers ask for (CacheTtl changes it).
        self.ttl: CacheTtlChoice | None = None if spec.managed is None else spec.managed.ttl
        p = spec.prompt
        # Content ids name the text: a different length is a different text.
        self.system_piece: Piece = (
            label_cid(spec.name, "system", p.system_tokens),
            p.system_tokens,
        )
        self.tool_pieces: list[Piece] = [
            (label_cid(spec.name, "tool", i, tokens), tokens)
            for i, tokens in enumerate(p.tool_tokens)
        ]
        self.rf_piece: Piece = (
            label_cid(spec.name, "response_format", p.response_format_tokens),
            p.response_format_tokens,
        )
        self.renderings = [_Rendering(self, r) for r in spec.renderings] or [_Rendering(self)]
        total = sum(r.share for r in spec.renderings)
        self._cumulative = [
            sum(r.share for r in spec.renderings[: i + 1]) / total
            for i in range(len(spec.renderings))
        ]
        # A stream of its own: drawing renderings takes no draw from the others (the
        # sessions open when they would without renderings).
        self._rendering_rnd = random.Random(mix64(seed * 1_000_003 + index) ^ 0x5CE7A710)
        # Streams of their own too: which release serves a request during a canary,
        # and each session's tenant.
        canary_rnd = random.Random(mix64(seed * 1_000_003 + index) ^ 0xCA7A12)
        self.releases = Releases(spec.deploy, len(self.renderings), canary_rnd)
        self.tenants = (
            None
            if spec.tenants is None
            else TenantDraws(spec.tenants, np.random.default_rng([seed, index, 0x7E4A]))
        )
        self._users: dict[tuple[str | None, int], tuple[list[Piece], list[Segment]]] = {}
        self._requests = 0  # labels a request id at the top of the system prompt
        # Prompt actions of one tenant's own (Change(tenant=...)), with the scenario
        # each is limited to (None: all), applied on top of the serving release.
        self.tenant_actions: dict[str, list[tuple[Action, int | None]]] = {}
        # A stream of its own, drawn only when read_miss_rate > 0: a run without
        # short reads draws what it drew before they existed.
        self._miss_rnd = random.Random(mix64(seed * 1_000_003 + index) ^ 0x4EAD5)

    def mode_of(self, release: Release, rendering: int, tenant: str | None) -> PromptMode:
        """How a request of that rendering and tenant builds its prompt: as the release
        serving it says, then as the tenant's own changes say."""
        mode = release.modes[rendering]
        if tenant is None or not self.tenant_actions:
            return mode
        for action, scenario in self.tenant_actions.get(tenant, ()):
            if scenario is None or scenario == rendering:
                mode = mode.apply(action)
        return mode

    def short_read(self, run: int) -> int:
        """The cached leading blocks a request really reads: `run`, or with probability
        `read_miss_rate` a random shorter run (possibly none)."""
        rate = self.spec.read_miss_rate
        if rate <= 0.0 or run <= 0 or self._miss_rnd.random() >= rate:
            return run
        return self._miss_rnd.randrange(run)

    def draw_rendering(self) -> int:
        """The rendering of a new session (an index of `renderings`), by their shares."""
        if len(self.renderings) == 1:
            return 0
        u = self._rendering_rnd.random()
        return next((i for i, c in enumerate(self._cumulative) if u < c), len(self._cumulative) - 1)

    def draw_tenant(self) -> str | None:
        """The tenant of a new session (None: the service names none)."""
        return None if self.tenants is None else self.tenants()

    def scenario_of(self, rendering: int) -> str | None:
        """The `scenario` the records of that rendering carry (None: none)."""
        return self.renderings[rendering].scenario

    def prompt_of(self, rendering: int) -> PromptStructure:
        """The prompt structure of that rendering's sessions."""
        return self.renderings[rendering].prompt

    def _dynamic_label(self, mode: PromptMode, t_epoch: float, user: int) -> int:
        dyn = mode.dynamic
        assert dyn is not None
        if dyn.source == "time":
            return int(t_epoch // dyn.granularity_s)
        if dyn.source == "user":
            return user
        self._requests += 1
        return self._requests

    def _compose(
        self, t_epoch: float, user: int, rendering: _Rendering, mode: PromptMode
    ) -> tuple[list[Piece], list[Segment]]:
        pieces: list[Piece] = []
        segments: list[Segment] = []
        for name in rendering.prompt.order:
            if name not in rendering.canonical:
                continue
            part, described = rendering.canonical[name]
            if name == "system" and mode.dynamic is not None:
                dyn = mode.dynamic
                label = self._dynamic_label(mode, t_epoch, user)
                varying: Piece = (label_cid(self.name, dyn.source, label), dyn.tokens)
                part = [varying, *part]
                norm = None if rendering.norms is None else [varying, *rendering.norms[name]]
                described = segment(name, part, norm)
            elif name == "tools" and mode.shuffled:
                part = list(part)
                self.rnd.shuffle(part)
                described = segment(name, part, None if rendering.norms is None else part)
            pieces.extend(part)
            segments.append(described)
        return pieces, segments

    def static(
        self, t_epoch: float, user: int, rendering: int, mode: PromptMode
    ) -> tuple[list[Piece], list[Segment], Hashed]:
        """The static start at this instant for this user in that rendering, built
        as `mode` says, and a hashing base."""
        rendered = self.renderings[rendering]
        if mode.static_start:
            return rendered.pieces, rendered.segments, rendered.base
        pieces, segments = self._compose(t_epoch, user, rendered, mode)
        return pieces, segments, EMPTY

    def user_context(self, user: int, rendering: int) -> tuple[list[Piece], list[Segment]]:
        """The user's context, as that rendering's prompt has it (the renderings of
        the service's prompt share one; a prompt of its own has its own)."""
        rendered = self.renderings[rendering]
        tokens = rendered.prompt.user_context_tokens
        if tokens <= 0:
            return [], []
        key = (rendered.own, user)
        cached = self._users.get(key)
        if cached is None:
            label = label_cid(self.name, "user_context", user)
            if rendered.own is not None:
                label = label_cid(self.name, rendered.own, "user_context", user, tokens)
            pieces = [(label, tokens)]
            cached = (pieces, [segment("user_context", pieces)])
            self._users[key] = cached
        return cached


class _Rendering:
    """One rendering of a service's static start: its prompt structure (`prompt`;
    `own` names the scenario when the prompt is its own), its parts (`canonical`,
    each with its segment), the parts as normalized when the service has renderings
    (`norms`, None otherwise: no `norm_hash` is sent), and the start when nothing
    varies it (`pieces`, `segments`, `base`)."""

    def __init__(self, state: ServiceState, spec: Rendering | None = None) -> None:
        self.scenario = None if spec is None else spec.scenario
        own_prompt = None if spec is None else spec.prompt
        self.own = None if spec is None or own_prompt is None else spec.scenario
        self.prompt = state.spec.prompt if own_prompt is None else own_prompt
        self.canonical: dict[str, tuple[list[Piece], Segment]] = {}
        self.norms: dict[str, list[Piece]] | None = None if spec is None else {}
        for name, pieces, norm in self._parts(state, spec):
            kept = [pc for pc in pieces if pc[1] > 0]
            if not kept:
                continue
            if self.norms is not None:
                self.norms[name] = [pc for pc in norm if pc[1] > 0]
            normalized = None if self.norms is None else self.norms[name]
            self.canonical[name] = (kept, segment(name, kept, normalized))
        self.pieces, self.segments = state._compose(0.0, 0, self, PromptMode())
        self.base = hash_prompt(self.pieces, state.block_size)

    def _parts(
        self, state: ServiceState, spec: Rendering | None
    ) -> list[tuple[str, list[Piece], list[Piece]]]:
        """Each part of the start: its pieces and the pieces it normalizes to."""
        if self.own is not None:
            p, own = self.prompt, self.own
            system = [(label_cid(state.name, own, "system", p.system_tokens), p.system_tokens)]
            tools = [
                (label_cid(state.name, own, "tool", i, tokens), tokens)
                for i, tokens in enumerate(p.tool_tokens)
            ]
            rf_tokens = p.response_format_tokens
            rf = [(label_cid(state.name, own, "response_format", rf_tokens), rf_tokens)]
            return [
                ("system", system, system),
                ("tools", tools, tools),
                ("response_format", rf, rf),
            ]
        system_piece = state.system_piece
        if spec is not None:
            tokens = self.prompt.system_tokens + spec.system_extra_tokens
            label = label_cid(state.name, "system", self.prompt.system_tokens, spec.scenario)
            system_piece = (label, tokens)
        return [
            ("system", [system_piece], [state.system_piece]),
            ("tools", state.tool_pieces, state.tool_pieces),
            ("response_format", [state.rf_piece], [state.rf_piece]),
        ]
