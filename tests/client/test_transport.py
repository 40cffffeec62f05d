"""cachewatch_client.transport: the tap sees an answer however the transport under
it hands it over, streamed as from the network, or read already, as a stub's
`httpx.Response(content=...)` / `json=` is (before, such a call was never recorded
nor counted)."""

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

import cachewatch_client
from cachewatch_client import Settings, Shipper
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = {"id": "chatcmpl-1", "model": "m", "choices": [], "usage": {"prompt_tokens": 5}}


@pytest.fixture
def shipped() -> Iterator[tuple[Shipper, list[dict[str, Any]]]]:
    """A shipper whose records are kept as built; nothing listens at its URL."""
    records: list[dict[str, Any]] = []
    settings = replace(Settings.resolve(url="http://127.0.0.1:9", service="s"), retry_base_s=5)
    shipper = Shipper(settings, on_record=records.append)
    yield shipper, records
    shipper.close(0)


def built(records: list[dict[str, Any]], n: int = 1) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 5
    while len(records) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return records


@pytest.mark.parametrize(
    "answer",
    [
        lambda: httpx.Response(200, json=ANSWER),
        lambda: httpx.Response(200, content=httpx.Response(200, json=ANSWER).content),
        lambda: httpx.Response(
            200, content=iter([b'{"id": "chatcmpl-1", ', b'"usage": {"prompt_tokens": 5}}'])
        ),
    ],
    ids=["json", "content", "streamed"],
)
def test_a_stubbed_answer_is_recorded(
    shipped: tuple[Shipper, list[dict[str, Any]]], answer: Any
) -> None:
    shipper, records = shipped
    client = httpx.Client(transport=httpx.MockTransport(lambda request: answer()))
    cachewatch_client.instrument(client, shipper=shipper)
    assert (
        client.post("http://provider/v1/chat/completions", json=BODY).json()["id"] == "chatcmpl-1"
    )
    (record,) = built(records)
    assert record["request_id"] == "chatcmpl-1"
    assert record["usage"] == {"prompt_tokens": 5}
    assert shipper.stats().queued == 1


@pytest.mark.anyio
async def test_an_async_stubbed_answer_is_recorded(
    shipped: tuple[Shipper, list[dict[str, Any]]],
) -> None:
    shipper, records = shipped

    async def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=ANSWER)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        cachewatch_client.instrument(client, shipper=shipper)
        await client.post("http://provider/v1/chat/completions", json=BODY)
    (record,) = built(records)
    assert record["request_id"] == "chatcmpl-1"


def test_other_requests_pass_untouched(shipped: tuple[Shipper, list[dict[str, Any]]]) -> None:
    shipper, records = shipped
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json=ANSWER)))
    cachewatch_client.instrument(client, shipper=shipper)
    client.get("http://provider/v1/models")
    client.post("http://provider/v1/messages/count_tokens", json=BODY)
    time.sleep(0.1)
    assert records == [] and shipper.stats().queued == 0
