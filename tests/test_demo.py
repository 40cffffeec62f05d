"""`cachewatch demo` tells its story: three harmful releases, each found, attributed
to its release with the right cause, and resolved after its fix."""

import json
from pathlib import Path

import pytest

from service.demo import run_demo
from tests.conftest import free_port, is_postgres_run


@pytest.mark.skipif(is_postgres_run(), reason="the demo runs on the embedded SQLite database")
def test_demo_story(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CACHEWATCH_SLACK_WEBHOOK_URL", raising=False)
    regressions = run_demo(tmp_path, free_port(), keep_serving=False)
    story = [
        (
            r["cause"],
            r["attributed_to"]["kind"],
            r["attributed_to"]["deploy"],
            r["attributed_to"]["replicas"],
            r["status"],
        )
        for r in regressions
    ]
    assert story == [
        ("prefix_instability", "deploy", "v3.5.0", None, "resolved"),
        ("prefix_instability", "deploy", "v3.6.0", None, "resolved"),
        ("routing", "replicas", None, 4, "resolved"),
    ]
    time_prefix = regressions[0]["evidence"]
    assert any("segment `system`" in line for line in time_prefix)
    assert any("segment `tools`" in line for line in regressions[1]["evidence"])

    # No webhook configured: the alerts went to the local Slack sink, one section per
    # regression, each naming its release and what changed.
    sink = tmp_path / "slack-messages.jsonl"
    messages = [json.loads(line) for line in sink.read_text().splitlines()]
    sent = json.dumps(messages)
    for release in ("v3.5.0", "v3.6.0"):
        assert f"deploy `{release}`" in sent
    assert "`system` went from 1 to" in sent and "`tools` went from 1 to" in sent
    assert "the change to 4 replicas" in sent
