"""LiteLLM itself (the PyPI package, `mock_response`: no provider is called) with its
`generic_api` logging callback configured by its environment variables
(GENERIC_LOGGER_ENDPOINT, GENERIC_LOGGER_HEADERS) and pointed at a live `cachewatch
serve`: the StandardLoggingPayloads it posts become stored records.

LiteLLM runs in a child process: its configuration is read from the environment at
import time, and its callbacks are global state. The callback batches in memory and
flushes on a timer; the child waits for the queue to hold every event and flushes it
itself, so the test never depends on the timer."""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from service.models import RejectedRecord, UsageRecord
from tests.conftest import PROJECT_ROOT, LiveServer

CALLS = """
import asyncio, json, sys

import litellm
from litellm.integrations.custom_logger import CustomLogger
from litellm.integrations.generic_api.generic_api_callback import GenericAPILogger
from litellm.types.utils import ModelResponse, PromptTokensDetailsWrapper, Usage

LOG_FORMAT = sys.argv[1]
CALLER = {"cachewatch_service": "assistant", "cachewatch_deploy": "v7"}
MODEL = "gpt-4o-mini"
sent = []


class Capture(CustomLogger):
    # What the generic_api callback posts, kept to compare with what was stored.
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        sent.append(kwargs["standard_logging_object"])


def response(i, usage):
    return ModelResponse(
        id=f"chatcmpl-litellm-{i}",
        model="gpt-4o-mini",
        choices=[{"message": {"role": "assistant", "content": "hi"}, "index": 0}],
        usage=usage,
    )


async def main():
    # Configured from GENERIC_LOGGER_ENDPOINT / GENERIC_LOGGER_HEADERS. The "generic_api"
    # string in litellm.callbacks resolves to this class only when litellm-enterprise
    # (the proxy extra) is installed; with the bare SDK the instance is registered.
    generic = GenericAPILogger(log_format=None if LOG_FORMAT == "json_array" else LOG_FORMAT)
    litellm.callbacks = [generic, Capture()]
    messages = [{"role": "user", "content": "hello"}]
    for i in range(3):
        usage = Usage(
            prompt_tokens=2000 + i,
            completion_tokens=10,
            total_tokens=2010 + i,
            prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=1536),
        )
        await litellm.acompletion(
            model=MODEL,
            messages=messages,
            mock_response=response(i, usage),
            metadata={"requester_metadata": CALLER},
        )
    # No cache fields at all: nothing cached.
    plain = Usage(prompt_tokens=300, completion_tokens=3, total_tokens=303)
    await litellm.acompletion(model=MODEL, messages=messages, mock_response=response(3, plain))
    try:  # a failed call: LiteLLM reports it too; cachewatch keeps it as rejected
        await litellm.acompletion(model=MODEL, messages=messages, mock_response=Exception("boom"))
    except Exception:
        pass
    for _ in range(400):  # the success/failure handlers run as tasks: wait for all 5
        if len(generic.log_queue) >= 5:
            break
        await asyncio.sleep(0.025)
    queued = len(generic.log_queue)
    await generic.flush_queue()
    print(json.dumps({"queued": queued, "left": len(generic.log_queue), "sent": sent}))


asyncio.run(main())
"""


@pytest.fixture(scope="module")
def litellm_available() -> None:
    if importlib.util.find_spec("litellm") is None:
        pytest.skip("litellm is not installed (dev extra)")


def run_litellm(server: LiveServer, token: str, log_format: str, workdir: Path) -> dict:
    script = workdir / "calls.py"
    script.write_text(textwrap.dedent(CALLS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC"))}
    env.update(
        GENERIC_LOGGER_ENDPOINT=f"{server.url}/v1/usage",
        GENERIC_LOGGER_HEADERS=f"Authorization=Bearer {token}",
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # no fetch of the cost map from the internet
        LITELLM_TELEMETRY="False",
        OPENAI_API_KEY="sk-not-used",
        NO_PROXY="127.0.0.1,localhost",
    )
    done = subprocess.run(
        [sys.executable, str(script), log_format],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    last = done.stdout.decode().strip().splitlines()[-1]
    return orjson.loads(last)


@pytest.mark.parametrize("log_format", ["json_array", "ndjson"])
def test_litellm_generic_api_callback(
    litellm_available: None, live_server: LiveServer, tmp_path: Path, log_format: str
) -> None:
    outcome = run_litellm(live_server, live_server.token("ingest"), log_format, tmp_path)
    assert outcome["queued"] == 5 and outcome["left"] == 0
    sent = {p["id"]: p for p in outcome["sent"]}

    engine = create_engine(live_server.database_url)
    try:
        with Session(engine) as session:
            rows = {r.request_id: r for r in session.scalars(select(UsageRecord))}
            rejected = session.scalars(select(RejectedRecord)).all()
    finally:
        engine.dispose()

    assert set(rows) == {f"chatcmpl-litellm-{i}" for i in range(4)}
    for i in range(3):
        row = rows[f"chatcmpl-litellm-{i}"]
        payload = sent[row.request_id]
        assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens) == (2000 + i, 1536, 10)
        assert (row.service, row.deploy, row.model) == ("assistant", "v7", "gpt-4o-mini")
        assert row.ts_us == round(payload["startTime"] * 1_000_000)
        ttft = (payload["completionStartTime"] - payload["startTime"]) * 1000
        assert row.ttft_ms == pytest.approx(ttft, abs=1e-3)
        latency = (payload["endTime"] - payload["startTime"]) * 1000
        assert row.latency_ms == pytest.approx(latency, abs=1e-3)
        assert row.replica == "api.openai.com"
        assert (row.provider, row.cache_write_tokens) == ("openai", 0)
    plain = rows["chatcmpl-litellm-3"]
    assert (plain.prompt_tokens, plain.cached_tokens, plain.service) == (300, 0, "litellm")
    assert plain.deploy is None

    # The failed call is not a usage record, and is not dropped silently either.
    assert len(rejected) == 1
    assert "failure" in rejected[0].reason
    assert orjson.loads(rejected[0].raw)["call_type"] == "acompletion"
