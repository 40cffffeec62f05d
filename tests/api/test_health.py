from fastapi.testclient import TestClient


def test_healthz_says_ok_and_nothing_else(client: TestClient) -> None:
    """Anyone may ask, so the answer names no component (not the database engine)."""
    answer = client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}
    for engine in ("sqlite", "postgres"):
        assert engine not in answer.text.lower()
