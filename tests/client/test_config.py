"""The client's settings (cachewatch_client.config: arguments, then the environment,
then the defaults) and its labels (cachewatch_client.context: `session()` blocks,
nested, in threads and in asyncio tasks)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

import cachewatch_client
from cachewatch_client import Labels, Settings, Shipper, session
from cachewatch_client import config as config_module
from cachewatch_client.context import current
from cachewatch_client.fingerprint import DEFAULT_BLOCK_SIZE
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

ENV = ("CACHEWATCH_URL", "CACHEWATCH_TOKEN", "CACHEWATCH_SERVICE", "CACHEWATCH_DEPLOY")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


# --- Settings.resolve -----------------------------------------------------------------


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["/srv/app/support_bot.py"])
    settings = Settings.resolve()
    assert (settings.url, settings.token, settings.deploy) == (None, None, None)
    assert settings.service == "support_bot"
    assert settings.usage_url is None
    assert settings.block_size == DEFAULT_BLOCK_SIZE
    assert (settings.batch_size, settings.flush_interval_s) == (500, 1.0)
    assert (settings.max_queue, settings.max_queue_bytes) == (10_000, 64 * 1024 * 1024)
    assert (settings.timeout_s, settings.retry_base_s, settings.retry_max_s) == (10.0, 0.5, 30.0)
    assert settings.exit_timeout_s == 5.0


def test_environment_over_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEWATCH_URL", "http://env:8000")
    monkeypatch.setenv("CACHEWATCH_TOKEN", "env-token")
    monkeypatch.setenv("CACHEWATCH_SERVICE", "env-service")
    monkeypatch.setenv("CACHEWATCH_DEPLOY", "env-deploy")
    settings = Settings.resolve()
    assert (settings.url, settings.token, settings.service, settings.deploy) == (
        "http://env:8000",
        "env-token",
        "env-service",
        "env-deploy",
    )
    assert settings.usage_url == "http://env:8000/v1/usage"


def test_arguments_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.setenv(name, "from-env")
    settings = Settings.resolve(
        url="http://arg:9000/", token="arg-token", service="arg-service", deploy="arg-deploy"
    )
    assert (settings.url, settings.token, settings.service, settings.deploy) == (
        "http://arg:9000/",
        "arg-token",
        "arg-service",
        "arg-deploy",
    )
    # One given, the rest from the environment.
    partial = Settings.resolve(service="arg-service")
    assert (partial.url, partial.service) == ("from-env", "arg-service")


def test_empty_environment_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.setenv(name, "")
    monkeypatch.setattr("sys.argv", ["worker"])
    settings = Settings.resolve()
    assert (settings.url, settings.token, settings.deploy) == (None, None, None)
    assert settings.service == "worker"


def test_tuning_arguments() -> None:
    settings = Settings.resolve(url="http://x", batch_size=7, retry_max_s=0.5, block_size=32)
    assert (settings.batch_size, settings.retry_max_s, settings.block_size) == (7, 0.5, 32)
    with pytest.raises(TypeError):
        Settings.resolve(url="http://x", batch_sise=7)
    assert dataclasses.replace(settings, batch_size=8).batch_size == 8
    # Frozen and hashable: one shipper per distinct settings.
    assert hash(settings) == hash(
        Settings.resolve(url="http://x", batch_size=7, retry_max_s=0.5, block_size=32)
    )


@pytest.mark.parametrize(
    ("argv", "service"),
    [
        (["/usr/local/bin/support-bot"], "support-bot"),
        (["/srv/app/serve.py", "--port", "8000"], "serve"),
        (["relative/agent.py"], "agent"),
        # `python -m billing`: argv[0] is the package's __main__.py.
        (["/srv/app/billing/__main__.py"], "billing"),
        (["-c"], "python"),  # `python -c ...`
        (["-"], "python"),  # a script on stdin
        ([""], "python"),  # the interactive interpreter
        ([], "python"),
        (["/x/" + "n" * 150 + ".py"], "n" * 100),
    ],
)
def test_service_defaults_to_the_program_name(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], service: str
) -> None:
    monkeypatch.setattr("sys.argv", argv)
    assert Settings.resolve().service == service
    assert Settings.resolve(service="given").service == "given"


@pytest.mark.parametrize(
    ("url", "usage_url"),
    [
        ("http://cachewatch:8000", "http://cachewatch:8000/v1/usage"),
        ("http://cachewatch:8000/", "http://cachewatch:8000/v1/usage"),
        ("https://obs.example.com/cachewatch//", "https://obs.example.com/cachewatch/v1/usage"),
        (" http://cachewatch:8000 ", "http://cachewatch:8000/v1/usage"),
        (None, None),
        ("", None),
        ("   ", None),
    ],
)
def test_usage_url(url: str | None, usage_url: str | None) -> None:
    settings = dataclasses.replace(Settings.resolve(), url=url)
    assert settings.usage_url == usage_url


def test_configure_sets_the_default_shipper() -> None:
    shipper = cachewatch_client.configure(url=None, service="configured", exit_timeout_s=0.1)
    try:
        assert cachewatch_client.shipper.default_shipper() is shipper
        assert shipper.settings.service == "configured"
        # The same settings, the same shipper (one thread each).
        again = cachewatch_client.configure(url=None, service="configured", exit_timeout_s=0.1)
        assert again is shipper
        assert cachewatch_client.flush(0.1)
        assert cachewatch_client.stats() == shipper.stats()
    finally:
        cachewatch_client.shipper._default.clear()


def test_the_program_name_helper_is_the_default() -> None:
    assert Settings.resolve().service == config_module._program_name()


# --- session(): labels ----------------------------------------------------------------


def test_session_nesting() -> None:
    assert current() == Labels()
    with session("conv-1", tenant="acme", attributes={"a": 1, "b": "x"}) as outer:
        assert outer == current() == Labels("conv-1", "acme", None, None, {"a": 1, "b": "x"})
        with session(scenario="triage", attributes={"b": "y", "c": True}) as inner:
            assert inner == Labels("conv-1", "acme", "triage", None, {"a": 1, "b": "y", "c": True})
            with session("conv-2", deploy="v2"):
                assert current() == Labels(
                    "conv-2", "acme", "triage", "v2", {"a": 1, "b": "y", "c": True}
                )
            assert current() == inner
        assert current() == outer
    assert current() == Labels()


def test_session_is_reset_on_an_exception() -> None:
    with pytest.raises(RuntimeError), session("conv-1"):
        raise RuntimeError("the call failed")
    assert current() == Labels()


def test_labels_over() -> None:
    inner = Labels(session_id="in", attributes={"k": "inner"})
    outer = Labels("out", "t", "s", "d", {"k": "outer", "o": 1})
    assert inner.over(outer) == Labels("in", "t", "s", "d", {"k": "inner", "o": 1})
    assert Labels().over(outer) == outer
    # An empty string is no value: the outer one shows through.
    assert Labels(session_id="").over(outer).session_id == "out"


def test_each_thread_sees_its_own_session() -> None:
    barrier = threading.Barrier(4)
    seen: dict[int, list[Labels]] = {}

    def work(n: int) -> None:
        with session(f"conv-{n}", tenant=f"t-{n}"):
            barrier.wait()  # every thread is inside its block at once
            labels = [current()]
            with session(scenario=f"s-{n}"):
                barrier.wait()
                labels.append(current())
            labels.append(current())
        labels.append(current())
        seen[n] = labels

    with session("main-conv"):
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(5)
        assert current().session_id == "main-conv"  # untouched by the threads

    for n in range(4):
        block = Labels(f"conv-{n}", f"t-{n}")
        # A new thread starts without the labels of the code that started it.
        assert seen[n] == [block, dataclasses.replace(block, scenario=f"s-{n}"), block, Labels()]


def test_a_thread_started_in_a_session_does_not_inherit_it() -> None:
    seen: list[Labels] = []
    with session("conv-1"):
        thread = threading.Thread(target=lambda: seen.append(current()))
        thread.start()
        thread.join(5)
        # Unless the context is carried over explicitly.
        context = contextvars.copy_context()
        with ThreadPoolExecutor(1) as pool:
            carried = pool.submit(context.run, current).result(5)
    assert seen == [Labels()]
    assert carried.session_id == "conv-1"


def test_asyncio_tasks_inherit_and_keep_their_own() -> None:
    async def step(n: int) -> list[Labels]:
        labels = [current()]
        with session(f"conv-{n}", attributes={"task": n}):
            await asyncio.sleep(0.01 * (3 - n))  # the tasks interleave
            labels.append(current())
            await asyncio.sleep(0)
        labels.append(current())
        return labels

    async def main() -> tuple[list[list[Labels]], Labels, Labels]:
        with session(tenant="acme", attributes={"app": "a"}):
            results = await asyncio.gather(*(step(n) for n in range(3)))
            in_block = current()
            threaded = await asyncio.to_thread(current)  # to_thread carries the context
        return results, in_block, threaded

    results, in_block, threaded = asyncio.run(main())
    base = Labels(tenant="acme", attributes={"app": "a"})
    assert in_block == threaded == base
    for n, labels in enumerate(results):
        own = Labels(f"conv-{n}", "acme", attributes={"app": "a", "task": n})
        assert labels == [base, own, base]
    assert current() == Labels()


def test_a_task_created_in_a_block_keeps_its_labels_after_the_block() -> None:
    async def main() -> Labels:
        async def later() -> Labels:
            await asyncio.sleep(0.02)
            return current()

        with session("conv-7"):
            task = asyncio.create_task(later())
        assert current() == Labels()
        return await task

    assert asyncio.run(main()).session_id == "conv-7"


def test_record_reads_the_labels_of_the_block() -> None:
    """A call's labels are read when it starts, in the caller's context: an argument
    wins over the block, the block over the request's own fields."""
    records: list[dict[str, Any]] = []
    settings = Settings.resolve(
        url="http://cachewatch.invalid", service="svc", flush_interval_s=0.01
    )
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"accepted": 1}))
    shipper = Shipper(settings, transport=transport, on_record=records.append)
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "u-1"}
    usage = {"prompt_tokens": 10}
    try:
        with session("conv-1", tenant="acme", scenario="triage", attributes={"k": "block"}):
            cachewatch_client.record(
                request, usage, started=time.time(), request_id="a", shipper=shipper
            )
            cachewatch_client.record(
                request,
                usage,
                started=time.time(),
                request_id="b",
                session_id="conv-arg",
                attributes={"k": "arg"},
                shipper=shipper,
            )
        cachewatch_client.record(
            request, usage, started=time.time(), request_id="c", shipper=shipper
        )
        assert shipper.flush(2)
    finally:
        shipper.close(1)
    by_id = {r["request_id"]: r for r in records}
    assert (by_id["a"]["session_id"], by_id["a"]["tenant"], by_id["a"]["scenario"]) == (
        "conv-1",
        "acme",
        "triage",
    )
    assert by_id["a"]["attributes"] == {"k": "block"}
    assert (by_id["b"]["session_id"], by_id["b"]["tenant"]) == ("conv-arg", "acme")
    assert by_id["b"]["attributes"] == {"k": "arg"}
    assert "session_id" not in by_id["c"] and by_id["c"]["tenant"] == "u-1"
