"""`cachewatch import claude-code DIR` as a user runs it: the real command in a
process of its own, posting to a live `cachewatch serve`; every unreadable line
named on stderr; a second run resumes (nothing posted again), a grown transcript
posts only its new calls; `--output -` writes the same records as NDJSON."""

from pathlib import Path

import httpx
import orjson

from tests.conftest import LiveServer, run_cachewatch
from tests.importers.test_claude_code import conversation
from tests.importers.transcripts import T0, Session


def coding_day() -> Session:
    """Two calls, a start busted 12 s later, a coffee break of 11 minutes, three
    more turns, a compaction and a call after it."""
    s = conversation("day")
    s.user(T0 + 22, "and now the lint")
    s.answer(T0 + 25, (15, 0, 21_500))  # the start changed: nothing read, all written
    s.user(T0 + 685, "back from coffee")
    s.answer(T0 + 690, (15, 0, 22_500))  # expired: the whole prompt written again
    at = T0 + 700
    for turn in range(3):
        s.user(at, f"step {turn} " + "w" * 2000)
        s.answer(at + 3, (10, 22_500 + 1_000 * turn, 1_000))
        at += 30
    s.compact(at)
    s.answer(at + 5, (20, 19_500, 1_500))  # the start read, the summary written
    return s


def test_import_posts_resumes_and_names_bad_lines(live_server: LiveServer, tmp_path: Path) -> None:
    folder = tmp_path / "projects"
    (folder / "-home-dev-project").mkdir(parents=True)
    (folder / "-home-dev-other").mkdir()
    day = folder / "-home-dev-project" / "day.jsonl"
    day.write_bytes(coding_day().text() + b"not json\n")
    other = conversation("other")
    (folder / "-home-dev-other" / "other.jsonl").write_bytes(other.text())
    token, read = live_server.token("ingest"), live_server.token("read")
    args = ("import", "claude-code", str(folder), "--url", live_server.url, "--token", token)
    args += ("--state", str(tmp_path / "state.json"), "--no-progress")

    run = run_cachewatch(live_server.env, *args)
    assert run.returncode == 0, run.stderr
    n = len(coding_day().lines)
    assert f"{day}:{n + 1}: cannot read: not JSON" in run.stderr
    assert "posted 10 records: 10 accepted, 0 duplicates, 0 rejected" in run.stderr
    assert "10 API calls, 1 whose start (system prompt or tools) changed" in run.stderr

    totals = httpx.get(
        f"{live_server.url}/v1/metrics", headers={"Authorization": f"Bearer {read}"}, timeout=60
    ).json()["totals"]
    assert totals["requests"] == 10 and totals["fingerprinted_requests"] == 10
    # The coffee break is the one rewarm, and it is expiry; the busted start is not
    # cacheable at all (its blocks are new), so it is no rewarm.
    assert totals["rewarms"]["total"] == 1 and totals["rewarms"]["expiry"] == 1, totals
    assert totals["history_rewrites"] >= 1  # the compaction

    again = run_cachewatch(live_server.env, *args)
    assert "2 files (2 unchanged since the last run), 0 API calls" in again.stderr, again.stderr
    other.user(T0 + 60, "one more thing")
    other.answer(T0 + 63, (5, 21_000, 300))
    (folder / "-home-dev-other" / "other.jsonl").write_bytes(other.text())
    grown = run_cachewatch(live_server.env, *args)
    assert "posted 1 records: 1 accepted" in grown.stderr, grown.stderr


def test_output_writes_ndjson(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "s.jsonl").write_bytes(conversation("s1").text())
    run = run_cachewatch(
        {"PATH": "/usr/bin:/bin"},
        "import",
        "claude-code",
        str(tmp_path / "t"),
        "-o",
        "-",
        "--no-progress",
    )
    assert run.returncode == 0, run.stderr
    records = [orjson.loads(line) for line in run.stdout.splitlines()]
    assert [r["request_id"] for r in records] == ["req_s1_001", "req_s1_002"]
    missing = run_cachewatch(
        {"PATH": "/usr/bin:/bin"}, "import", "claude-code", str(tmp_path / "t")
    )
    assert missing.returncode != 0 and "either --url" in missing.stderr
