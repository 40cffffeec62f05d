"""`instrument(client)`: record every call an SDK client makes; `record(...)`: the
same for a call made any other way.

    client = cachewatch_client.instrument(openai.OpenAI(), service="support-bot")

`client` is an `openai.OpenAI` / `AsyncOpenAI` (also Azure's), an
`anthropic.Anthropic` / `AsyncAnthropic`, or a bare `httpx.Client` /
`AsyncClient`. The SDK clients keep their `httpx` client in `_client`; its
transports (the default one and any proxy mounts) are wrapped in the tap of
module `transport`. Clients made from it with `with_options()` or `copy()`
share that `httpx` client, so they are recorded too. Instrumenting a client again
replaces its settings.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, TypeVar

from .calls import Call
from .config import Settings
from .context import Labels, current
from .replies import reply_of_object
from .shipper import Shipper, default_shipper, shipper_for
from .transport import Tap, is_tap, tap_classes

Client = TypeVar("Client")


def instrument(
    client: Client,
    *,
    service: str | None = None,
    deploy: str | None = None,
    url: str | None = None,
    token: str | None = None,
    session_id: str | None = None,
    tenant: str | None = None,
    scenario: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    block_size: int | None = None,
    shipper: Shipper | None = None,
) -> Client:
    """Record every Chat Completions, Responses and Messages call `client` makes
    (module docstring); returns `client` itself."""
    http = _http_client(client)
    shipper = shipper or _shipper(url, token, service, deploy)
    tap = Tap(
        shipper,
        service=service or shipper.settings.service,
        block_size=block_size or shipper.settings.block_size,
        labels=Labels(session_id, tenant, scenario, deploy, dict(attributes or {})),
        defaults=_defaults(shipper),
    )
    _wrap(http, tap)
    return client


def record(
    request: Mapping[str, Any],
    response: Any,
    *,
    started: float,
    first_token: float | None = None,
    finished: float | None = None,
    service: str | None = None,
    deploy: str | None = None,
    session_id: str | None = None,
    tenant: str | None = None,
    scenario: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    replica: str | None = None,
    prompt_ids: Sequence[int] | None = None,
    block_size: int | None = None,
    shipper: Shipper | None = None,
) -> bool:
    """Queue the record of a call made without an instrumented client: `request` is
    the body sent, `response` the answer (an SDK object, its dict, or its bare
    `usage`), times are `time.time()` values. False when it was not queued
    (counted, as for instrumented calls). Never raises for a bad response: that is
    counted in `errors`."""
    shipper = shipper or default_shipper()
    try:
        reply = reply_of_object(response)
    except TypeError:
        shipper.count(errors=1)
        return False
    labels = Labels(session_id, tenant, scenario, deploy)
    call = Call(
        request=request,
        started=started,
        labels=labels.over(current()).over(_defaults(shipper)),
        service=service or shipper.settings.service,
        block_size=block_size or shipper.settings.block_size,
        reply=reply,
        first_token=first_token,
        finished=finished,
        request_id=request_id,
        replica=replica,
        prompt_ids=prompt_ids,
        attributes=dict(attributes or {}),
    )
    return shipper.submit(call)


def _defaults(shipper: Shipper) -> Labels:
    """The labels of the settings (`CACHEWATCH_DEPLOY`): defaults, so an argument and
    then a `session()` block win over them."""
    return Labels(deploy=shipper.settings.deploy)


def _shipper(
    url: str | None, token: str | None, service: str | None, deploy: str | None
) -> Shipper:
    if url is None and token is None and service is None and deploy is None:
        return default_shipper()
    return shipper_for(Settings.resolve(url=url, token=token, service=service, deploy=deploy))


def _http_client(client: Any) -> Any:
    """The httpx (or httpx2) client an SDK client sends through, or `client` itself
    when it is one."""
    for candidate in (client, getattr(client, "_client", None)):
        module = _httpx_module(candidate)
        if module is not None and isinstance(candidate, module.Client | module.AsyncClient):
            return candidate
    raise TypeError(
        "instrument() takes an openai or anthropic SDK client, or an httpx client; "
        f"got {type(client).__name__}"
    )


def _httpx_module(candidate: Any) -> ModuleType | None:
    """The module (httpx, httpx2) whose `Client` or `AsyncClient` `candidate` is:
    the SDKs' clients subclass them."""
    for cls in type(candidate).__mro__:
        module = sys.modules.get(cls.__module__.split(".")[0])
        if cls.__name__ in ("Client", "AsyncClient") and hasattr(module, "BaseTransport"):
            return module
    return None


def _wrap(http: Any, tap: Tap) -> None:
    """Put `tap` on `http`'s transport and its proxy mounts (private fields of
    httpx's clients, stable across its releases and in httpx2)."""
    module = _httpx_module(http)
    assert module is not None
    classes = tap_classes(module)
    wrapper = classes.async_ if isinstance(http, module.AsyncClient) else classes.sync
    http._transport = _tapped(http._transport, tap, wrapper)
    mounts: dict[Any, Any] = http._mounts
    for pattern, transport in mounts.items():
        if transport is not None:
            mounts[pattern] = _tapped(transport, tap, wrapper)


def _tapped(transport: Any, tap: Tap, wrapper: Any) -> Any:
    if is_tap(transport):
        transport.tap = tap
        return transport
    return wrapper(transport, tap)
