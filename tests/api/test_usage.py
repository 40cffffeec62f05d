import gzip
import zlib

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service.models import RejectedRecord, UsageRecord


def record(i: int, **extra: object) -> dict[str, object]:
    return {
        "request_id": f"req-{i}",
        "ts": 1_700_000_000 + i,
        "service": "assistant",
        "model": "m",
        "prompt_tokens": 1000,
        "cached_tokens": 500,
        **extra,
    }


def ndjson(records: list[dict[str, object]]) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in records) + b"\n"


def stored_count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(UsageRecord)) or 0


def test_ndjson_batch_posted_twice_is_stored_once(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    body = ndjson([record(i) for i in range(50)])
    first = client.post("/v1/usage", content=body, headers=ingest_headers)
    second = client.post("/v1/usage", content=body, headers=ingest_headers)
    assert first.json() == {"accepted": 50, "duplicates": 0, "rejected": 0, "errors": []}
    assert second.json() == {"accepted": 0, "duplicates": 50, "rejected": 0, "errors": []}
    assert stored_count(session) == 50


def test_duplicate_request_id_inside_one_batch_stores_the_first(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    body = ndjson([record(1, prompt_tokens=1010), record(1, prompt_tokens=1020), record(2)])
    answer = client.post("/v1/usage", content=body, headers=ingest_headers).json()
    assert answer["accepted"] == 2 and answer["duplicates"] == 1
    stored = session.scalars(select(UsageRecord).where(UsageRecord.request_id == "req-1")).one()
    assert stored.prompt_tokens == 1010


def test_thousand_lines_with_three_malformed(
    client: TestClient,
    ingest_headers: dict[str, str],
    read_headers: dict[str, str],
    session: Session,
) -> None:
    lines = [orjson.dumps(record(i)) for i in range(1000)]
    lines[10] = b'{"request_id": "req-10", "ts": '  # truncated JSON
    lines[500] = orjson.dumps(record(500, cached_tokens=5000))  # more cached than prompt
    lines[999] = orjson.dumps({k: v for k, v in record(999).items() if k != "model"})
    answer = client.post("/v1/usage", content=b"\n".join(lines), headers=ingest_headers).json()
    assert answer["accepted"] == 997
    assert answer["rejected"] == 3
    assert [e["index"] for e in answer["errors"]] == [10, 500, 999]
    assert answer["errors"][0]["request_id"] is None
    assert "not valid JSON" in answer["errors"][0]["error"]
    assert answer["errors"][1]["request_id"] == "req-500"
    assert "cached_tokens" in answer["errors"][1]["error"]
    assert "model" in answer["errors"][2]["error"]
    assert stored_count(session) == 997

    rejected = client.get("/v1/rejected", headers=read_headers).json()
    raws = {r["raw"] for r in rejected}
    assert {lines[10].decode(), lines[500].decode(), lines[999].decode()} <= raws


def test_array_and_single_object_bodies_whatever_the_content_type(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    headers = {**ingest_headers, "Content-Type": "application/x-www-form-urlencoded"}
    array = client.post("/v1/usage", content=orjson.dumps([record(1), record(2)]), headers=headers)
    single = client.post("/v1/usage", content=orjson.dumps(record(3)), headers=headers)
    assert array.json()["accepted"] == 2
    assert single.json()["accepted"] == 1
    assert stored_count(session) == 3


def test_records_keep_their_order_within_a_body(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    records = [record(i, ts=1_700_000_000) for i in (5, 3, 9, 1)]
    client.post("/v1/usage", content=ndjson(records), headers=ingest_headers)
    order = session.scalars(select(UsageRecord.request_id).order_by(UsageRecord.id)).all()
    assert order == ["req-5", "req-3", "req-9", "req-1"]


def test_gzip_body(client: TestClient, ingest_headers: dict[str, str]) -> None:
    body = gzip.compress(ndjson([record(i) for i in range(20)]))
    headers = {**ingest_headers, "Content-Encoding": "gzip"}
    assert client.post("/v1/usage", content=body, headers=headers).json()["accepted"] == 20


@pytest.mark.parametrize(
    ("body", "encoding", "reason"),
    [
        (b"\x1f\x8b\x08\x00garbage", "gzip", "gzip"),
        (gzip.compress(b'{"request_id": "a"}\n')[:-12], "gzip", "truncated"),
        (b'{"request_id": "a", "ts": 1', None, "JSON"),
        (b'[{"request_id": "a"}, {"request', None, "JSON"),
        (b"hello world", None, "JSON"),
        (b"   ", None, "empty"),
    ],
)
def test_undecodable_bodies_are_400_and_kept(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    body: bytes,
    encoding: str | None,
    reason: str,
) -> None:
    headers = dict(ingest_headers)
    if encoding:
        headers["Content-Encoding"] = encoding
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.status_code == 400
    assert reason in answer.json()["error"]
    kept = session.scalars(select(RejectedRecord)).all()
    assert [r.raw for r in kept] == [body]


def test_body_over_the_limit_is_413(client: TestClient, ingest_headers: dict[str, str]) -> None:
    body = b" " * (11 * 1024 * 1024)
    assert client.post("/v1/usage", content=body, headers=ingest_headers).status_code == 413


def test_gzip_bomb_is_413(client: TestClient, ingest_headers: dict[str, str]) -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = compressor.compress(b"\n" * (65 * 1024 * 1024)) + compressor.flush()
    assert len(bomb) < 200 * 1024
    headers = {**ingest_headers, "Content-Encoding": "gzip"}
    assert client.post("/v1/usage", content=bomb, headers=headers).status_code == 413


def test_auth(
    client: TestClient, read_headers: dict[str, str], ingest_headers: dict[str, str], make_token
) -> None:  # type: ignore[no-untyped-def]
    body = ndjson([record(1)])
    assert client.post("/v1/usage", content=body).status_code == 401
    bad = {"Authorization": "Bearer cw_not-a-token"}
    assert client.post("/v1/usage", content=body, headers=bad).status_code == 401
    assert client.post("/v1/usage", content=body, headers=read_headers).status_code == 403
    assert client.get("/v1/rejected", headers=ingest_headers).status_code == 403
    admin = {"Authorization": f"Bearer {make_token('admin')}"}
    assert client.post("/v1/usage", content=body, headers=admin).status_code == 200
    assert client.get("/v1/rejected", headers=admin).status_code == 200


def test_errors_list_is_capped_but_counts_are_exact(
    client: TestClient, ingest_headers: dict[str, str]
) -> None:
    body = b"\n".join([b'{"x": 1}'] * 150 + [orjson.dumps(record(1))])
    answer = client.post("/v1/usage", content=body, headers=ingest_headers).json()
    assert answer["rejected"] == 150 and answer["accepted"] == 1
    assert len(answer["errors"]) == 100


def test_a_failed_commit_is_never_acknowledged(
    app: FastAPI, connection: Connection, ingest_headers: dict[str, str], session: Session
) -> None:
    class CommitFails(Session):
        def commit(self) -> None:
            raise OperationalError("COMMIT", {}, Exception("disk I/O error"))

    app.state.sessionmaker = sessionmaker(
        bind=connection, class_=CommitFails, join_transaction_mode="create_savepoint"
    )
    with TestClient(app, raise_server_exceptions=False) as failing:
        answer = failing.post("/v1/usage", content=ndjson([record(1)]), headers=ingest_headers)
    assert answer.status_code == 503
    assert answer.headers["Retry-After"]
    assert stored_count(session) == 0


def test_clean_bodies_count_duplicates_within_and_across_bodies(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    """Bodies of valid records only (the bulk path): a repeat within the body and a
    record already stored are both duplicates, and the first occurrence is kept."""
    first = client.post("/v1/usage", content=ndjson([record(1), record(2)]), headers=ingest_headers)
    assert first.json() == {"accepted": 2, "duplicates": 0, "rejected": 0, "errors": []}
    body = ndjson(
        [record(2), record(3, prompt_tokens=1030), record(3, prompt_tokens=1031), record(4)]
    )
    answer = client.post("/v1/usage", content=body, headers=ingest_headers).json()
    assert answer == {"accepted": 2, "duplicates": 2, "rejected": 0, "errors": []}
    stored = session.scalars(select(UsageRecord).order_by(UsageRecord.id)).all()
    assert [(r.request_id, r.prompt_tokens) for r in stored] == [
        ("req-1", 1000),
        ("req-2", 1000),
        ("req-3", 1030),
        ("req-4", 1000),
    ]


def test_a_body_mixing_good_malformed_and_duplicate_lines(
    client: TestClient,
    ingest_headers: dict[str, str],
    read_headers: dict[str, str],
    session: Session,
) -> None:
    client.post("/v1/usage", content=ndjson([record(1)]), headers=ingest_headers)
    lines = [
        orjson.dumps(record(5)),
        b'{"request_id": "req-6", "ts": ',  # malformed
        orjson.dumps(record(5, prompt_tokens=1007)),  # repeated within the body
        orjson.dumps(record(1)),  # already stored
        orjson.dumps(record(7, cached_tokens=5000)),  # more cached than prompt
        orjson.dumps(record(8)),
    ]
    answer = client.post("/v1/usage", content=b"\n".join(lines), headers=ingest_headers).json()
    assert (answer["accepted"], answer["duplicates"], answer["rejected"]) == (2, 2, 2)
    assert [e["index"] for e in answer["errors"]] == [1, 4]
    stored = session.scalars(select(UsageRecord).order_by(UsageRecord.id)).all()
    assert [(r.request_id, r.prompt_tokens) for r in stored] == [
        ("req-1", 1000),
        ("req-5", 1000),
        ("req-8", 1000),
    ]
    raws = {r["raw"] for r in client.get("/v1/rejected", headers=read_headers).json()}
    assert {lines[1].decode(), lines[4].decode()} <= raws


def test_counts_beyond_64_bits_are_rejected_records_not_server_errors(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    huge = 2**63 + 10
    anthropic = {"input_tokens": 2**62, "cache_read_input_tokens": 2**62, "output_tokens": 1}
    body = ndjson(
        [
            record(0, prompt_tokens=huge),
            record(1, completion_tokens=huge),
            record(2, ttft_ms=huge),
            record(3, block_size=2**40, block_hashes=[1, 2]),  # a 32-bit column
            {**{k: v for k, v in record(4).items() if k != "prompt_tokens"}, "usage": anthropic},
            record(5),
        ]
    )
    answer = client.post("/v1/usage", content=body, headers=ingest_headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["accepted"] == 1
    assert [e["index"] for e in answer.json()["errors"]] == [0, 1, 2, 3, 4]
    assert stored_count(session) == 1


def _without_tokens(i: int, **extra: object) -> dict[str, object]:
    base = {k: v for k, v in record(i).items() if k not in ("prompt_tokens", "cached_tokens")}
    return {**base, **extra}


@pytest.mark.parametrize("as_array", [False, True], ids=["ndjson", "array"])
def test_the_managed_provider_fields_are_stored(
    client: TestClient, ingest_headers: dict[str, str], session: Session, as_array: bool
) -> None:
    """The bulk NDJSON path, and the array path, store what the shapes give."""
    anthropic = {
        "input_tokens": 12,
        "output_tokens": 40,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 500,
        "cache_creation": {"ephemeral_1h_input_tokens": 500, "ephemeral_5m_input_tokens": 0},
    }
    bedrock = {
        "inputTokens": 10,
        "outputTokens": 2,
        "totalTokens": 312,
        "cacheWriteInputTokens": 300,
    }
    records = [
        _without_tokens(1, usage=anthropic, scenario="ticket-summary"),
        _without_tokens(2, usageMetadata={"promptTokenCount": 800, "cachedContentTokenCount": 512}),
        _without_tokens(3, usage=bedrock),
        record(4, cache_write_tokens=200, cache_ttl_s=86_400, provider="openai"),
        record(5),
    ]
    body = orjson.dumps(records) if as_array else ndjson(records)
    answer = client.post("/v1/usage", content=body, headers=ingest_headers).json()
    assert answer == {"accepted": 5, "duplicates": 0, "rejected": 0, "errors": []}
    rows = session.scalars(select(UsageRecord).order_by(UsageRecord.id)).all()
    assert [
        (r.prompt_tokens, r.cached_tokens, r.cache_write_tokens, r.cache_ttl_s, r.provider)
        for r in rows
    ] == [
        (1512, 1000, 500, 3600, "anthropic"),
        (800, 512, 0, None, "google"),
        (310, 0, 300, None, "bedrock"),
        (1000, 500, 200, 86_400, "openai"),
        (1000, 500, 0, None, None),
    ]
    assert [r.scenario for r in rows] == ["ticket-summary", None, None, None, None]


def test_bad_managed_provider_fields_are_rejected_records(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    body = ndjson(
        [
            record(0, cache_write_tokens=501),  # 1000 in, 500 of them cached
            record(1, cache_ttl_s="1h"),
            record(2, provider=""),
            record(3, scenario="s" * 101),
            _without_tokens(4, usage={"inputTokens": 5, "cacheReadInputTokens": "5"}),
            record(5),
        ]
    )
    answer = client.post("/v1/usage", content=body, headers=ingest_headers).json()
    assert (answer["accepted"], answer["rejected"]) == (1, 5)
    assert [e["error"] for e in answer["errors"]] == [
        "cache_write_tokens must not exceed prompt_tokens - cached_tokens",
        "cache_ttl_s: must be a number of seconds, not the string '1h'",
        "provider: String should have at least 1 character",
        "scenario: String should have at most 100 characters",
        "usage.cacheReadInputTokens must be a whole number >= 0 or null, not '5'",
    ]
    assert stored_count(session) == 1
