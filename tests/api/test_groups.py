"""GET /v1/groups and the group filters of /v1/metrics (contract sections 4b and 6):
each group's totals equal /v1/metrics filtered to it, at every filter level and over
ranges with ragged edges; the filters' bad input and auth."""

import random
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from service.rfc3339 import us_to_rfc3339

T0 = 1_764_457_200  # 2025-11-29T23:00:00Z: the data crosses midnight
US = 1_000_000


def records(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prefix = rng.randrange(4)
        out.append(
            {
                "request_id": f"g{seed}-{i}",
                "ts": T0 + rng.uniform(0, 3 * 3600),
                "service": rng.choice(["a", "b"]),
                "model": rng.choice(["m", "m2"]),
                "prompt_tokens": 300,
                "cached_tokens": rng.choice([0, 100, 200, 300]),
                "block_size": 100,
                "block_hashes": [prefix, 100 + prefix, 1000 + i],
                "replica": rng.choice(["r1", "r2", None]),
                "deploy": rng.choice(["v1", "v2", None]),
                "scenario": rng.choice(["chat", "summary", None]),
                "tenant": rng.choice(["acme", "globex", "initech", None]),
                "ttft_ms": rng.choice([None, rng.uniform(20, 900)]),
            }
        )
    return out


@pytest.fixture
def posted(client: TestClient, ingest_headers: dict[str, str]) -> None:
    rows = records(700, seed=5)
    random.Random(6).shuffle(rows)
    for start in range(0, len(rows), 100):  # several passes, late records among them
        part = rows[start : start + 100]
        body = b"\n".join(orjson.dumps({k: v for k, v in r.items() if v is not None}) for r in part)
        answer = client.post("/v1/usage", content=body, headers=ingest_headers)
        assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text


def get(client: TestClient, headers: dict[str, str], path: str, **params: Any) -> Any:
    answer = client.get(path, params={k: v for k, v in params.items() if v}, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


RANGES = [
    (None, None),
    (us_to_rfc3339((T0 + 1234) * US), us_to_rfc3339((T0 + 9000) * US)),
]


@pytest.mark.parametrize("by", ["scenario", "tenant", "deploy"])
@pytest.mark.parametrize(
    ("service", "model"), [("a", "m"), ("b", None), (None, "m2"), (None, None)]
)
@pytest.mark.parametrize(("start", "end"), RANGES)
def test_each_groups_totals_equal_the_metrics_filtered_to_it(
    client: TestClient,
    read_headers: dict[str, str],
    posted: None,
    by: str,
    service: str | None,
    model: str | None,
    start: str | None,
    end: str | None,
) -> None:
    scope = {"service": service, "model": model, "from": start, "to": end}
    found = get(client, read_headers, "/v1/groups", by=by, **scope)
    values = {"scenario": {"chat", "summary"}, "tenant": {"acme", "globex", "initech"}}
    assert {g["value"] for g in found} == values.get(by, {"v1", "v2"})
    assert [g["prompt_tokens"] for g in found] == sorted(
        (g["prompt_tokens"] for g in found), reverse=True
    )
    for group in found:
        totals = get(client, read_headers, "/v1/metrics", **scope, **{by: group["value"]})["totals"]
        assert totals["requests"] > 0
        for name, value in group.items():
            if name != "value":
                assert value == totals[name], (group["value"], name)
    whole = get(client, read_headers, "/v1/metrics", **scope)["totals"]
    assert sum(g["requests"] for g in found) < whole["requests"]  # records without one


def test_a_filter_counts_only_the_groups_records(
    client: TestClient, read_headers: dict[str, str], posted: None
) -> None:
    rows = records(700, seed=5)
    mine = [r for r in rows if r["service"] == "a" and r.get("tenant") == "acme"]
    totals = get(client, read_headers, "/v1/metrics", service="a", tenant="acme")["totals"]
    assert totals["requests"] == len(mine)
    assert totals["cached_tokens"] == sum(r["cached_tokens"] for r in mine)
    none = get(client, read_headers, "/v1/metrics", service="a", tenant="nobody")["totals"]
    assert none["requests"] == 0


def test_bad_group_input_is_refused_with_a_reason(
    client: TestClient, read_headers: dict[str, str]
) -> None:
    two = client.get("/v1/metrics?scenario=chat&tenant=acme", headers=read_headers)
    assert two.status_code == 404 and "one of" in two.text
    assert client.get("/v1/groups", headers=read_headers).status_code == 422
    bad = client.get("/v1/groups?by=user", headers=read_headers)
    assert bad.status_code == 422 and "by" in bad.text
    long = client.get("/v1/metrics?scenario=" + "x" * 101, headers=read_headers)
    assert long.status_code == 422
    assert client.get("/v1/groups?by=tenant").status_code == 401
    assert client.get("/v1/groups?by=tenant", headers=read_headers).json() == []
