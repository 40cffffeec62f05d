"""`cachewatch simulate` (the typer app in service.simulate.cli)."""

from pathlib import Path

import orjson
from typer.testing import CliRunner

from service.simulate.cli import app

runner = CliRunner()


def run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_run_detection_week_to_files(tmp_path: Path) -> None:
    out, events, expected = tmp_path / "r.ndjson", tmp_path / "e.json", tmp_path / "x.json"
    args = ["run", "--scenario", "detection-week", "--days", "0.1", "--seed", "4"]
    run(*args, "--out", str(out), "--events-out", str(events), "--expected-out", str(expected))
    lines = out.read_bytes().splitlines()
    assert len(lines) > 100
    first = orjson.loads(lines[0])
    assert first["service"] == "assistant" and first["request_id"].startswith("detection-week-s4-")
    assert [e["kind"] for e in orjson.loads(events.read_bytes())][:2] == ["deploy", "deploy"]
    causes = [
        x["cause"] for x in orjson.loads(expected.read_bytes()) if x["effect"] == "regression"
    ]
    assert causes == ["prefix_instability", "routing", "eviction", "cold_fanout"]
    # Same seed, same bytes.
    again = tmp_path / "again.ndjson"
    run(*args, "--out", str(again))
    assert again.read_bytes() == out.read_bytes()


def test_run_corporate_assistant_to_stdout_with_hex_hashes() -> None:
    output = run(
        "run", "--scenario", "corporate-assistant", "--days", "0.02", "--hash-format", "hex",
        "--start", "2025-06-02T09:00:00Z", "--peak-rate", "1",
    )  # fmt: skip
    records = [orjson.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert records and records[0]["ts"].startswith("2025-06-02T09:")
    assert all(isinstance(h, str) and len(h) == 16 for h in records[0]["block_hashes"])
    assert records[0]["service"] == "corporate-assistant"


def test_mooncake_command(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(
        b'{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 9]}\n'
        b'{"timestamp": 9000, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 9]}\n'
    )
    out = tmp_path / "out.ndjson"
    run("mooncake", str(trace), "--replicas", "1", "--routing", "prefix_affinity",
        "--kv-tokens", "0", "--out", str(out))  # fmt: skip
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r["cached_tokens"] for r in records] == [0, 1100]


def test_post_needs_a_token() -> None:
    result = runner.invoke(
        app, ["run", "--days", "0.01", "--post", "http://127.0.0.1:9"], env={"CACHEWATCH_TOKEN": ""}
    )
    assert result.exit_code != 0


def test_run_posts_events_then_records_in_batches() -> None:
    from tests.simulate.test_output import FakeServer

    fake = FakeServer(script=[(200, {}), (503, {"Retry-After": "0"})])
    url = fake.start()
    try:
        run("run", "--days", "0.05", "--post", url, "--token", "tk", "--batch-size", "500")
    finally:
        fake.stop()
    paths = [path for path, _, _ in fake.requests]
    assert paths[0] == "/v1/events"
    assert paths[1] == paths[2] == "/v1/usage"  # the 503 batch, sent again
    assert fake.requests[1][2] == fake.requests[2][2]
    sent = sum(body.count(b"\n") for _, _, body in fake.requests[2:])
    assert sent > 500
    assert all(headers["Authorization"] == "Bearer tk" for _, headers, _ in fake.requests)
