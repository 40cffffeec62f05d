import base64
import gzip

from fastapi.testclient import TestClient

from service.settings import Settings

GZIP = {"Content-Encoding": "gzip"}


def test_binary_bodies_come_back_as_base64_and_pages_work(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    broken = b"\x1f\x8b\x08\x00\xff\xfe broken"
    client.post("/v1/usage", content=broken, headers=ingest_headers)
    client.post("/v1/usage", content=b'{"nope": 1}', headers=ingest_headers)
    newest, oldest = client.get("/v1/rejected", headers=read_headers).json()
    assert newest["raw"] == '{"nope": 1}' and newest["raw_encoding"] == "utf-8"
    assert newest["index"] == 0 and "request_id" in newest["reason"]
    assert oldest["raw_encoding"] == "base64"
    assert base64.b64decode(oldest["raw"]) == broken
    page = client.get(
        "/v1/rejected", params={"before_id": newest["id"], "limit": 5}, headers=read_headers
    ).json()
    assert [r["id"] for r in page] == [oldest["id"]]


def test_a_flood_keeps_a_sample_and_says_how_many_more_were_rejected(
    client: TestClient,
    settings: Settings,
    ingest_headers: dict[str, str],
    read_headers: dict[str, str],
) -> None:
    """1,000,000 `{}` lines in a 2,945-byte gzip body made 1,000,000 rows; the answer
    still counts every rejected record, and GET /v1/rejected says what was not kept."""
    settings.rejected_sample_per_reason = 2
    body = gzip.compress(b"{}\n" * 5000)
    answer = client.post("/v1/usage", content=body, headers={**ingest_headers, **GZIP})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rejected"] == 5000
    assert [e["index"] for e in answer.json()["errors"]] == list(range(100))
    listed = client.get("/v1/rejected", headers=read_headers).json()
    assert [(r["index"], r["raw"]) for r in listed] == [(None, ""), (1, "{}"), (0, "{}")]
    assert listed[0]["reason"] == (
        f"{listed[1]['reason']} [and 4,998 more records with this reason in this body "
        "were not kept]"
    )
