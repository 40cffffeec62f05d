"""The `cachewatch` command."""

from enum import StrEnum
from typing import Annotated

import typer

from service.db import make_engine, make_sessionmaker
from service.settings import get_settings

app = typer.Typer(
    help="cachewatch: LLM prefix-cache hit rate, regressions and their causes.",
    no_args_is_help=True,
)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
app.add_typer(token_app, name="token")


class ScopeChoice(StrEnum):
    ingest = "ingest"
    read = "read"
    admin = "admin"


@app.command()
def migrate() -> None:
    """Upgrade the database schema to the latest version."""
    from service import migrate as migrations

    engine = make_engine(get_settings())
    migrations.upgrade(engine)
    engine.dispose()
    typer.echo("database is at the latest schema", err=True)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
) -> None:
    """Migrate the database, then serve the API and dashboard."""
    import uvicorn

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
    migrate()
    jobs.run_forever(make_sessionmaker(make_engine(settings)), settings)


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
