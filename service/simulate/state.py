"""A service's mutable state during a run (release tag, prompt mode flags,
replicas), and how it renders the static start of its prompts."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from service.simulate.cache import ReplicaPool
from service.simulate.prompt import EMPTY, Hashed, Piece, hash_prompt, label_cid, mix64
from service.simulate.prompt import segment_hash as seg_hash
from service.simulate.scenario import (
    CacheTtlChoice,
    DynamicSystemPrefix,
    Fanout,
    HistoryRewrite,
    Service,
)
from service.simulate.traffic import Normals

Segment = dict[str, Any]


def segment(name: str, pieces: list[Piece]) -> Segment:
    return {"name": name, "hash": seg_hash(pieces), "tokens": sum(t for _, t in pieces)}


def message(name: str, piece: Piece) -> Segment:
    # A message's content id is already unique to its content: no hashing needed.
    return {"name": name, "hash": f"{piece[0]:016x}", "tokens": piece[1]}


class ServiceState:
    """A service's mutable state: release tag, prompt mode flags, replicas."""

    def __init__(self, spec: Service, index: int, seed: int) -> None:
        self.spec = spec
        self.index = index
        self.name = spec.name
        self.block_size = spec.block_size
        self.deploy = spec.deploy
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
        self.dynamic: DynamicSystemPrefix | None = None
        self.shuffled = False
        self.rewrite: HistoryRewrite | None = None
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
        self.canonical: dict[str, tuple[list[Piece], Segment]] = {}
        for name, pieces in (
            ("system", [self.system_piece]),
            ("tools", self.tool_pieces),
            ("response_format", [self.rf_piece]),
        ):
            kept = [pc for pc in pieces if pc[1] > 0]
            if kept:
                self.canonical[name] = (kept, segment(name, kept))
        self.static_pieces, self.static_segments = self._compose(0.0, 0)
        self.static_base = hash_prompt(self.static_pieces, self.block_size)
        self._users: dict[int, tuple[list[Piece], list[Segment]]] = {}

    def _compose(self, t_epoch: float, user: int) -> tuple[list[Piece], list[Segment]]:
        pieces: list[Piece] = []
        segments: list[Segment] = []
        for name in self.spec.prompt.order:
            if name not in self.canonical:
                continue
            part, described = self.canonical[name]
            if name == "system" and self.dynamic is not None:
                dyn = self.dynamic
                label = int(t_epoch // dyn.granularity_s) if dyn.source == "time" else user
                part = [(label_cid(self.name, dyn.source, label), dyn.tokens), *part]
                described = segment(name, part)
            elif name == "tools" and self.shuffled:
                part = list(part)
                self.rnd.shuffle(part)
                described = segment(name, part)
            pieces.extend(part)
            segments.append(described)
        return pieces, segments

    def static(self, t_epoch: float, user: int) -> tuple[list[Piece], list[Segment], Hashed]:
        """The static start at this instant for this user, and a hashing base."""
        if self.dynamic is None and not self.shuffled:
            return self.static_pieces, self.static_segments, self.static_base
        pieces, segments = self._compose(t_epoch, user)
        return pieces, segments, EMPTY

    def user_context(self, user: int) -> tuple[list[Piece], list[Segment]]:
        tokens = self.spec.prompt.user_context_tokens
        if tokens <= 0:
            return [], []
        cached = self._users.get(user)
        if cached is None:
            pieces = [(label_cid(self.name, "user_context", user), tokens)]
            cached = (pieces, [segment("user_context", pieces)])
            self._users[user] = cached
        return cached
