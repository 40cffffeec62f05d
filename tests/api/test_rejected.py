import base64

from fastapi.testclient import TestClient


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
