from fastapi.testclient import TestClient


def test_healthz_reports_the_database(client: TestClient) -> None:
    answer = client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json()["status"] == "ok"
    assert answer.json()["database"] in ("sqlite", "postgresql")
