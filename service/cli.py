"""The `cachewatch` command."""

from enum import StrEnum
from typing import Annotated, Any

import typer

from service.alerts.cli import app as alerts_app
from service.alerts.mrkdwn import visible
from service.alerts.subject import group_text
from service.alerts.wording import cost_phrase, pct
from service.clickhouse import clickhouse_for
from service.clickhouse.client import ChdbDirectoryBusy, ClickHouse
from service.db import PassBusy, make_engine, make_sessionmaker, waiting_for_locks
from service.diff_cli import app as diff_app
from service.importers.cli import app as import_app
from service.settings import Settings, get_settings
from service.simulate.cli import app as simulate_app

app = typer.Typer(
    help="cachewatch: LLM prefix-cache hit rate, regressions and their causes.",
    no_args_is_help=True,
)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
app.add_typer(token_app, name="token")
app.add_typer(simulate_app, name="simulate", help="Simulated traffic with known regressions.")
app.add_typer(diff_app, name="diff", help="Where two requests stop sharing a prefix, and why.")
app.add_typer(alerts_app, name="alerts", help="Slack alerts: test the webhook, deliver now.")
app.add_typer(import_app, name="import", help="Usage records from other tools' files.")


class ScopeChoice(StrEnum):
    ingest = "ingest"
    read = "read"
    admin = "admin"


@app.command()
def migrate() -> None:
    """Upgrade the database schema to the latest version (and ClickHouse's tables,
    with CACHEWATCH_CLICKHOUSE_URL)."""
    from service import migrate as migrations

    settings = get_settings()
    engine = make_engine(settings)
    migrations.upgrade(engine)
    engine.dispose()
    if clickhouse_or_exit(settings) is not None:  # migrates its tables on first use
        typer.echo("ClickHouse tables are at the latest schema", err=True)
    typer.echo("database is at the latest schema", err=True)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
) -> None:
    """Migrate the database, then serve the API and dashboard."""
    import uvicorn

    settings = get_settings()
    if workers > 1 and (settings.clickhouse_url or "").startswith("chdb:"):
        typer.echo(
            "cachewatch: chdb runs in one process only: serve it with --workers 1, "
            "or use a ClickHouse server (CACHEWATCH_CLICKHOUSE_URL=http://host:8123/db)",
            err=True,
        )
        raise typer.Exit(code=2)
    load_profiles_or_exit(settings)
    migrate()
    uvicorn.run(
        "service.api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
    )


@app.command()
def worker() -> None:
    """Run the background jobs (analytics pass, detection, alerts) until stopped."""
    from service import worker as jobs

    settings = get_settings()
    load_profiles_or_exit(settings)
    migrate()
    factory = make_sessionmaker(make_engine(settings), clickhouse_or_exit(settings))
    jobs.run_forever(factory, settings)


@app.command()
def detect(
    service: Annotated[str | None, typer.Option(help="Only this service.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the regressions as JSON.")] = False,
) -> None:
    """One detection pass: prints the regressions it created or updated. A pass in
    progress (the server's own jobs) is waited for up to CACHEWATCH_PASS_LOCK_WAIT_S;
    past that the run is skipped with one line on stderr and exit code 75."""
    import orjson

    from service.services.detection import detect as run_detection
    from service.services.regressions import regression_to_json

    settings = get_settings()
    load_profiles_or_exit(settings)
    engine = make_engine(settings)
    factory = make_sessionmaker(engine, clickhouse_or_exit(settings))
    try:
        with waiting_for_locks(factory, settings.pass_lock_wait_s).begin() as session:
            report = run_detection(session, settings, service)
            changed = [regression_to_json(r) for r in report.changed]
    except PassBusy as busy:
        typer.echo(
            "detect: another detection or analytics pass holds the database "
            f"(waited {busy.waited_s:g} s); skipped, run again later",
            err=True,
        )
        raise typer.Exit(code=EXIT_PASS_BUSY) from None
    finally:
        engine.dispose()
    if as_json:
        typer.echo(orjson.dumps(changed, option=orjson.OPT_INDENT_2).decode())
        return
    for r in changed:
        typer.echo(regression_line(r))
    if not changed:
        typer.echo("no regressions", err=True)


#: `detect` skipped: another pass held the database for CACHEWATCH_PASS_LOCK_WAIT_S
#: (EX_TEMPFAIL of sysexits.h, "try again later"). Not 0: nothing was examined, and
#: a script must not read the empty output as "no regressions"; not 1: nothing
#: failed either, so a cron wrapper can tell the two apart and simply retry.
EXIT_PASS_BUSY = 75


def regression_line(r: dict[str, Any]) -> str:
    """One line of `detect`'s output for a regression (contract JSON): its group or
    canary after the service, and what it costs a day when its model has prices.
    Control characters in names show as escapes: one line per regression."""
    attribution = r["attributed_to"]
    cost = cost_phrase(r)
    group = group_text(r)
    line = (
        f"#{r['id']} {r['service']}/{r['model']}{' ' + group if group else ''} at "
        f"{r['change_ts']}: hit rate "
        f"{pct(r['before']['hit_rate'])} -> {pct(r['after']['hit_rate'])}, cause {r['cause']}, "
        + (_describe_attribution(attribution) if attribution else "no change event nearby")
        + (f", {cost}" if cost else "")
        + f" [{r['status']}]"
    )
    return visible(line)


@app.command()
def report(
    service: Annotated[str | None, typer.Option(help="Only this service.")] = None,
    from_: Annotated[
        str | None,
        typer.Option("--from", help="Start of the range, as a record's ts (RFC 3339 or epoch)."),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option("--to", help="End of the range (excluded), as a record's ts."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the report as Markdown (the default).")
    ] = False,
) -> None:
    """The findings and the open regressions of a range, worst first in dollars a day,
    each with its evidence and fix: Markdown to paste into a ticket, or JSON."""
    import orjson

    from service.findings.report import ReportRange, report_json, report_markdown
    from service.services.findings import findings
    from service.services.freshness import catch_up_before_read
    from service.services.regressions import list_regressions, regression_to_json

    if as_json and markdown:
        raise typer.BadParameter("choose one of --json and --markdown", param_hint="--json")
    range_ = ReportRange(_ts_option("--from", from_), _ts_option("--to", to))
    if range_.from_us is not None and range_.to_us is not None and range_.from_us >= range_.to_us:
        raise typer.BadParameter("--from must be before --to", param_hint="--from")
    settings = get_settings()
    load_profiles_or_exit(settings)
    engine = make_engine(settings)
    factory = make_sessionmaker(engine, clickhouse_or_exit(settings))
    catch_up_before_read(factory, settings)
    with factory() as session:
        result = findings(
            session, settings, service=service, from_us=range_.from_us, to_us=range_.to_us
        )
        regressions = [
            regression_to_json(r)
            for r in list_regressions(session, service, "open", REPORT_MAX_REGRESSIONS)
        ]
    engine.dispose()
    if as_json:
        answer = report_json(result, regressions, range_)
        typer.echo(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode())
        return
    typer.echo(report_markdown(result, regressions, range_), nl=False)


#: `cachewatch report` reads at most this many open regressions (the most
#: `GET /v1/regressions` answers at once).
REPORT_MAX_REGRESSIONS = 10_000


def _ts_option(name: str, value: str | None) -> int | None:
    """`--from`/`--to` take the same forms as a record's `ts` (contract section 6's
    `from`/`to`); a bad one is a usage error (exit code 2) saying why."""
    from service.ingest.timestamps import parse_ts_text

    if value is None or value == "":
        return None
    try:
        return parse_ts_text(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=name) from None


@app.command()
def retention(
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
) -> None:
    """Delete raw usage records and rejected records older than
    CACHEWATCH_RETENTION_DAYS (rollups and regressions are kept); the server runs it
    every CACHEWATCH_RETENTION_INTERVAL_S."""
    import dataclasses

    import orjson

    from service.services.retention import purge

    settings = get_settings()
    engine = make_engine(settings)
    report = purge(make_sessionmaker(engine, clickhouse_or_exit(settings)), settings)
    engine.dispose()
    if as_json:
        typer.echo(orjson.dumps(dataclasses.asdict(report)).decode())
        return
    typer.echo(
        f"deleted {report.usage_deleted} usage records and {report.rejected_deleted} "
        f"rejected records older than {settings.retention_days} days "
        f"({report.batches} batches)"
    )


def clickhouse_or_exit(settings: Settings) -> ClickHouse | None:
    """The ClickHouse client, or the command stopped with one line on stderr and
    exit code 1 when it is chdb and another process (a `cachewatch serve`) holds its
    directory: a traceback would hide that chdb runs in one process only."""
    try:
        return clickhouse_for(settings)
    except ChdbDirectoryBusy as exc:
        typer.echo(f"cachewatch: {exc}", err=True)
        raise typer.Exit(code=1) from None


def load_profiles_or_exit(settings: Settings) -> None:
    """Read the models file before anything starts: a malformed one stops the
    command with its message (file and line) on stderr and exit code 2, rather than
    serving with half of it or none."""
    from service.profiles import ModelsFileError, profiles_for

    try:
        profiles_for(settings)
    except ModelsFileError as exc:
        typer.echo(f"cachewatch: the models file is refused: {exc}", err=True)
        raise typer.Exit(code=2) from None


def _describe_attribution(attribution: dict[str, Any]) -> str:
    what = attribution["deploy"] or attribution["replicas"] or ""
    return (
        f"after {attribution['kind']} {what} "
        f"({attribution['source']}, lag {attribution['lag_s']:.0f} s)"
    )


@app.command()
def demo(
    port: Annotated[int, typer.Option(help="Port for the demo server.")] = 8000,
    folder: Annotated[str, typer.Option(help="Where the demo database and logs go.")] = "demo",
    exit_when_done: Annotated[bool, typer.Option(help="Stop instead of serving on.")] = False,
) -> None:
    """The whole product on the embedded database: simulated traffic with a standing
    template drift and four harmful changes with their fixes, detection, findings,
    alerts, the dashboard."""
    from pathlib import Path

    from service.demo import run_demo

    run_demo(Path(folder), port, keep_serving=not exit_when_done)


@token_app.command("create")
def token_create(
    scope: Annotated[ScopeChoice, typer.Option(help="What the token may do.")],
    name: Annotated[str, typer.Option(help="Who or what uses it.")],
) -> None:
    """Create a token and print it alone on stdout (only its hash is stored)."""
    from service.services.tokens import Scope, create_token

    engine = make_engine(get_settings())
    with make_sessionmaker(engine).begin() as session:
        token = create_token(session, Scope(scope.value), name)
    engine.dispose()
    typer.echo(token)


if __name__ == "__main__":
    app()
