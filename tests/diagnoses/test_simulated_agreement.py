"""The agreement of a simulated managed API's own miss diagnoses with what
cachewatch finds, through ingest, the analytics pass and the diagnosis rollups.

The simulation (`simulate`; `bench/diagnoses.py` runs it larger):

* Traffic: `sessions` conversations of service `agent` on `claude-sonnet-4-5`,
  started uniformly over `hours`, each of 3 to 12 turns a few seconds to
  1.5 minutes apart. A prompt is a list of parts, each a content id (a
  *variant*) and a token count: `tools` (700 tokens, one variant shared by every
  session: the application's tool list), `system` (900 tokens, one variant per
  session: it carries the session's start time), then `message[0]`,
  `message[1]`, ... Each turn appends the previous answer and a new user message
  (append-only history).
* Fingerprints: the simulator's chained block hashes over the parts' content ids
  (`service.simulate.prompt.hash_prompt`, 64-token blocks), so equal prefixes give
  equal hashes; the record carries its full blocks' as hex, with `segments` (the
  parts: name, variant, tokens), `session_id`, `prompt_tokens` and `ts`.
* What is served (`service.simulate.managed`): one `PromptCache` per model at
  the simulator's 64-token granularity, 5-minute TTL, minimum prompt 1,024
  tokens for Sonnet (4,096 for Opus 4.5, as docs/providers.md lists), a request's
  writes readable after its TTFT (1 s); the record's `usage` is
  `anthropic_usage(...)` of what the cache served.
* Injected between turns, each drawn independently with its own probability
  (`Rates`): a new system variant (a timestamp), a new tools variant (reordered
  tools: a permutation of its own), a rewritten history (a new variant of
  `message[k]`, k >= 1, the messages after it re-sent), one turn on
  `claude-opus-4-5`, a pause longer than the TTL (expiry: no structural change);
  a turn with none of them is unchanged.
* The provider's diagnosis of each turn after the first compares it with the
  session's previous turn, structure only, by the simulator's rule
  (`service.simulate.diagnostics.diagnosis`: the earliest divergence in the
  prompt's order, model, tools, system, messages), with
  `cache_missed_input_tokens` the prompt tokens from the divergence point; no
  divergence: `"diagnostics": null`. 5% of those turns are `unavailable` instead;
  a session's first turn carries none.

Why the figures hold (`test_simulated_diagnoses_agree`, which prints the table):

* Every diagnosed record is counted once, under the reason it sent: the table's
  counts equal the simulator's, exactly; `unavailable` is listed, not compared.
* `tools_changed`: a new tools variant is unseen from the prompt's first token:
  `prefix_instability` in `tools`.
* `system_changed`: the tools blocks are seen (every session sends them, so the
  provider keeps them warm too) and the first block that differs from the
  session's previous turn is the one holding the end of tools and the start of
  system (tokens 640-703): `tools+system`, which agrees, also when a pause on the
  same turn expired what was reusable (what changed comes first).
* `messages_changed`: the change lies in the messages: `history_rewrite`, or
  `none` when the rewritten message is near the end (within the rewrite rule's
  10% slack). Such a late rewrite on a turn with a pause is the rewarm it also
  is (`expiry`): the few that differ, under the lower bar (0.8).
* `model_changed`: the session's previous request went to another model
  (cachewatch's `model_switch`), both for the switch and for the switch back
  (where the session's own prefix may still be in Sonnet's cache from two turns
  before: no prompt change tells it, the session's model does).
* Where cachewatch differs on any reason, it found a rewarm, never another place
  of change: `expiry` on a turn with a pause.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import polars as pl
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service import repository
from service.analytics.requests import compute_request_metrics
from service.diagnoses.agreement import Agreement, agreement, table_text
from service.diagnoses.reasons import EXPECTED
from service.diagnoses.verdicts import verdicts
from service.profiles import profiles_for
from service.repository.diagnoses import diagnosis_counts
from service.rollups.aggregate import join_results
from service.services import analytics_pass
from service.settings import Settings
from service.simulate.diagnostics import TurnView, diagnosis
from service.simulate.managed import PromptCache, anthropic_usage
from service.simulate.prompt import EMPTY, Hashed, Piece, hash_prompt, label_cid

T0 = 1_764_374_400  # 2025-11-29T00:00:00Z
SERVICE = "agent"
MODEL = "claude-sonnet-4-5"
OTHER_MODEL = "claude-opus-4-5"
#: The minimum cacheable prompt per model (docs/providers.md).
MIN_PROMPT_TOKENS = {MODEL: 1024, OTHER_MODEL: 4096}
BLOCK_SIZE = 64
TTL_S = 300.0
TTFT_S = 1.0
TOOLS_TOKENS = 700
SYSTEM_TOKENS = 900
BATCH = 5000
#: Below the default body limit (`CACHEWATCH_MAX_BODY_BYTES`, 10 MiB as sent).
BODY_BYTES = 8 << 20

#: Figures the test asserts (the task's bar; see the module docstring).
MIN_SHARE = {
    "system_changed": 0.9,
    "tools_changed": 0.9,
    "messages_changed": 0.8,
    "model_changed": 0.9,
}
MIN_OVERALL = 0.85


@dataclass(frozen=True)
class Rates:
    """Per turn after the first, the probability of each injected change (drawn
    independently), and of a diagnosis being `unavailable`."""

    system: float = 0.06
    tools: float = 0.04
    rewrite: float = 0.06
    model: float = 0.03
    pause: float = 0.08
    unavailable: float = 0.05


@dataclass(frozen=True)
class Part:
    name: str
    variant: str  # a content id: equal ids, equal tokens
    tokens: int


@dataclass
class Turn:
    """One request as the simulated caller sends it."""

    session: str
    index: int
    at_s: float
    model: str
    parts: tuple[Part, ...]
    #: What changed since the previous turn (`back`: on Sonnet again after Opus).
    injected: tuple[str, ...] = ()
    reason: str | None = None  # the provider's diagnosis (None: `diagnostics` null)
    missed: int | None = None
    hashes: list[str] = field(default_factory=list)  # as the record sends them
    hashed: Hashed = field(default_factory=lambda: EMPTY)

    @property
    def request_id(self) -> str:
        return f"{self.session}-t{self.index}"

    @property
    def prompt_tokens(self) -> int:
        return sum(p.tokens for p in self.parts)


@dataclass
class Simulation:
    turns: list[Turn]  # in time order
    records: list[dict[str, Any]]
    generated: Counter[str]  # the provider's diagnoses by reason

    @property
    def compared(self) -> Counter[str]:
        return Counter({r: n for r, n in self.generated.items() if r in EXPECTED})


def _piece(part: Part) -> Piece:
    return (label_cid(part.variant), part.tokens)


def hashed(turn: Turn, before: Hashed = EMPTY) -> Hashed:
    """The turn's prompt hashed as the simulator hashes one
    (`service.simulate.prompt.hash_prompt`), from its previous turn's; the record
    carries its full blocks' hashes, as hex."""
    turn.hashed = hash_prompt([_piece(p) for p in turn.parts], BLOCK_SIZE, before)
    full = turn.prompt_tokens // BLOCK_SIZE
    turn.hashes = [f"{h:016x}" for h in turn.hashed.hashes[:full]]
    return turn.hashed


def _view(turn: Turn) -> TurnView:
    """The turn as the provider's fingerprint holds it (`service.simulate.diagnostics`)."""
    static = [
        {"name": p.name, "hash": p.variant, "tokens": p.tokens}
        for p in turn.parts
        if not p.name.startswith("message[")
    ]
    messages = [_piece(p) for p in turn.parts if p.name.startswith("message[")]
    return TurnView.of(turn.model, static, messages)


def diagnose(before: Turn, turn: Turn) -> tuple[str | None, int | None]:
    """The provider's reason for `turn` against the session's previous turn, and
    its estimate of the tokens after the divergence (structure only), by the
    simulator's own rule (`service.simulate.diagnostics.diagnosis`)."""
    said = diagnosis(_view(before), _view(turn))
    if said is None:
        return None, None
    reason = said["cache_miss_reason"]
    return reason["type"], reason.get("cache_missed_input_tokens")


def plan_session(
    rng: random.Random, n: int, start_s: float, rates: Rates, shared_tools: bool = True
) -> list[Turn]:
    """One conversation's turns, with the changes injected and diagnosed; its tools
    are the application's (`shared_tools`) or its own."""
    sid = f"s{n}"
    tools = Part("tools", "tools:app" if shared_tools else f"tools:{sid}:0", TOOLS_TOKENS)
    system = Part("system", f"system:{sid}:0", SYSTEM_TOKENS)
    messages = [Part("message[0]", f"{sid}:m0:0", rng.randint(30, 400))]
    turns = [Turn(sid, 0, start_s, MODEL, (tools, system, *messages))]
    at = start_s
    for t in range(1, rng.randint(3, 12)):
        injected: list[str] = []
        pause = rng.random() < rates.pause
        at += rng.uniform(TTL_S + 30, TTL_S + 1500) if pause else rng.uniform(5, 90)
        if pause:
            injected.append("pause")
        if rng.random() < rates.system:
            system = Part("system", f"system:{sid}:{t}", SYSTEM_TOKENS)
            injected.append("system")
        if rng.random() < rates.tools:
            tools = Part("tools", f"tools:{sid}:{t}", TOOLS_TOKENS)
            injected.append("tools")
        if rng.random() < rates.rewrite and len(messages) > 1:
            k = rng.randint(1, len(messages) - 1)
            old = messages[k]
            messages[k] = Part(
                old.name, f"{sid}:m{k}:{t}", max(10, old.tokens + rng.randint(-20, 20))
            )
            injected.append("rewrite")
        model = MODEL
        if rng.random() < rates.model:
            model = OTHER_MODEL
            injected.append("opus")
        elif turns[-1].model != MODEL:
            injected.append("back")
        j = len(messages)
        messages.append(Part(f"message[{j}]", f"{sid}:m{j}:0", rng.randint(80, 800)))
        messages.append(Part(f"message[{j + 1}]", f"{sid}:m{j + 1}:0", rng.randint(20, 300)))
        turn = Turn(sid, t, at, model, (tools, system, *messages), tuple(injected))
        turn.reason, turn.missed = diagnose(turns[-1], turn)
        if rng.random() < rates.unavailable:
            turn.reason, turn.missed = "unavailable", None
        turns.append(turn)
    return turns


def _record(turn: Turn, usage: dict[str, Any]) -> dict[str, Any]:
    diagnostics: dict[str, Any] | None = None
    if turn.reason is not None:
        why: dict[str, Any] = {"type": turn.reason}
        if turn.missed is not None:
            why["cache_missed_input_tokens"] = turn.missed
        diagnostics = {"cache_miss_reason": why}
    out: dict[str, Any] = {
        "request_id": turn.request_id,
        "ts": round(T0 + turn.at_s, 3),
        "service": SERVICE,
        "model": turn.model,
        "session_id": turn.session,
        "prompt_tokens": turn.prompt_tokens,
        "usage": usage,
        "ttft_ms": TTFT_S * 1000,
        "block_size": BLOCK_SIZE,
        "block_hashes": turn.hashes,
        "segments": [{"name": p.name, "hash": p.variant, "tokens": p.tokens} for p in turn.parts],
    }
    if turn.index > 0:  # the first turn sends `previous_message_id: null`: no key here
        out["diagnostics"] = diagnostics
    return out


def simulate(
    sessions: int,
    seed: int,
    hours: float = 3.0,
    rates: Rates | None = None,
    shared_tools: bool = True,
) -> Simulation:
    """`sessions` conversations over `hours`, served by the simulated provider."""
    rng = random.Random(seed)
    rates = rates or Rates()
    turns: list[Turn] = []
    for n in range(sessions):
        planned = plan_session(rng, n, rng.uniform(0, hours * 3600), rates, shared_tools)
        before = EMPTY
        for turn in planned:
            before = hashed(turn, before)
        turns.extend(planned)
    turns.sort(key=lambda t: (t.at_s, t.session, t.index))
    caches = {m: PromptCache(minimum) for m, minimum in MIN_PROMPT_TOKENS.items()}
    records = []
    for turn in turns:
        cache, now = caches[turn.model], turn.at_s
        served = cache.read(turn.hashes, turn.prompt_tokens, BLOCK_SIZE, now)
        cache.write(turn.hashes, served, BLOCK_SIZE, now, now + TTFT_S, TTL_S)
        records.append(_record(turn, anthropic_usage(served, TTL_S, rng.randint(50, 600))))
    generated = Counter(t.reason for t in turns if t.reason is not None)
    return Simulation(turns, records, generated)


def bodies(records: Sequence[dict[str, Any]]) -> list[bytes]:
    """The records as NDJSON bodies of at most `BATCH` records and `BODY_BYTES`."""
    out: list[bytes] = []
    lines: list[bytes] = []
    size = 0
    for r in records:
        line = orjson.dumps(r)
        if lines and (len(lines) == BATCH or size + len(line) + 1 > BODY_BYTES):
            out.append(b"\n".join(lines))
            lines, size = [], 0
        lines.append(line)
        size += len(line) + 1
    if lines:
        out.append(b"\n".join(lines))
    return out


def post_records(post: Callable[[bytes], Any], records: Sequence[dict[str, Any]]) -> int:
    """POST the records (`post(body)` answers an HTTP response); the number accepted."""
    accepted = 0
    for body in bodies(records):
        answer = post(body)
        assert answer.status_code == 200, answer.text
        outcome = answer.json()
        assert outcome["rejected"] == 0, outcome["errors"][:3]
        accepted += outcome["accepted"]
    return accepted


def request_verdicts(session: Session, settings: Settings) -> pl.DataFrame:
    """cachewatch's verdict of every diagnosed request, with its `request_id`:
    the pass's per-request computation again (`service.diagnoses.verdicts` over
    `join_results`), for the details the rollups sum away."""
    frame = repository.load_usage_frame(session, extra_columns=("request_id",))
    frame = profiles_for(settings).annotate(frame)
    results, _ = compute_request_metrics(frame, settings.reuse_window_s)
    joined = join_results(frame, results)
    diagnosed = joined.filter(pl.col("provider_miss_reason").is_not_null())
    found = verdicts(diagnosed)
    assert found["ts_us"].to_list() == diagnosed["ts_us"].to_list()
    return found.with_columns(diagnosed["request_id"])


def disagreements(simulation: Simulation, found: pl.DataFrame) -> pl.DataFrame:
    """The compared diagnoses cachewatch does not agree with, per provider reason,
    what the simulator injected on that turn and what cachewatch found. Each
    group's agreement is `agreement`'s own, on the group's per-request rows."""
    by_id = {t.request_id: t for t in simulation.turns}
    injected = ["+".join(by_id[i].injected) for i in found["request_id"]]
    keys = ["reason", "injected", "verdict", "segment"]
    rows = found.with_columns(pl.Series("injected", injected, pl.String))
    out = []
    for group in rows.partition_by(keys):
        first = group.row(0, named=True)
        result = agreement(group.with_columns(pl.lit(1).alias("requests")))
        if result.compared and result.agreed < result.compared:
            out.append({k: first[k] for k in keys} | {"requests": group.height})
    frame = pl.DataFrame(out, schema={**{k: pl.String() for k in keys}, "requests": pl.Int64()})
    order = ["reason", "requests", "injected", "verdict", "segment"]
    return frame.sort(order, descending=[False, True, False, False, False])


@dataclass
class Outcome:
    simulation: Simulation
    counts: pl.DataFrame  # diagnosis_counts
    result: Agreement
    differ: pl.DataFrame  # disagreements
    seconds: dict[str, float]


def run(
    post: Callable[[bytes], Any],
    session: Session,
    settings: Settings,
    sessions: int,
    seed: int,
    hours: float = 3.0,
    shared_tools: bool = True,
) -> Outcome:
    """The simulation, posted, passed and summed: the test's and the bench's path."""
    started = time.perf_counter()
    simulation = simulate(sessions, seed, hours, shared_tools=shared_tools)
    simulated = time.perf_counter()
    accepted = post_records(post, simulation.records)
    assert accepted == len(simulation.records)
    posted = time.perf_counter()
    analytics_pass.catch_up(session, settings)
    passed = time.perf_counter()
    counts = diagnosis_counts(session, services=[SERVICE])
    result = agreement(counts)
    read = time.perf_counter()
    differ = disagreements(simulation, request_verdicts(session, settings))
    seconds = {
        "simulate": simulated - started,
        "post": posted - simulated,
        "pass": passed - posted,
        "read": read - passed,
        "details": time.perf_counter() - read,
    }
    return Outcome(simulation, counts, result, differ, seconds)


def report(outcome: Outcome) -> str:
    """The agreement table, what was injected and generated, where cachewatch
    differs, and the seconds of each stage."""
    sim = outcome.simulation
    injected = Counter(k for t in sim.turns for k in t.injected)
    lines = [
        f"{len(sim.records):,} requests in {len({t.session for t in sim.turns}):,} sessions",
        f"injected: {dict(sorted(injected.items()))}",
        f"provider diagnoses: {dict(sorted(sim.generated.items()))}",
        "",
        table_text(outcome.result),
        "",
        "where cachewatch differs: provider reason, injected on that turn -> found (requests)",
    ]
    for r in outcome.differ.iter_rows(named=True):
        where = f" in {r['segment']}" if r["segment"] else ""
        said = f"  {r['reason']:<18}{r['injected'] or '-':<22}"
        lines.append(f"{said}-> {r['verdict']}{where} ({r['requests']})")
    lines.append("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in outcome.seconds.items()))
    return "\n".join(lines)


SESSIONS, SEED = 300, 7


def counted_exactly(outcome: Outcome) -> bool:
    """The table counts each reason's diagnoses as the simulator generated them."""
    rows = {row.reason: row.requests for row in outcome.result.rows}
    return rows == dict(outcome.simulation.generated)


def test_simulated_diagnoses_agree(
    client: TestClient, session: Session, settings: Settings, ingest_headers: dict[str, str]
) -> None:
    def post(body: bytes) -> Any:
        return client.post("/v1/usage", content=body, headers=ingest_headers)

    outcome = run(post, session, settings, SESSIONS, SEED)
    print(report(outcome))
    result, sim = outcome.result, outcome.simulation
    rows = {row.reason: row for row in result.rows}
    # Every diagnosis the simulator generated is counted once, under its reason.
    assert counted_exactly(outcome), (dict(sim.generated), {r: v.requests for r, v in rows.items()})
    assert set(sim.compared) == set(MIN_SHARE)  # every injected change was diagnosed
    assert {r for r, row in rows.items() if row.kind == "compared"} == set(sim.compared)
    assert rows["unavailable"].kind == "no_reason"
    assert result.compared == sum(sim.compared.values())
    for reason, least in MIN_SHARE.items():
        share = rows[reason].share
        assert share is not None and share >= least, (reason, share)
    assert result.share is not None and result.share >= MIN_OVERALL, result.share
    # Where they differ, cachewatch found a rewarm: a pause's expiry, or an Opus
    # prompt below the minimum.
    for r in outcome.differ.iter_rows(named=True):
        cause = {"expiry": "pause", "below_minimum": "opus"}.get(r["verdict"])
        assert cause is not None and cause in r["injected"].split("+"), r
