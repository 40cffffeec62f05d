"""`cachewatch alerts ...`: check the webhook, deliver due alerts now."""

import typer

app = typer.Typer(help="Slack alerts for regressions.", no_args_is_help=True)


@app.command("test")
def send_test() -> None:
    """Send a test message to CACHEWATCH_SLACK_WEBHOOK_URL and show Slack's answer."""
    from service.alerts.message import webhook_test_message
    from service.alerts.slack import SlackWebhook, Verdict
    from service.settings import get_settings

    settings = get_settings()
    if not settings.slack_webhook_url:
        typer.echo("CACHEWATCH_SLACK_WEBHOOK_URL is not set: no webhook to test", err=True)
        raise typer.Exit(2)
    with SlackWebhook(settings.slack_webhook_url, settings.alerts_http_timeout_s) as webhook:
        outcome = webhook.post(webhook_test_message(settings.public_url).payload())
    if outcome.verdict is Verdict.SENT:
        typer.echo(f"sent: Slack answered {outcome.status} {outcome.detail}")
        return
    status = "no answer" if outcome.status is None else f"HTTP {outcome.status}"
    typer.echo(f"not sent ({outcome.verdict}): {status}: {outcome.detail}", err=True)
    raise typer.Exit(1)


@app.command("deliver")
def deliver() -> None:
    """Send the alerts due now, as the server's alerts job does on its interval."""
    from service.alerts.delivery import deliver_due
    from service.db import make_engine, make_sessionmaker
    from service.settings import get_settings

    settings = get_settings()
    engine = make_engine(settings)
    try:
        report = deliver_due(make_sessionmaker(engine), settings)
    finally:
        engine.dispose()
    if report.waiting_for_webhook:
        typer.echo(
            f"{report.waiting_for_webhook} alerts wait for CACHEWATCH_SLACK_WEBHOOK_URL", err=True
        )
    typer.echo(
        f"{report.messages} messages: {report.sent} alerts sent, "
        f"{report.retried} to retry, {report.failed} failed",
        err=True,
    )
