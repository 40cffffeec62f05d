"""An agent session's report, as docs/integrations.md shows it: three hours of one
developer's Claude Code transcripts imported into a live server, then `cachewatch
report`. A healthy day shows only its coffee breaks (`expiry`), not a history
rewrite per call; a day whose hook rewrites the project's memory file before every
call shows the start (`system+tools`) as volatile, from usage alone."""

from pathlib import Path

import pytest

from tests.conftest import LiveServer, run_cachewatch
from tests.importers.transcripts import agent_day


@pytest.mark.parametrize("busted", [False, True], ids=["healthy", "busted"])
def test_report_of_an_agent_day(live_server: LiveServer, tmp_path: Path, busted: bool) -> None:
    folder = tmp_path / "projects"
    folder.mkdir()
    for session in agent_day(every_call_busted=busted):
        (folder / f"{session.session_id}.jsonl").write_bytes(session.text())
    token = live_server.token("ingest")
    run = run_cachewatch(
        live_server.env,
        *("import", "claude-code", str(folder), "--url", live_server.url, "--token", token),
        *("--state", str(tmp_path / "state.json"), "--no-progress"),
    )
    assert run.returncode == 0, run.stderr
    report = run_cachewatch(live_server.env, "report", "--service", "claude-code")
    assert report.returncode == 0, report.stderr
    text = report.stdout
    assert "## 1. " in text and "history_rewrite" not in text, text
    assert "4 requests came back to their prefix after it had expired (TTL 5 min)" in text
    if busted:
        assert "128 whose start (system prompt or tools) changed" in run.stderr
        assert text.index("Volatile segment `system+tools`") < text.index("Cache expiry"), text
        assert "variants per hour over 48 requests" in text
    else:
        assert "0 whose start" in run.stderr and "Volatile segment" not in text, text
