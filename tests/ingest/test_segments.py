"""A record's `segments` with their optional `norm_hash` (contract section 1), through
`POST /v1/usage` (NDJSON lines on the fast path, a JSON array on the dict path, a
line the fast path declines on the validated path), LiteLLM payloads and OTLP spans,
into the database: stored only when sent, refused with its reason when bad."""

from typing import Any

import jsonschema
import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from cachewatch_client.fingerprint import fingerprint
from service.ingest.records import MAX_HASH_LENGTH
from service.models import RejectedRecord, UsageRecord
from tests.ingest.test_litellm import payload

BODY = {
    "model": "gpt-4.1-mini",
    "messages": [
        {"role": "system", "content": "You are terse.\n\n"},
        {"role": "user", "content": "Where is my order?"},
    ],
}
# As sent: fingerprint()'s own segments, then segments without norm_hash, with a
# null one (not sent), with an int one (as for `hash`, up to uint64).
SEGMENTS: list[dict[str, Any]] = [
    *fingerprint(BODY)["segments"],
    {"name": "legacy", "hash": "h-1", "tokens": 10},
    {"name": "nulled", "hash": "h-2", "tokens": 11, "norm_hash": None},
    {"name": "ints", "hash": 7, "tokens": 12, "norm_hash": 2**64 - 1},
]
# As stored: norm_hash only where one was sent.
STORED = [*SEGMENTS[:2], SEGMENTS[2], {"name": "nulled", "hash": "h-2", "tokens": 11}, SEGMENTS[4]]


def record(request_id: str, segments: Any = SEGMENTS) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "ts": 1_714_564_800,
        "service": "assistant",
        "model": "m",
        "prompt_tokens": 1000,
        "segments": segments,
    }


def post(client: TestClient, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def stored_segments(session: Session) -> dict[str, Any]:
    rows = session.execute(select(UsageRecord.request_id, UsageRecord.segments))
    return {request_id: segments for request_id, segments in rows}


def test_fingerprints_norm_hash_is_sent_for_every_segment() -> None:
    assert [s["name"] for s in SEGMENTS[:2]] == ["system", "message[0]"]
    assert all(len(s["norm_hash"]) == 16 for s in SEGMENTS[:2])


def test_every_ingest_path_stores_norm_hash_only_when_sent(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    # Every line a record the fast path takes: the whole-body path (ingest.bulk).
    bulk = orjson.dumps(record("bulk-1")) + b"\n" + orjson.dumps(record("bulk-2"))
    assert post(client, ingest_headers, bulk)["accepted"] == 2
    # An unknown key inside a segment: the line decoder declines that line, so the
    # body goes line by line, the first on the fast path (decode_line), the second
    # on the validated path (pydantic), which ignores the key.
    unknown = [{**s, "note": "x"} for s in SEGMENTS]
    lines = orjson.dumps(record("line")) + b"\n" + orjson.dumps(record("declined", unknown))
    assert post(client, ingest_headers, lines)["accepted"] == 2
    # Arrays and single objects: the dict path (fast.convert_value).
    array = orjson.dumps([record("array-1"), record("array-2", unknown)])
    assert post(client, ingest_headers, array)["accepted"] == 2
    single = orjson.dumps(record("single"))
    assert post(client, ingest_headers, single)["accepted"] == 1
    got = stored_segments(session)
    assert set(got) == {"bulk-1", "bulk-2", "line", "declined", "array-1", "array-2", "single"}
    for request_id, segments in got.items():
        assert segments == STORED, request_id
        assert "norm_hash" not in segments[2] and "norm_hash" not in segments[3]


BAD_NORM_HASHES: dict[str, bytes] = {
    "a bool": b"true",
    "a float": b"1.5",
    "an object": b'{"h": 1}',
    "one character too long": orjson.dumps("h" * (MAX_HASH_LENGTH + 1)),
    "an int beyond uint64": str(2**64).encode(),
    "an int below int64": str(-(2**63) - 1).encode(),
}


@pytest.mark.parametrize("value", BAD_NORM_HASHES.values(), ids=list(BAD_NORM_HASHES))
def test_a_bad_norm_hash_is_rejected_with_its_name(
    client: TestClient, ingest_headers: dict[str, str], session: Session, value: bytes
) -> None:
    def line(request_id: str) -> bytes:
        head = orjson.dumps(record(request_id, []))[: -len(b'"segments":[]}')]
        return head + b'"segments":[{"name":"s","hash":"h","tokens":1,"norm_hash":' + value + b"}]}"

    ndjson = line("bad-line") + b"\n" + line("bad-line-2")
    array = b"[" + line("bad-array") + b"]"
    for body in (ndjson, array):
        answer = post(client, ingest_headers, body)
        assert answer["accepted"] == 0 and answer["rejected"] == body.count(b"request_id")
        for error in answer["errors"]:
            assert error["error"].startswith("segments.0.norm_hash"), error
    assert stored_segments(session) == {}
    reasons = session.scalars(select(RejectedRecord.reason)).all()
    assert len(reasons) == 3 and all("segments.0.norm_hash" in r for r in reasons)


def test_a_norm_hash_at_the_hash_limit_is_stored(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    longest = [{"name": "s", "hash": "h", "tokens": 1, "norm_hash": "😀" * MAX_HASH_LENGTH}]
    body = orjson.dumps(record("longest-line", longest)) + b"\n"
    body += orjson.dumps(record("longest-line-2", longest))
    assert post(client, ingest_headers, body)["accepted"] == 2
    assert (
        post(client, ingest_headers, orjson.dumps([record("longest-array", longest)]))["accepted"]
        == 1
    )
    assert all(segments == longest for segments in stored_segments(session).values())


def test_a_litellm_payload_carries_norm_hash_from_its_metadata(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    metadata = {
        **payload()["metadata"],
        "requester_metadata": {"cachewatch": {"segments": SEGMENTS}},
    }
    body = orjson.dumps([payload(metadata=metadata)])
    assert post(client, ingest_headers, body)["accepted"] == 1
    assert stored_segments(session) == {"chatcmpl-abc": STORED}


def test_an_otlp_span_carries_norm_hash_in_cachewatch_segments(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    def attribute(key: str, value: Any) -> dict[str, Any]:
        kind = "intValue" if isinstance(value, int) else "stringValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    start = 1_714_564_800_000_000_000
    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "name": "chat m",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 10**9),
        "attributes": [
            attribute("gen_ai.request.model", "m"),
            attribute("gen_ai.usage.input_tokens", 1000),
            attribute("gen_ai.response.id", "span-1"),
            attribute("cachewatch.segments", orjson.dumps(SEGMENTS).decode()),
        ],
    }
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": [attribute("service.name", "assistant")]},
                "scopeSpans": [{"spans": [span]}],
            }
        ]
    }
    answer = client.post(
        "/v1/otlp/v1/traces",
        content=orjson.dumps(request),
        headers={**ingest_headers, "Content-Type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    assert stored_segments(session) == {"span-1": STORED}


def test_the_openapi_schema_lists_norm_hash_as_ingestion_takes_it(client: TestClient) -> None:
    body = client.get("/openapi.json").json()["paths"]["/v1/usage"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]["anyOf"][0]
    segment = schema["properties"]["segments"]["items"]
    assert set(segment["properties"]) == {"name", "hash", "tokens", "norm_hash"}
    assert "norm_hash" not in segment["required"]
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(record("ok"))
    for bad in (True, 1.5, {"h": 1}, "h" * (MAX_HASH_LENGTH + 1)):
        segments = [{"name": "s", "hash": "h", "tokens": 1, "norm_hash": bad}]
        assert not validator.is_valid(record("bad", segments)), bad
