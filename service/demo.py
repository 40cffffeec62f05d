"""`cachewatch demo`: the whole product on the embedded database, end to end.

A corporate assistant (a long system prompt and 14 tools, many users, a daily
curve) is simulated for four days with three "harmless"
releases and their fixes: the current time and company name at the top of the
system prompt (first to a 10% canary, an hour later to everyone; fixed by moving
that context to the tail), tools gathered from an unordered plugin registry (fixed
by sorting them), a scale-out to 4 replicas with round-robin (fixed by
prefix-affinity routing). Beside its chat it writes ticket summaries (`TICKET_SUMMARY`,
a scenario with a prompt of its own, about 5% of its prompt tokens), and on the
first day a release puts the ticket number at the top of that scenario's system
prompt for a few hours: the service's hit rate moves by a few points, the
scenario's falls to nothing. Beside it, a research assistant on Anthropic's API
whose users pause about ten minutes between turns ships a release that drops its
prompt cache TTL from 1 hour to 5 minutes (fixed by asking for the hour again). And
one problem no release introduces, there from the first minute: the assistant's two
chat front ends, its web chat (60% of the chat sessions) and its API agent (40%),
render the system prompt with one and two trailing newlines (`RENDERINGS`, the
records' `scenario`): two cache entries for one prompt, a template drift that no
change point can find. The demo writes its own models file, so both models have
prices and every regression a cost. The records are posted to a real server over
HTTP as a log shipper would; then detection runs, each regression is printed with
its group (a scenario, a tenant, a canary), cause, attribution and cost, then the
findings of the four days (worst first, one line each: kind, service, segment,
share of the prompt tokens, dollars a day, the fix), alerts go to Slack (or a local
sink), and the dashboard is left served."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from service import migrate
from service.alerts.delivery import deliver_due
from service.alerts.money import NO_PRICES, usd_per_day
from service.alerts.wording import cost_line, pct
from service.db import make_engine, make_sessionmaker
from service.server_process import free_port, start_server, stop_server
from service.services.tokens import Scope, create_token
from service.settings import Settings
from service.simulate import (
    CanonicalTools,
    Change,
    DailyCurve,
    Deploy,
    DynamicSystemPrefix,
    LengthDist,
    PromptStructure,
    Rendering,
    Routing,
    ScaleReplicas,
    Scenario,
    Service,
    ShuffledTools,
    SimulationResult,
    StaticSystemPrefix,
    post_events,
    post_records,
    simulate,
    token_counts,
)
from service.simulate.builders import ttl_release_story
from service.simulate.scenario import CACHE_TTL_S, DAY_S, DEFAULT_CACHE_TTL, DEFAULT_START
from service.slack_sink import SlackSink, message_headline, start_slack_sink

HOUR_S = 3600.0
SERVICE = "corporate-assistant"
MODEL = "acme-chat-70b"
RESEARCH = "research-assistant"
#: The corporate assistant's two front ends, from the first minute: the web chat
#: renders the system prompt with one trailing newline, the API agent with two (one
#: token more). Same prompt, two cache entries: a template drift no release made.
RENDERINGS = (
    Rendering("web-chat", 0.6),
    Rendering("api-agent", 0.4, system_extra_tokens=1),
)
#: Its ticket summaries, beside the chat: one request each, long instructions and an
#: output schema, then the ticket. 1.0 against the chat's 0.6 + 0.4: half the
#: sessions, about 5% of the prompt tokens (a chat session is seven growing turns).
TICKET_SUMMARY = Rendering(
    "ticket-summary",
    1.0,
    prompt=PromptStructure(
        system_tokens=2_400,
        response_format_tokens=350,
        query=LengthDist(900, 0.5, 50, 6_000),
        reply=LengthDist(180, 0.4, 20, 1_000),
        turns_mean=1.0,
        max_turns=1,
    ),
)
#: The share of the requests release v3.5.0 goes to first, an hour before all of them.
CANARY_SHARE = 0.1
#: USD per million tokens (input, cache read, 5-minute cache write): Anthropic's
#: list prices for Claude Sonnet 4.5, 2025-12. Both demo models are priced so.
PRICES = (3.00, 0.30, 3.75)
#: Claude Sonnet's one-hour cache write, 2x the input price: for the managed model.
ONE_HOUR_WRITE_PRICE = 6.00


def demo_scenario(seed: int = 7, peak_rate: float = 0.8) -> Scenario:
    """Four working days; one release of the corporate assistant a day at 10:00
    and its fix at 15:00 (the first day's only for the ticket summaries, from 11:00;
    the second day's to a 10% canary at 10:00, to everyone at 11:00); on the last
    day the research assistant's TTL release at 11:00 and its fix at 14:00."""
    prompt = PromptStructure(
        system_tokens=1_200,
        tool_tokens=(60, 75, 50, 80, 45, 70, 65, 55, 60, 75, 50, 70, 40, 65),
        query=LengthDist(150, 0.6, 5, 4_000),
        tool_result=LengthDist(1_000, 0.7, 20, 8_000),
        reply=LengthDist(350, 0.5, 10, 4_000),
        turns_mean=7.0,
        max_turns=30,
        think_time_s=LengthDist(45, 0.8, 3, 1_800),
    )
    service = Service(
        name=SERVICE,
        model=MODEL,
        prompt=prompt,
        peak_rate=peak_rate,
        curve=DailyCurve(night=0.08),
        users=3_000,
        replicas=1,
        routing="prefix_affinity",
        kv_tokens=4_194_304,
        block_size=256,
        cache_key="session",
        deploy="v3.4.0",
        renderings=(*RENDERINGS, TICKET_SUMMARY),
    )

    def at(day: int, hour: float) -> float:
        return day * DAY_S + hour * HOUR_S

    research, research_timeline = ttl_release_story(at(3, 11), at(3, 14), name=RESEARCH)
    greeting = "greet users with the current time and company name"
    timeline = (
        Change(
            at(0, 11),
            SERVICE,
            DynamicSystemPrefix("request"),
            deploy="v3.4.1",
            description="ticket summaries: name the ticket first",
            scenario=TICKET_SUMMARY.scenario,
        ),
        Change(
            at(0, 15),
            SERVICE,
            StaticSystemPrefix(),
            deploy="v3.4.2",
            description="ticket summaries: the ticket number goes with the ticket",
            scenario=TICKET_SUMMARY.scenario,
        ),
        Change(
            at(1, 10),
            SERVICE,
            DynamicSystemPrefix("time"),
            deploy="v3.5.0",
            description=greeting,
            share=CANARY_SHARE,
        ),
        Change(at(1, 11), SERVICE, Deploy(), deploy="v3.5.0", description=greeting),
        Change(
            at(1, 15),
            SERVICE,
            StaticSystemPrefix(),
            deploy="v3.5.1",
            description="move the greeting context to the end of the prompt",
        ),
        Change(
            at(2, 10),
            SERVICE,
            ShuffledTools(),
            deploy="v3.6.0",
            description="gather tools from the plugin registry",
        ),
        Change(
            at(2, 15), SERVICE, CanonicalTools(), deploy="v3.6.1", description="sort tools by name"
        ),
        Change(at(3, 10), SERVICE, ScaleReplicas(4, "round_robin")),
        Change(
            at(3, 15),
            SERVICE,
            Routing("prefix_affinity"),
            description="routing: prefix affinity on the session key",
        ),
        *research_timeline,
    )
    return Scenario(
        name="demo",
        services=(service, research),
        duration_s=4 * DAY_S,
        timeline=timeline,
        start=DEFAULT_START,
        seed=seed,
    )


def models_file(scenario: Scenario) -> str:
    """The demo's models file (contract section 4a): one rule per model, with
    PRICES. A model served by a managed provider gets that provider's caching
    rules (its default TTL, its minimum); one served by the simulated replicas
    gets none (a self-hosted engine: no TTL, no minimum), only the prices."""
    rules: list[str] = []
    for spec in scenario.services:
        lines = ["[[model]]", f"match = {json.dumps(spec.model)}"]
        if spec.managed is not None:
            lines.append(f"provider = {json.dumps(spec.managed.name)}")
            lines.append(f"ttl_s = {CACHE_TTL_S[DEFAULT_CACHE_TTL]:g}")
            lines.append(f"min_prompt_tokens = {spec.managed.min_prompt_tokens}")
        names = ("input_usd_per_mtok", "cached_usd_per_mtok", "write_usd_per_mtok")
        lines.extend(f"{name} = {price:.2f}" for name, price in zip(names, PRICES, strict=True))
        if spec.managed is not None:
            lines.append(f"write_1h_usd_per_mtok = {ONE_HOUR_WRITE_PRICE:.2f}")
        rules.append(f"# {spec.name}\n" + "\n".join(lines) + "\n")
    return "# Written by `cachewatch demo` (CACHEWATCH_MODELS_FILE).\n\n" + "\n".join(rules)


@dataclass
class DemoServer:
    url: str
    process: subprocess.Popen[bytes]


def _check_port_free(port: int) -> None:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise SystemExit(
                f"port {port} is in use: stop what listens there or pass --port"
            ) from None


def _start_server(env: dict[str, str], port: int, log: Path) -> DemoServer:
    _check_port_free(port)
    return DemoServer(f"http://127.0.0.1:{port}", start_server(env, port, log))


def _prepare_database(database_url: str) -> tuple[str, str]:
    """Migrate the demo database and make its ingest and admin tokens."""
    engine = make_engine(Settings(database_url=database_url, run_jobs=False))
    try:
        migrate.upgrade(engine)
        with make_sessionmaker(engine).begin() as session:
            return (
                create_token(session, Scope.INGEST, "demo"),
                create_token(session, Scope.ADMIN, "demo"),
            )
    finally:
        engine.dispose()


def run_demo(folder: Path, port: int, keep_serving: bool = True) -> list[dict[str, Any]]:
    """Run the story; returns the regressions found (contract JSON)."""
    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    database = folder / "cachewatch-demo.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    scenario = demo_scenario()
    models = folder / "models.toml"
    models.write_text(models_file(scenario))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env.update(
        CACHEWATCH_DATABASE_URL=f"sqlite:///{database}",
        CACHEWATCH_MODELS_FILE=str(models),
        CACHEWATCH_PUBLIC_READ="true",
        CACHEWATCH_PUBLIC_URL=f"http://127.0.0.1:{port}",
        CACHEWATCH_RUN_JOBS="false",
    )
    sink = None
    if os.environ.get("CACHEWATCH_SLACK_WEBHOOK_URL"):
        env["CACHEWATCH_SLACK_WEBHOOK_URL"] = os.environ["CACHEWATCH_SLACK_WEBHOOK_URL"]
    else:
        sink_path = folder / "slack-messages.jsonl"
        sink_path.unlink(missing_ok=True)
        sink = start_slack_sink(sink_path, free_port())
        env["CACHEWATCH_SLACK_WEBHOOK_URL"] = sink.url
    ingest, admin = _prepare_database(env["CACHEWATCH_DATABASE_URL"])
    server = _start_server(env, port, folder / "server.log")
    print(f"cachewatch is serving {server.url} (SQLite at {database})", flush=True)
    try:
        result = simulate(scenario)
        names = " and ".join(spec.name for spec in scenario.services)
        print(
            f"simulated 4 days of {names}: {len(result.records):,} requests, "
            f"{len(result.events)} posted change events ({_since(started)})",
            flush=True,
        )
        for spec in scenario.services:
            line = groups_line(result, spec.name)
            if line is not None:
                print(line, flush=True)
        post_events(server.url, ingest, result.events)
        stats = post_records(server.url, ingest, result.records, batch_size=2_000)
        print(
            f"posted like a log shipper: {stats.accepted:,} records accepted in "
            f"{stats.batches} batches, {stats.rejected} rejected ({_since(started)})",
            flush=True,
        )
        answer = httpx.post(
            f"{server.url}/v1/detect", headers={"Authorization": f"Bearer {admin}"}, timeout=600
        )
        answer.raise_for_status()
        regressions = sorted(answer.json(), key=lambda r: r["change_ts"])
        print(f"\n{len(regressions)} regressions ({_since(started)}):", flush=True)
        for r in regressions:
            _print_regression(r)
        found = httpx.get(
            f"{server.url}/v1/findings", headers={"Authorization": f"Bearer {admin}"}, timeout=600
        )
        found.raise_for_status()
        print(f"\n{len(found.json())} findings, worst first ({_since(started)}):", flush=True)
        for f in found.json():
            print(finding_line(f), flush=True)
        _deliver_alerts(env, sink)
        print(f"\ndone in {time.monotonic() - started:.0f} s. Dashboard: {server.url}/", flush=True)
        if keep_serving:
            print("Ctrl-C stops the server.", flush=True)
            server.process.wait()
        return regressions
    except KeyboardInterrupt:
        return []
    finally:
        stop_server(server.process)
        if sink is not None:
            sink.stop()


def _since(started: float) -> str:
    return f"at {time.monotonic() - started:.0f} s"


def _deliver_alerts(env: dict[str, str], sink: SlackSink | None) -> None:
    """Send the queued alerts now (the server's alerts job would, on its interval)."""
    settings = Settings(
        database_url=env["CACHEWATCH_DATABASE_URL"],
        slack_webhook_url=env["CACHEWATCH_SLACK_WEBHOOK_URL"],
        public_url=env["CACHEWATCH_PUBLIC_URL"],
        run_jobs=False,
    )
    engine = make_engine(settings)
    try:
        factory = make_sessionmaker(engine)
        sent = 0
        for _ in range(20):  # one message a second per webhook; a few digests at most
            report = deliver_due(factory, settings)
            sent += report.sent
            if report.messages == 0:
                break
    finally:
        engine.dispose()
    if sink is None:
        print(f"\nalerts: {sent} sent to CACHEWATCH_SLACK_WEBHOOK_URL", flush=True)
        return
    messages = sink.messages()
    print(
        f"\nalerts: no CACHEWATCH_SLACK_WEBHOOK_URL set, so {sent} alerts went to a local "
        f"Slack sink ({sink.url}) as {len(messages)} messages, saved in {sink.path}:",
        flush=True,
    )
    for payload in messages:
        print(f"  > {message_headline(payload)}", flush=True)


def groups_line(result: SimulationResult, service: str) -> str | None:
    """The groups of one service's traffic: each scenario's share of its prompt
    tokens, and how many tenants it served; None when it has neither."""
    tokens: Counter[str] = Counter()
    tenants: set[str] = set()
    for record in result.records:
        if record["service"] == service:
            if "scenario" in record:
                tokens[record["scenario"]] += token_counts(record)[0]
            if "tenant" in record:
                tenants.add(record["tenant"])
    parts = []
    if tokens:
        total = sum(tokens.values())
        shares = ", ".join(f"{name} {pct(n / total)}" for name, n in tokens.most_common())
        parts.append(f"scenarios {shares} of prompt tokens")
    if tenants:
        parts.append(f"{len(tenants):,} tenants")
    return f"{service}: {'; '.join(parts)}" if parts else None


def subject(r: dict[str, Any]) -> str:
    """Whom a regression is about: the whole service, one of its scenarios or
    tenants, or a canary (its newer deploy tag)."""
    group = r.get("group")
    if not isinstance(group, dict):
        return str(r["service"])
    if group["by"] != "deploy":
        return f"{group['by']} `{group['value']}` of {r['service']}"
    canary = r.get("canary")
    share = f" ({pct(canary['share'])} of requests)" if isinstance(canary, dict) else ""
    return f"canary deploy {group['value']} of {r['service']}{share}"


def _print_regression(r: dict[str, Any]) -> None:
    before, after = r["before"], r["after"]
    attribution = r["attributed_to"]
    assert isinstance(before, dict) and isinstance(after, dict)
    if isinstance(attribution, dict):
        what = attribution.get("deploy") or f"{attribution.get('replicas')} replicas"
        lag = f"lag {attribution['lag_s']:.0f} s"
        source = f"{attribution['kind']} {what} ({attribution['source']}, {lag})"
    else:
        source = "no change event nearby"
    print(
        f"- {r['change_ts']}  {subject(r)}  hit rate {before['hit_rate']:.0%} -> "
        f"{after['hit_rate']:.0%}  cause {r['cause']}  after {source}  [{r['status']}]"
    )
    print(f"    {cost_line(r) or f'cost: {NO_PRICES}'}")
    for line in r["evidence"] or []:
        print(f"    {line}")


def finding_line(f: dict[str, Any]) -> str:
    """One finding (contract section 5b) on one line: kind, service, segment, since
    when, share of the prompt tokens, dollars a day (`no prices` without), the fix."""
    segment = f" `{f['segment']}`" if f.get("segment") else ""
    return (
        f"- {f['kind']}  {f['service']}{segment}  since {f['since']}  "
        f"{pct(f['share_of_prompt_tokens'])} of prompt tokens  "
        f"{usd_per_day(f['wasted_usd_per_day'])}  fix: {f['fix']}"
    )
