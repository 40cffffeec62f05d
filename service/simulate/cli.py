"""`cachewatch simulate`: generate usage records from a scenario or a Mooncake
trace, to a file, stdout, or a cachewatch server."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, cast

import orjson
import typer

from service.simulate.builders import PrefixProblem, corporate_assistant_week, detection_week
from service.simulate.engine import iter_records, token_counts
from service.simulate.events import scenario_events
from service.simulate.mooncake import MOONCAKE_BLOCK_SIZE, iter_mooncake
from service.simulate.output import post_events, post_records, write_events, write_ndjson
from service.simulate.scenario import DEFAULT_START, RoutingPolicy, Scenario
from service.simulate.world import seasonal_world

app = typer.Typer(
    help="Simulate LLM traffic through replica KV caches and emit usage records.",
    no_args_is_help=True,
)


class ScenarioChoice(StrEnum):
    corporate_assistant = "corporate-assistant"
    detection_week = "detection-week"
    seasonal_world = "seasonal-world"


class PrefixProblemChoice(StrEnum):
    dynamic_system_prefix = "dynamic_system_prefix"
    shuffled_tools = "shuffled_tools"
    history_rewrite = "history_rewrite"


class RoutingChoice(StrEnum):
    round_robin = "round_robin"
    prefix_affinity = "prefix_affinity"
    least_loaded = "least_loaded"


class HashFormatChoice(StrEnum):
    integer = "int"
    hexadecimal = "hex"


OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Write NDJSON records here (default: stdout).")
]
PostOpt = Annotated[
    str | None, typer.Option("--post", help="Post to this cachewatch server URL instead.")
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="CACHEWATCH_TOKEN", help="Ingest token for --post."),
]
BatchOpt = Annotated[int, typer.Option("--batch-size", min=1, help="Records per POST.")]
StartOpt = Annotated[
    str | None,
    typer.Option(
        "--start",
        help="Simulated start: an RFC 3339 time, or 'now' for the last whole hour "
        "minus the duration (so the data ends now). Default 2025-03-03T00:00:00Z.",
    ),
]


def _parse_start(value: str | None, duration_s: float) -> datetime:
    if value is None:
        return DEFAULT_START
    if value == "now":
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        return hour - timedelta(seconds=duration_s)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"not an RFC 3339 time: {value}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class _Tally:
    """Counts records and tokens as they stream past."""

    def __init__(self) -> None:
        self.records = 0
        self.prompt = 0
        self.cached = 0

    def watch(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for record in records:
            self.records += 1
            prompt, cached = token_counts(record)
            self.prompt += prompt
            self.cached += cached
            yield record

    def summary(self, elapsed_s: float) -> str:
        rate = self.cached / self.prompt if self.prompt else 0.0
        return f"{self.records} records, hit rate {rate:.4f}, {elapsed_s:.1f} s"


def _emit(
    records: Iterable[dict[str, Any]],
    events: list[dict[str, Any]],
    out: Path | None,
    post: str | None,
    token: str | None,
    batch_size: int,
) -> None:
    tally = _Tally()
    started = time.monotonic()
    stream = tally.watch(records)
    if post is not None:
        if not token:
            raise typer.BadParameter("--post needs --token (or CACHEWATCH_TOKEN)")
        if out is not None:
            raise typer.BadParameter("choose one of --out and --post")
        post_events(post, token, events)
        stats = post_records(post, token, stream, batch_size)
        typer.echo(
            f"posted {stats.records} records in {stats.batches} batches: "
            f"{stats.accepted} accepted, {stats.duplicates} duplicates, "
            f"{stats.rejected} rejected, {stats.retries} retries; {len(events)} events",
            err=True,
        )
    elif out is not None:
        write_ndjson(stream, out)
    else:
        write_ndjson(stream, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    typer.echo(tally.summary(time.monotonic() - started), err=True)


@app.command()
def run(
    scenario: Annotated[
        ScenarioChoice, typer.Option("--scenario", help="Which ready-made scenario.")
    ] = ScenarioChoice.detection_week,
    seed: Annotated[int, typer.Option(help="Seed: same seed, same bytes.")] = 0,
    days: Annotated[
        float, typer.Option(min=0.01, help="Simulated days (seasonal-world: use 14).")
    ] = 7.0,
    peak_rate: Annotated[
        float | None, typer.Option(help="User turns per second at the daily peak.")
    ] = None,
    prefix_problem: Annotated[
        PrefixProblemChoice, typer.Option(help="detection-week: the injected prefix problem.")
    ] = PrefixProblemChoice.dynamic_system_prefix,
    start: StartOpt = None,
    hash_format: Annotated[
        HashFormatChoice, typer.Option(help="block_hashes as ints or hex strings.")
    ] = HashFormatChoice.integer,
    out: OutOpt = None,
    post: PostOpt = None,
    token: TokenOpt = None,
    batch_size: BatchOpt = 1000,
    events_out: Annotated[
        Path | None, typer.Option(help="Write the posted change events here (a JSON array).")
    ] = None,
    expected_out: Annotated[
        Path | None,
        typer.Option(
            help="detection-week, seasonal-world: write the expected regressions here (JSON)."
        ),
    ] = None,
) -> None:
    """Run a ready-made scenario."""
    begin = _parse_start(start, days * 86_400)
    built: Scenario
    expected: list[dict[str, Any]] | None = None
    if scenario is ScenarioChoice.corporate_assistant:
        built = corporate_assistant_week(seed, days=days, start=begin)
        if peak_rate is not None:
            built = replace(
                built, services=tuple(replace(s, peak_rate=peak_rate) for s in built.services)
            )
    elif scenario is ScenarioChoice.seasonal_world:
        world = seasonal_world(seed, days=days, start=begin)
        built = world.scenario
        expected = [c.to_dict() for c in world.expected]
    else:
        week = detection_week(
            seed,
            days=days,
            start=begin,
            prefix_problem=cast(PrefixProblem, prefix_problem.value),
            peak_rate=peak_rate,
        )
        built = week.scenario
        expected = [c.to_dict() for c in week.changes]
    if hash_format is HashFormatChoice.hexadecimal:
        built = replace(built, hash_format="hex")
    events = scenario_events(built)
    if events_out is not None:
        write_events(events, events_out)
    if expected_out is not None:
        if expected is None:
            raise typer.BadParameter(
                "--expected-out is for --scenario detection-week or seasonal-world"
            )
        expected_out.write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2) + b"\n")
    _emit(iter_records(built), events, out, post, token, batch_size)


@app.command()
def mooncake(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Trace (JSONL).")],
    replicas: Annotated[int, typer.Option(min=1, help="Replicas.")] = 1,
    routing: Annotated[RoutingChoice, typer.Option(help="Routing policy.")] = (
        RoutingChoice.round_robin
    ),
    kv_tokens: Annotated[
        int, typer.Option(min=0, help="KV budget per replica in tokens; 0 = unbounded.")
    ] = 0,
    block_size: Annotated[int, typer.Option(min=1)] = MOONCAKE_BLOCK_SIZE,
    service: Annotated[str, typer.Option(help="The records' service.")] = "mooncake",
    model: Annotated[str, typer.Option(help="The records' model.")] = "mooncake",
    seed: Annotated[int, typer.Option(help="Seed of the TTFT jitter.")] = 0,
    start: StartOpt = None,
    out: OutOpt = None,
    post: PostOpt = None,
    token: TokenOpt = None,
    batch_size: BatchOpt = 1000,
) -> None:
    """Replay a Mooncake trace through replicas, routing and KV caches."""
    # Duration is unknown before reading; 'now' then means the trace starts an hour ago.
    begin = _parse_start(start, 3600.0)
    records = iter_mooncake(
        path,
        replicas=replicas,
        routing=cast(RoutingPolicy, routing.value),
        kv_tokens=kv_tokens or None,
        block_size=block_size,
        service=service,
        model=model,
        start=begin,
        seed=seed,
    )
    _emit(records, [], out, post, token, batch_size)


if __name__ == "__main__":
    app()
