import logging
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from service import migrate, worker
from service.alerts.money import usd
from service.cli import regression_line
from service.db import make_engine, make_sessionmaker, waiting_for_locks
from service.models import ApiToken, Regression
from service.repository.detection import take_detection_lock
from service.services.tokens import hash_token
from service.settings import Settings
from tests.alerts.test_message import regression
from tests.conftest import PROJECT_ROOT, drop_database, fresh_database_url, run_cachewatch
from tests.e2e.test_detect_beside_server import Holder
from tests.findings.test_report import as_html


def test_migrate_then_token_create_prints_only_the_token(tmp_path, database_url: str) -> None:  # type: ignore[no-untyped-def]
    url = fresh_database_url(tmp_path, "cli")
    env = {"CACHEWATCH_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}
    try:
        run = [sys.executable, "-m", "service.cli"]
        subprocess.run([*run, "migrate"], env=env, cwd=PROJECT_ROOT, check=True)
        out = subprocess.run(
            [*run, "token", "create", "--scope", "read", "--name", "grafana"],
            env=env,
            cwd=PROJECT_ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        token = out.strip()
        assert out == token + "\n" and token.startswith("cw_") and len(token) > 40
        engine = create_engine(url)
        with engine.connect() as conn:
            stored = conn.execute(select(ApiToken.token_hash, ApiToken.scope, ApiToken.name)).all()
        engine.dispose()
        assert stored == [(hash_token(token), "read", "grafana")]
        bad = subprocess.run(
            [*run, "token", "create", "--scope", "root", "--name", "x"],
            env=env,
            cwd=PROJECT_ROOT,
            capture_output=True,
        )
        assert bad.returncode != 0
    finally:
        drop_database(url)


BAD_MODELS_FILE = '[[model]]\nmatch = "gpt-*"\nttl_s = "5m"\n'


@pytest.mark.parametrize("command", [["detect"], ["report"], ["worker"], ["serve", "--port", "1"]])
def test_a_bad_models_file_stops_the_command_naming_the_line(
    tmp_path: Path, command: list[str]
) -> None:
    """Refused before anything starts: no migration, no server, no detection pass."""
    models = tmp_path / "models.toml"
    models.write_text(BAD_MODELS_FILE, encoding="utf-8")
    env = {
        "CACHEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'never.db'}",
        "CACHEWATCH_MODELS_FILE": str(models),
        "PATH": "/usr/bin:/bin",
    }
    run = run_cachewatch(env, *command, timeout=60)
    assert run.returncode == 2, run.stderr
    assert f"{models}, line 3: `ttl_s` = '5m' in [[model]]" in run.stderr
    assert run.stdout == ""
    assert not (tmp_path / "never.db").exists()


def test_detect_runs_with_a_good_models_file(tmp_path: Path) -> None:
    models = tmp_path / "models.toml"
    models.write_text('[[model]]\nmatch = "gpt-*"\nttl_s = 300\n', encoding="utf-8")
    url = fresh_database_url(tmp_path, "cli_models")
    env = {"CACHEWATCH_DATABASE_URL": url, "CACHEWATCH_MODELS_FILE": str(models)}
    try:
        run = [sys.executable, "-m", "service.cli"]
        subprocess.run([*run, "migrate"], env=env, cwd=PROJECT_ROOT, check=True)
        out = subprocess.run(
            [*run, "detect", "--json"],
            env=env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]"
    finally:
        drop_database(url)


def test_a_detect_line_says_what_the_regression_costs_a_day() -> None:
    line = regression_line(regression())
    assert line == (
        "#7 assistant/acme-70b-instruct at 2026-11-23T14:25:00Z: hit rate 71% -> 12%, "
        "cause prefix_instability, after deploy v42 (posted, lag 240 s), "
        "costs about $1,241 a day more [open]"
    )
    unpriced = regression_line(regression(cost=None, attributed_to=None))
    assert unpriced.endswith("cause prefix_instability, no change event nearby [open]")
    assert "$" not in unpriced and "cost" not in unpriced


def test_a_detect_line_names_the_group_or_the_canary() -> None:
    scenario = regression(id=21, group={"by": "scenario", "value": "ticket-summary"}, cost=None)
    assert regression_line(scenario).startswith(
        "#21 assistant/acme-70b-instruct scenario ticket-summary at 2026-11-23T14:25:00Z: hit"
    )
    tenant = regression(group={"by": "tenant", "value": "acme-corp"})
    assert "/acme-70b-instruct tenant acme-corp at " in regression_line(tenant)
    canary = regression(
        group={"by": "deploy", "value": "v5.0.0"},
        canary={"baseline": "v4.9.0", "share": 0.1, "buckets": 12},
        cost=None,
    )
    assert regression_line(canary).startswith(
        "#7 assistant/acme-70b-instruct canary deploy v5.0.0 "
        "(10% of requests, beside v4.9.0, 12 buckets) at 2026-11-23T14:25:00Z: hit rate"
    )
    bare = regression_line(regression(group={"by": "deploy", "value": "v5"}, canary=None))
    assert " canary deploy v5 at " in bare
    # A group value is data from the records: it cannot break the one line.
    hostile = regression(group={"by": "scenario", "value": "x\n#8 forged\x1b[2J"})
    line = regression_line(hostile)
    assert "\n" not in line and "\x1b" not in line
    assert " scenario x\\n#8 forged\\x1b[2J at " in line


def test_detect_prints_what_each_regression_costs_a_day(tmp_path: Path) -> None:
    """Priced traffic (the models file) whose cache is lost halfway: the text line
    says what the drop costs a day, `--json` carries the contract's `cost`."""
    from service.db import make_engine, make_sessionmaker
    from service.services.regressions import regression_to_json
    from service.settings import Settings
    from tests.services.traffic import MODELS_FILE, drop_traffic, store

    models = tmp_path / "models.toml"
    models.write_text(MODELS_FILE, encoding="utf-8")
    url = fresh_database_url(tmp_path, "cli_cost")
    engine = make_engine(Settings(database_url=url))
    env = {"CACHEWATCH_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}
    cli = [sys.executable, "-m", "service.cli"]
    try:
        subprocess.run([*cli, "migrate"], env=env, cwd=PROJECT_ROOT, check=True)
        with make_sessionmaker(engine).begin() as session:
            store(session, drop_traffic())
        priced = {**env, "CACHEWATCH_MODELS_FILE": str(models)}
        out = subprocess.run(
            [*cli, "detect"], env=priced, cwd=PROJECT_ROOT, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        with make_sessionmaker(engine)() as session:
            stored = [regression_to_json(r) for r in session.scalars(select(Regression)).all()]
        assert len(stored) == 1 and stored[0]["cost"] is not None
        extra = stored[0]["cost"]["extra_usd_per_day"]
        assert extra > 1  # 1,440 requests a day lose 1,900 cached tokens each
        assert out.stdout == regression_line(stored[0]) + "\n"
        assert f", costs about {usd(extra)} a day more [" in out.stdout
        again = subprocess.run(
            [*cli, "detect", "--json"], env=priced, cwd=PROJECT_ROOT, capture_output=True
        )
        # Run again, detection updates the regression: `--json` prints it, cost included.
        reported = orjson.loads(again.stdout)
        assert [(r["id"], r["cost"]) for r in reported] == [(stored[0]["id"], stored[0]["cost"])]
        assert set(stored[0]["cost"]) == {
            "usd_per_day_before",
            "usd_per_day_after",
            "extra_usd_per_day",
        }
    finally:
        engine.dispose()
        drop_database(url)


def rendered_traffic() -> list[dict[str, Any]]:
    """Half an hour of an assistant on a priced model whose callers render its system
    prompt two ways (a template drift), as the simulator sends it."""
    from service.simulate import (
        DailyCurve,
        LengthDist,
        PromptStructure,
        Rendering,
        Scenario,
        Service,
        simulate,
    )

    service = Service(
        name="assistant",
        model="claude-sim",
        prompt=PromptStructure(
            system_tokens=1_500,
            tool_tokens=(80,) * 4,
            query=LengthDist(120, 0.5, 5, 2000),
            reply=LengthDist(200, 0.5, 5, 2000),
            turns_mean=4,
            think_time_s=LengthDist(20, 0.5, 2, 600),
        ),
        peak_rate=1.0,
        curve=DailyCurve.flat(),
        replicas=1,
        routing="prefix_affinity",
        renderings=(Rendering("web-chat", 0.6), Rendering("api-agent", 0.4, 1)),
    )
    return simulate(Scenario("report", (service,), 1800.0, seed=3)).records


def test_report_prints_the_findings_and_open_regressions_of_a_range(tmp_path: Path) -> None:
    """A template drift (simulated) and an open regression (its cache lost halfway)
    on priced models: the report, Markdown by default, is the renderer's text of the
    findings service's result and the open regressions, and renders; `--json` holds
    the same; `--to` before the regression's change leaves it out."""
    from markdown_it import MarkdownIt

    from service.db import make_engine, make_sessionmaker
    from service.findings.report import ReportRange, report_json, report_markdown
    from service.ingest.timestamps import parse_ts_text
    from service.services.findings import findings
    from service.services.regressions import regression_to_json
    from service.settings import Settings
    from tests.services.traffic import MODELS_FILE, drop_traffic, store

    models = tmp_path / "models.toml"
    models.write_text(MODELS_FILE, encoding="utf-8")
    url = fresh_database_url(tmp_path, "cli_report")
    settings = Settings(database_url=url, models_file=str(models))
    engine = make_engine(settings)
    env = {"CACHEWATCH_DATABASE_URL": url, "CACHEWATCH_MODELS_FILE": str(models)}
    env["PATH"] = "/usr/bin:/bin"
    cli = [sys.executable, "-m", "service.cli"]

    def report(*options: str) -> str:
        out = subprocess.run(
            [*cli, "report", *options], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    try:
        subprocess.run([*cli, "migrate"], env=env, cwd=PROJECT_ROOT, check=True)
        with make_sessionmaker(engine).begin() as session:
            store(session, drop_traffic())
            store(session, rendered_traffic())
        detected = subprocess.run(
            [*cli, "detect", "--json"], env=env, cwd=PROJECT_ROOT, capture_output=True
        )
        assert detected.returncode == 0, detected.stderr
        [opened] = orjson.loads(detected.stdout)
        assert opened["status"] == "open" and opened["cost"] is not None

        markdown = report()
        with make_sessionmaker(engine)() as session:
            result = findings(session, settings)
            stored = [regression_to_json(r) for r in session.scalars(select(Regression)).all()]
        everything = ReportRange(None, None)
        assert markdown == report_markdown(result, stored, everything)
        assert report("--markdown") == markdown
        drift = next(f for f in result.findings if f.kind == "template_drift")
        assert drift.segment == "system" and drift.wasted_usd_per_day is not None
        page = MarkdownIt("commonmark").render(markdown)
        # Worst first in dollars: the regression's extra cost before the drift's waste.
        assert opened["cost"]["extra_usd_per_day"] > drift.wasted_usd_per_day
        assert f"<h2>1. Regression #{opened['id']} in <code>assistant</code>" in page
        assert re.search(r"<h2>2\. Template drift <code>system</code>", page)
        assert "scenario <code>api-agent</code>" in page
        assert f"<strong>Fix:</strong> {as_html(drift.fix)}</p>" in page
        for line in drift.evidence:
            assert f"<li>{as_html(line)}</li>" in page, line

        answer = orjson.loads(report("--json"))
        assert answer == orjson.loads(orjson.dumps(report_json(result, stored, everything)))
        assert [f["kind"] for f in answer["findings"]] == [f.kind for f in result.findings]
        assert [r["id"] for r in answer["regressions"]] == [opened["id"]]

        # A range that ends before the drop: the regression is not in it.
        to = opened["change_ts"]
        early = orjson.loads(report("--to", to, "--json"))
        assert early["range"] == {"from": None, "to": to, "days": early["range"]["days"]}
        assert early["regressions"] == []
        with make_sessionmaker(engine)() as session:
            before = findings(session, settings, to_us=parse_ts_text(to))
        assert early["findings"] == [f.as_json() for f in before.findings]
    finally:
        engine.dispose()
        drop_database(url)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--from", "yesterday"], "Invalid value for --from: ts 'yesterday' is not an RFC 3339"),
        (["--to", "0123"], "Invalid value for --to: ts '0123': an epoch number is written"),
        (["--from", "1764400000", "--to", "1764400000"], "--from must be before --to"),
        (["--json", "--markdown"], "choose one of --json and --markdown"),
    ],
)
def test_report_refuses_bad_options_saying_why(
    tmp_path: Path, options: list[str], message: str
) -> None:
    """A usage error (exit code 2) on stderr, before the database is opened."""
    env = {"CACHEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'never.db'}", "PATH": "/usr/bin:/bin"}
    env["COLUMNS"] = "200"  # the error box does not wrap the message
    run = subprocess.run(
        [sys.executable, "-m", "service.cli", "report", *options],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert message in run.stderr
    assert not (tmp_path / "never.db").exists()


# --- A pass waits for another at most CACHEWATCH_PASS_LOCK_WAIT_S -------------------
# (end to end, beside a real server: tests/e2e/test_detect_beside_server.py)


@pytest.mark.parametrize(("hold_s", "runs"), [(1.0, True), (6.0, False)])
def test_a_pass_waits_for_the_lock_up_to_its_bound_then_runs_or_is_busy(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture, hold_s: float, runs: bool
) -> None:
    """The worker's own wrapper with a 3 s bound, against the lock held for 1 s
    (longer than the 200 ms busy timeout: it waits, then runs) or for 6 s (it gives
    up at 3 s: one warning line, no traceback)."""
    url = fresh_database_url(tmp_path, "lockwait")
    settings = Settings(database_url=url, sqlite_busy_timeout_ms=200, pass_lock_wait_s=3)
    engine = make_engine(settings)
    try:
        migrate.upgrade(engine)
        factory = make_sessionmaker(engine)
        ran: list[float] = []

        def job(session: Session, _: Settings) -> None:
            take_detection_lock(session)
            session.execute(select(1))
            ran.append(time.monotonic() - began)

        hold = Holder(url)
        threading.Timer(hold_s, hold.release).start()
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="service.worker"):
            worker._run("detection", job, waiting_for_locks(factory, 3), settings)
        took = time.monotonic() - began
        time.sleep(max(0.0, hold_s - took) + 0.2)  # the hold is released
    finally:
        engine.dispose()
        drop_database(url)
    if runs:
        assert len(ran) == 1 and hold_s - 0.2 <= ran[0] < 3, ran
        assert caplog.records == []
        return
    assert ran == [] and 2.8 <= took < 5, took
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage() == (
        "job detection skipped: another pass holds the database (waited 3 s); "
        "it runs again at its next interval"
    )
